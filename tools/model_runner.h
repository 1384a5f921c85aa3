// What the `tessera` command line does with a model file, as a library the
// CLI, the tests and the benchmarks share: import and compile an ONNX model
// for a device with a precision name, make inputs, and run them through the
// Pipeline.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model_io.h"
#include "tessera/cnn/pipeline.h"
#include "tessera/graph/host_tail.h"
#include "tessera/image/image.h"
#include "tessera/runtime/compiled_model.h"

namespace tessera::tools {

struct ModelOptions {
  std::string precision = "float32";  // float32 | bfloat16 | bfloat8_b (weights; bfloat16 activations)
  int64_t batch = 1;                  // fills symbolic (and the leading) input dims
  std::vector<int64_t> input_shape;   // the first input's full shape, when given (dynamic H, W)
  std::map<std::string, std::vector<int64_t>> input_shapes;  // by input name (the files given); input_shape wins
  bool optimize = true;
  std::string math_fidelity =
      "HiFi4";  // LoFi | HiFi2 | HiFi3 | HiFi4 (below HiFi4: Winograd 3x3 convs; LoFi on AMX: bfloat16 operands)
  std::string micro_batch = "auto";        // auto | off | images per group (runtime::CompileOptions::micro_batch)
  std::string model_name;                  // a compiled image's model (empty: its only one)
  std::vector<std::string> intermediates;  // runtime::CompileOptions::intermediates_to_save
  // How convs choose their kernels (perfmodel/conv_choosers.h): heuristic |
  // measured (timed once, cached in `select_cache`, default
  // default_conv_cache_path()) | predicted (the model file `predictor`).
  std::string select = "heuristic";
  std::string predictor, select_cache;
  // Per-op precision (runtime/precision.h): an AMP level (-1: the config
  // file's, else 0) and a rules file (--precision-config).
  int amp_level = -1;
  std::string precision_config;
  std::string numerics = "fast";  // fast | tt (runtime::Numerics)
  uint32_t workers = 0;           // the device's worker threads (the measured cache's machine key)
  bool select_verbose = false;
};

// Whether `path` names a compiled image (.tsi) rather than an ONNX file.
bool is_image_file(const std::string& path);

// INVALID_ARGUMENT for an unknown precision, math fidelity, micro-batch or
// --select setting, a precision config that does not parse; a predictor or
// precision config file that does not load (its error).
StatusOr<runtime::CompileOptions> compile_options_for(const ModelOptions& options);

struct LoadedModel {
  std::unique_ptr<runtime::CompiledModel> model;
  double import_ms = 0, compile_ms = 0;  // an image: reading and verifying it, lowering it
  Shape input_shape;                     // the first input's
  bool from_image = false;
  std::vector<std::string> notes;                        // an image's load notes (image::LoadedModel::notes)
  std::optional<runtime::CompileOptions> image_options;  // an image's: the options it was compiled with
  // The nodes after a data-dependent shape (graph/host_tail.h): `model` is
  // the rest, and the tail runs on its outputs (finish_outputs).
  std::optional<graph::HostTail> tail;
};

// The model's output names: the tail's (the whole model's) where there is one.
std::vector<std::string> output_names(const LoadedModel& m);
// The model's outputs from the outputs `m.model` returned (host float32
// tensors, in its order): as they are, or through the host tail.
StatusOr<std::vector<graph::HostTensor>> finish_outputs(const LoadedModel& m, const std::vector<Tensor>& outputs);

// Imports the ONNX file at `path` with the batch and shapes of `options`
// and infers its shapes (`import_ms`: how long it took). A model with a
// data-dependent output shape leaves its host tail in `tail`; with no
// `tail` to take it, UNIMPLEMENTED naming the node (images and `compare`
// do not hold one yet).
StatusOr<graph::Graph> import_graph(const std::string& path, const ModelOptions& options, double* import_ms,
                                    std::optional<graph::HostTail>* tail = nullptr);

// The model of `img` named `name`, or its only one when `name` is empty
// (INVALID_ARGUMENT listing them when it has several).
StatusOr<size_t> image_model_index(const image::Image& img, const std::string& name);

// Imports `path` with the batch, compiles it for `device`; or loads the
// model of a compiled image (.tsi), whose compile options are fixed:
// INVALID_ARGUMENT when `options` asks for others.
StatusOr<LoadedModel> load_model(const std::string& path, Device& device, const ModelOptions& options);

// The shapes the model leaves open (symbolic dims, the batch) from the input
// files read for it (model_io.h's read_inputs): options.batch and
// input_shapes (--shape in input_shape keeps the first input's).
Status shapes_from_inputs(const std::vector<DeclaredInput>& declared, const std::map<std::string, Tensor>& files,
                          ModelOptions& options);
// One host float32 tensor per input of `model`: its file's, else fixed-seed
// random values (random_inputs, seeded by the input's index).
StatusOr<std::vector<Tensor>> host_inputs(const runtime::CompiledModel& model,
                                          const std::map<std::string, Tensor>& files);

// "trace,2cq" / "notrace,1cq" / "trace,2cq,io" (pipelined I/O) -> PipelineConfig.
StatusOr<cnn::PipelineConfig> parse_pipeline_config(const std::string& text);

// Host float32 inputs: `count` fixed-seed uniform [-1, 1) tensors of `shape`.
std::vector<Tensor> random_inputs(const Shape& shape, int count, uint32_t seed = 0);

// Runs host inputs through a Pipeline of `config` and returns host outputs
// (float32) in input order; a model with taps (intermediates_to_save) fills
// `intermediates` from the Pipeline's intermediates queue, per input.
StatusOr<std::vector<cnn::ModelOutput>> run_pipeline(runtime::CompiledModel& model, Device& device,
                                                     const cnn::PipelineConfig& config,
                                                     const std::vector<cnn::Frame>& frames,
                                                     std::vector<std::vector<Tensor>>* intermediates = nullptr);

}  // namespace tessera::tools
