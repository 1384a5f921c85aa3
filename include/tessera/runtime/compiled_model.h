// A compiled model: a graph (graph/graph.h) lowered onto a device's ops.
//
//   TS_ASSIGN_OR_RETURN(auto g, importer::import_onnx("resnet50.onnx"));
//   TS_ASSIGN_OR_RETURN(auto model, runtime::CompiledModel::compile(std::move(g), *device, {}));
//   TS_ASSIGN_OR_RETURN(auto outs, model->run({device_input}));        // or:
//   cnn::MultiInputModel m = model->pipeline_model();                  // for the Pipeline
//
// Compile runs the passes (graph/passes.h), assigns layouts (4D images
// live as NHWC on the device; an NCHW view is made only where an op needs
// one), assigns dtypes (float32, or bfloat16 activations with float32 /
// bfloat16 / bfloat8_b / bfloat4_b conv and matmul weights), uploads the
// constants and plans liveness: every intermediate is released after its
// last reader, so the device's allocator reuses its memory within a run,
// and inside a captured trace a run allocates nothing at all.
//
// Ops with no device kernel for their attributes run on the host reference
// kernel (graph/host_eval.h) as one device launch: the model still runs,
// and CompileReport::fallbacks names each such node and why.
//
// Inputs are device tensors of each graph input's shape (NCHW as in the
// file), float32 ROW_MAJOR; outputs are float32 ROW_MAJOR in the graph's
// shapes, on the device.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/cnn/executor.h"
#include "tessera/cnn/layers.h"
#include "tessera/graph/graph.h"
#include "tessera/graph/passes.h"
#include "tessera/ops/compute_config.h"
#include "tessera/ops/conv2d.h"
#include "tessera/runtime/precision.h"
#include "tessera/tensor/tensor.h"

namespace tessera::runtime {

struct CompileOptions {
  DataType dtype = DataType::FLOAT32;          // activations: FLOAT32 or BFLOAT16
  DataType weights_dtype = DataType::FLOAT32;  // conv / matmul weights; bfloat16 activations need a non-float32 one
  bool optimize = true;                        // graph passes (fold, fuse)
  bool allow_fallback = true;                  // false: ops without a device kernel are an error
  // Per-conv sharding: a heuristic choice (the layout with the smallest
  // per-core L1 estimate, conv2d_l1.h's auto_shard_conv2d, kept when it fits
  // the device's L1; DRAM interleaved when not) is always planned and
  // reported; it is applied (Conv2dConfig::shard_layout, L1 output) when
  // this is true, or, by default, on emulated devices (wormhole_b0), where
  // it decides what must fit. On the CPU the kernel streams rows from any
  // memory, so placement does not change speed and DRAM is kept.
  std::optional<bool> apply_conv_sharding;
  // The math fidelity of convs, matmuls and Gemms (compute_config.h). Below
  // HiFi4, float32 3x3 stride-1 convs may run oneDNN's Winograd kernel
  // (conv2d.cc's allows_winograd): ~1.7x faster, relative error ~1e-5
  // instead of ~1e-7; at LoFi on AMX CPUs float32 convs, upconvs and
  // matmuls compute on bfloat16-rounded operands.
  MathFidelity math_fidelity = MathFidelity::HiFi4;
  // Micro-batching: a run of per-image ops (convs, pools, element-wise ops,
  // channel concats) between two points where one tensor alone is live runs
  // `micro_batch` images at a time, each group's output gathered into the
  // batch, where the whole batch's tensors spill the cache and a group's fit
  // (runtime::kMicroBatchCacheBytes per op: its inputs and output). The
  // early stages of a classifier at batch 8 keep their maps in the cache
  // between layers this way; their weights are small, so reading them once
  // per group costs little. nullopt: one image per group wherever that
  // applies (not on emulated descriptors, whose L1 plans are per batch);
  // 0: off; k: k images per group (k must divide the batch; k >= the batch
  // is off).
  std::optional<uint32_t> micro_batch;
  // Micro-batching's cache budget: an op takes part when its inputs and
  // output are at most this many bytes per group and over it for the whole
  // batch. 0: half the device's shared cache
  // (DeviceDescriptor::shared_cache_size; 16 MB where it is unknown),
  // measured on a 32 MB L3.
  uint64_t micro_batch_cache_bytes = 0;
  // Intermediate taps (the original's op_intermediates_to_save): values to
  // return beside the outputs (run_with_intermediates), each entry a value
  // name or an ECMAScript regex matched against whole names. The passes fuse
  // nothing through a tapped value (so a tap can keep a fusion from
  // happening), and it keeps the dtype its readers read; they come back as
  // outputs do (float32, NCHW, the graph's shapes). None: nothing is kept or
  // copied.
  std::vector<std::string> intermediates_to_save;
  // How each conv chooses its kernel. Unset ("heuristic"): conv2d's own
  // selection, an ordered candidate list with thresholds measured on
  // particular machines (src/ops/conv/select.h). Set: the chooser ranks
  // the kernels that can run each conv (cnn::ConvChoice), at the end of
  // compile, on one run (prepare()); perfmodel/conv_choosers.h has
  // choosers that measure each candidate once (cached per machine) or ask
  // the op runtime predictor. Convs given prepared weights keep the kernel
  // those were prepared for.
  cnn::ConvChooser conv_chooser;
  // Per-op formats and fidelity (runtime/precision.h): an AMP level, which
  // replaces dtype, weights_dtype and math_fidelity above, then rules in
  // order. CompileReport::op_precisions says what each op ended up with.
  PrecisionConfig precision;
  // How convs and matmuls compute (precision.h): kTt emulates the Wormhole
  // matrix engine's fidelity phases and destination format exactly
  // (ops/matrix_engine.h); their kernels are then not Tessera's fast ones
  // (no kernel selection, no conv_chooser, no prepared weights).
  Numerics numerics = Numerics::kFast;
};

struct CompileReport {
  std::vector<graph::PassReport> passes;
  std::vector<std::string> fallbacks;  // "ReduceMean 'r1': no device kernel"
  int device_ops = 0;                  // nodes lowered to device kernels
  int layout_conversions = 0;          // NCHW <-> NHWC permutes inserted
  uint64_t conv_flops = 0;             // 2 * MACs of Conv / ConvTranspose / MatMul / Gemm per run
  // Per conv: "<node>: <plan>", e.g. "conv1: L1 HEIGHT_SHARDED on 64 cores, act_block 480x64 ... (applied)".
  std::vector<std::string> conv_plans;
  // Per micro-batched run of nodes: "nodes 'conv1' .. 'layer2.3/relu_2' (34): 8 groups of 1 image".
  std::vector<std::string> micro_batches;
  // At math fidelity LoFi with float32 activations, on CPUs where convs then
  // compute in bfloat16: the values kept in bfloat16 because every reader
  // rounds them to bfloat16 anyway (the same results, half the bytes).
  std::vector<std::string> bfloat16_values;
  // Per op in execution order: "<node> (<op type>): " and OpPrecision's
  // to_string (its formats, its fidelity, and the rule that set each).
  std::vector<std::string> op_precisions;
  // Rules that matched no op: "rule 2 (name_regex 'head.*') matched no op".
  std::vector<std::string> precision_notes;
  std::string to_string() const;
};

// Op types with a device lowering for at least their common attributes
// (the rest of host_supported_ops() run as fallbacks).
std::vector<std::string> device_ops();
// Every op type a compiled model can run (device or fallback), sorted.
std::vector<std::string> supported_ops();
// Whether input `slot` of `node` must be a constant at compile time (conv
// weights, normalization statistics, shape arguments).
bool needs_constant_input(const graph::Node& node, size_t slot);

// A Conv / ConvTranspose node's weights as its kernel reads them (conv2d.h's
// PreparedConv2dWeights: packed for the chosen kernel on this CPU, on the
// device), with the kernel's explanation. A compiled image stores them.
struct PreparedLayer {
  std::string node;
  PreparedConv2dWeights weights;
  std::string selection;  // explain_conv2d's lines
};

class CompiledModel {
 public:
  ~CompiledModel();
  // Errors: INVALID_ARGUMENT for options that contradict each other, an
  // intermediates_to_save entry that is no valid regex or matches no value,
  // or a bad precision rule (precision.h),
  // UNIMPLEMENTED naming the node for what can run neither on the device
  // nor as a fallback (or any fallback when allow_fallback is false).
  static StatusOr<std::unique_ptr<CompiledModel>> compile(graph::Graph graph, Device& device,
                                                          const CompileOptions& options = {});
  // With weights prepared before for some conv nodes (by a model compiled
  // with the same graph, options, CPU and worker count: a compiled image's):
  // those convs never read their weight constants, which may hold no
  // values. Other convs prepare theirs on their first run, as usual.
  static StatusOr<std::unique_ptr<CompiledModel>> compile(graph::Graph graph, Device& device,
                                                          const CompileOptions& options,
                                                          std::vector<PreparedLayer> prepared);

  // One device tensor per graph input, in order; INVALID_ARGUMENT when a
  // shape or dtype is not the compiled one.
  StatusOr<std::vector<Tensor>> run(std::span<const Tensor> inputs, uint8_t cq_id = 0);
  // One run on fixed-seed values in [-1, 1), to completion: each conv chooses its kernel (asking
  // CompileOptions::conv_chooser when set) and prepares its weights, which
  // a first run would do otherwise. compile calls it when a chooser is set.
  Status prepare();
  // run's outputs, and one tensor per intermediate_names() entry.
  struct Outputs {
    std::vector<Tensor> outputs, intermediates;
  };
  StatusOr<Outputs> run_with_intermediates(std::span<const Tensor> inputs, uint8_t cq_id = 0);
  // Per node of graph() (execution order): its kernels' device time in
  // microseconds, the median over `runs` eager runs of `inputs` with each
  // step run to completion before the next (the profiler's kernel-only
  // time: device/profiler.h). A diagnostic (tessera compare): it syncs
  // after every step, which a traced run never does.
  StatusOr<std::vector<double>> op_times_us(std::span<const Tensor> inputs, int runs = 3);
  // The values CompileOptions::intermediates_to_save matched, in graph order.
  std::vector<std::string> intermediate_names() const;
  // For the Pipeline: each frame is the model's inputs in input_names()
  // order; the output is a tensor, or a list when the graph has several
  // outputs. With intermediates_to_save, the list
  // [that, taps] (taps: a list, in intermediate_names() order), which a
  // Pipeline with split_intermediates(true) splits into its outputs and its
  // intermediates queue.
  cnn::MultiInputModel pipeline_model();

  const std::vector<std::vector<int64_t>>& input_shapes() const;
  const std::vector<std::vector<int64_t>>& output_shapes() const;
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  const CompileReport& report() const;
  // Per node of graph(): the formats and fidelity it computes with (precision.h).
  const std::vector<OpPrecision>& op_precision() const;
  // The passes that ran on the graph before it was given to compile with
  // optimize = false (a loaded image's, image/image.h), for report().
  void set_pass_reports(std::vector<graph::PassReport> passes);
  // Per Conv / ConvTranspose node, in lowering order: "<node>: " and
  // explain_conv2d's lines (the algorithm, then each decline), as chosen by
  // the first run ("not run yet" before it).
  std::vector<std::string> conv_selections() const;
  // Every conv layer's prepared weights, in lowering order: those of
  // layers that ran at least once (or were given them at compile).
  std::vector<PreparedLayer> prepared_weights() const;
  const graph::Graph& graph() const;  // after the passes
  Device& device() const;

  // The compiler's internals (src/runtime/lowering.h); named here only so
  // that the op-traits table can point at its lowering functions.
  struct Impl;

 private:
  explicit CompiledModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::runtime
