#include "model_runner.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "tessera/graph/shape_inference.h"
#include "tessera/import/onnx.h"
#include "tessera/perfmodel/conv_choosers.h"
#include "tessera/runtime/model_outputs.h"

namespace tessera::tools {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

StatusOr<runtime::CompileOptions> compile_options_for(const ModelOptions& options) {
  runtime::CompileOptions c;
  c.optimize = options.optimize;
  c.intermediates_to_save = options.intermediates;
  if (options.precision == "float32") {
    c.dtype = c.weights_dtype = DataType::FLOAT32;
  } else if (options.precision == "bfloat16") {
    c.dtype = c.weights_dtype = DataType::BFLOAT16;
  } else if (options.precision == "bfloat8_b") {
    c.dtype = DataType::BFLOAT16;
    c.weights_dtype = DataType::BFLOAT8_B;
  } else {
    return invalid_argument_error("--dtype '{}': expected float32, bfloat16 or bfloat8_b", options.precision);
  }
  const auto fidelity = parse_math_fidelity(options.math_fidelity);
  if (!fidelity)
    return invalid_argument_error("--math-fidelity '{}': expected LoFi, HiFi2, HiFi3 or HiFi4", options.math_fidelity);
  c.math_fidelity = *fidelity;
  if (options.micro_batch == "off") {
    c.micro_batch = 0;
  } else if (options.micro_batch != "auto") {
    const std::string& m = options.micro_batch;
    if (m.empty() || m.size() > 6 || m.find_first_not_of("0123456789") != std::string::npos || std::stoul(m) == 0)
      return invalid_argument_error("--micro-batch '{}': expected auto, off or a positive number of images", m);
    c.micro_batch = static_cast<uint32_t>(std::stoul(m));
  }
  if (!options.precision_config.empty()) {
    std::ifstream f(options.precision_config);
    std::stringstream text;
    text << f.rdbuf();
    if (!f) return not_found_error("--precision-config {}: cannot read the file", options.precision_config);
    StatusOr<runtime::PrecisionConfig> p = runtime::parse_precision_config(text.str());
    if (!p.ok())
      return invalid_argument_error("--precision-config {}: {}", options.precision_config, p.status().message());
    c.precision = std::move(*p);
  }
  const std::optional<runtime::Numerics> numerics = runtime::parse_numerics(options.numerics);
  if (!numerics) return invalid_argument_error("--numerics '{}': expected fast or tt", options.numerics);
  c.numerics = *numerics;
  if (options.amp_level >= 0) {
    TS_RETURN_IF_ERROR(runtime::amp_level_defaults(options.amp_level).status());
    c.precision.amp_level = options.amp_level;
  }
  const std::optional<perfmodel::ConvSelect> select = perfmodel::parse_conv_select(options.select);
  if (!select)
    return invalid_argument_error("--select '{}': expected heuristic, measured or predicted", options.select);
  if (*select != perfmodel::ConvSelect::kPredicted && !options.predictor.empty())
    return invalid_argument_error("--predictor is read by --select predicted only (--select {})", options.select);
  if (*select == perfmodel::ConvSelect::kMeasured) {
    c.conv_chooser = perfmodel::measured_conv_chooser(
        {.cache_path = options.select_cache.empty() ? perfmodel::default_conv_cache_path() : options.select_cache,
         .workers = options.workers,
         .verbose = options.select_verbose});
  } else if (*select == perfmodel::ConvSelect::kPredicted) {
    if (options.predictor.empty())
      return invalid_argument_error("--select predicted needs --predictor MODEL.json (tessera train-predictor)");
    TS_ASSIGN_OR_RETURN(auto predictor, perfmodel::Predictor::load(options.predictor));
    for (const std::string& w : predictor->warnings())
      std::fprintf(stderr, "warning: %s: %s\n", options.predictor.c_str(), w.c_str());
    c.conv_chooser = perfmodel::predicted_conv_chooser(predictor, options.workers);
  }
  return c;
}

bool is_image_file(const std::string& path) { return path.ends_with(".tsi"); }

StatusOr<graph::Graph> import_graph(const std::string& path, const ModelOptions& options, double* import_ms,
                                    std::optional<graph::HostTail>* tail) {
  if (options.batch < 1) return invalid_argument_error("--batch {}: expected at least 1", options.batch);
  auto t0 = std::chrono::steady_clock::now();
  importer::OnnxImportOptions io;
  io.symbolic_dim = options.batch;
  io.input_shapes = options.input_shapes;
  io.infer_shapes = false;
  TS_ASSIGN_OR_RETURN(graph::Graph g, importer::import_onnx(path, io));
  // A fixed leading dim of 1 becomes the batch too (models exported with batch 1).
  for (int i : g.inputs) {
    auto& d = g.value(i).dims;
    if (!d.empty() && options.batch != 1) d[0] = options.batch;
  }
  if (!options.input_shape.empty()) {
    if (g.inputs.empty()) return invalid_argument_error("{}: --shape for a model without inputs", path);
    auto& d = g.value(g.inputs[0]).dims;
    if (d.size() != options.input_shape.size())
      return invalid_argument_error("--shape {}: rank {}, the model's input '{}' has rank {}",
                                    graph::dims_to_string(options.input_shape), options.input_shape.size(),
                                    g.value(g.inputs[0]).name, d.size());
    d = options.input_shape;
  }
  TS_ASSIGN_OR_RETURN(std::optional<graph::HostTail> t, graph::HostTail::split(g));
  if (t && !tail)
    return unimplemented_error(
        "{}: its output shapes depend on the data ({}); `tessera run`, `bench` and `compile` run such a "
        "host tail, `compare` does not",
        path, t->summary());
  TS_RETURN_IF_ERROR(graph::infer_shapes(g));
  g.remove_dead_nodes();
  if (g.inputs.empty()) return invalid_argument_error("{}: the model has no run-time inputs", path);
  if (t) {
    TS_RETURN_IF_ERROR(t->bind_prefix(g));
    g.remove_dead_nodes();  // (what only computed the constants the tail took)
    if (g.nodes.empty() || g.outputs.empty())
      return unimplemented_error("{}: the whole model depends on the data's shapes ({}); nothing runs on the device",
                                 path, t->summary());
    *tail = std::move(t);
  }
  if (import_ms) *import_ms = ms_since(t0);
  return g;
}

namespace {

StatusOr<LoadedModel> load_image_model(const std::string& path, Device& device, const ModelOptions& options) {
  // An image's options were fixed when it was compiled.
  const ModelOptions defaults;
  std::vector<std::string> asked;
  if (options.precision != defaults.precision) asked.push_back("--dtype " + options.precision);
  if (options.math_fidelity != defaults.math_fidelity) asked.push_back("--math-fidelity " + options.math_fidelity);
  if (options.micro_batch != defaults.micro_batch) asked.push_back("--micro-batch " + options.micro_batch);
  if (!options.input_shape.empty()) asked.push_back("--shape " + graph::dims_to_string(options.input_shape));
  if (!options.intermediates.empty()) asked.push_back("--save-intermediates");
  if (options.select != defaults.select) asked.push_back("--select " + options.select);
  if (options.amp_level >= 0) asked.push_back(fmt::format("--amp-level {}", options.amp_level));
  if (options.numerics != defaults.numerics) asked.push_back("--numerics " + options.numerics);
  if (!options.precision_config.empty()) asked.push_back("--precision-config " + options.precision_config);
  if (!asked.empty())
    return invalid_argument_error(
        "{} is a compiled image; its compile options are fixed ({} asked for): compile the "
        "model again with them (tessera compile)",
        path, fmt::format("{}", fmt::join(asked, ", ")));
  LoadedModel r;
  r.from_image = true;
  auto t0 = std::chrono::steady_clock::now();
  TS_ASSIGN_OR_RETURN(auto img, image::Image::open(path));
  TS_ASSIGN_OR_RETURN(const size_t index, image_model_index(*img, options.model_name));
  r.import_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  r.image_options = img->info().models[index].options;
  TS_ASSIGN_OR_RETURN(image::LoadedModel m, image::load_model(*img, index, device));
  r.compile_ms = ms_since(t0);
  r.model = std::move(m.model);
  r.tail = std::move(m.tail);
  r.notes = std::move(m.notes);
  const auto& dims = r.model->input_shapes().at(0);
  if (options.batch != 1 && !dims.empty() && dims[0] != options.batch)
    return invalid_argument_error("{} was compiled for batch {}, --batch {} asked for another", path, dims[0],
                                  options.batch);
  r.input_shape = Shape(std::span<const uint32_t>(std::vector<uint32_t>(dims.begin(), dims.end())));
  return r;
}

}  // namespace

StatusOr<size_t> image_model_index(const image::Image& img, const std::string& name) {
  if (!name.empty()) return img.find_model(name);
  if (img.num_models() == 1) return size_t{0};
  std::string names;
  for (const auto& m : img.info().models) names += (names.empty() ? "'" : ", '") + m.name + "'";
  return invalid_argument_error("the image holds {} models ({}): choose one with --model", img.num_models(), names);
}

StatusOr<LoadedModel> load_model(const std::string& path, Device& device, const ModelOptions& options) {
  if (is_image_file(path)) return load_image_model(path, device, options);
  TS_ASSIGN_OR_RETURN(runtime::CompileOptions copts, compile_options_for(options));
  if (!options.model_name.empty())
    return invalid_argument_error(
        "--model {}: {} is an ONNX file with one model (--model picks a model of a "
        "compiled image)",
        options.model_name, path);
  LoadedModel r;
  TS_ASSIGN_OR_RETURN(graph::Graph g, import_graph(path, options, &r.import_ms, &r.tail));
  r.input_shape = Shape(std::span<const uint32_t>(
      std::vector<uint32_t>(g.value(g.inputs[0]).dims.begin(), g.value(g.inputs[0]).dims.end())));
  const auto t0 = std::chrono::steady_clock::now();
  TS_ASSIGN_OR_RETURN(r.model, runtime::CompiledModel::compile(std::move(g), device, copts));
  r.compile_ms = ms_since(t0);
  return r;
}

std::vector<std::string> output_names(const LoadedModel& m) {
  return m.tail ? m.tail->output_names() : m.model->output_names();
}

StatusOr<std::vector<graph::HostTensor>> finish_outputs(const LoadedModel& m, const std::vector<Tensor>& outputs) {
  return runtime::model_outputs(outputs, m.tail ? &*m.tail : nullptr);
}

Status shapes_from_inputs(const std::vector<DeclaredInput>& declared, const std::map<std::string, Tensor>& files,
                          ModelOptions& options) {
  for (size_t k = 0; k < declared.size(); ++k) {
    const auto it = files.find(declared[k].name);
    if (it == files.end() || (k == 0 && !options.input_shape.empty())) continue;
    TS_RETURN_IF_ERROR(check_input_shape(declared[k], it->second.shape(), "--input for '" + declared[k].name + "'"));
    std::vector<int64_t> dims(it->second.shape().dims().begin(), it->second.shape().dims().end());
    if (k == 0) options.batch = dims[0];
    options.input_shapes[declared[k].name] = std::move(dims);
  }
  return ok_status();
}

StatusOr<std::vector<Tensor>> host_inputs(const runtime::CompiledModel& model,
                                          const std::map<std::string, Tensor>& files) {
  const std::vector<std::string> names = model.input_names();
  std::vector<Tensor> xs;
  for (size_t k = 0; k < names.size(); ++k) {
    const std::vector<int64_t>& dims = model.input_shapes().at(k);
    const Shape want(std::span<const uint32_t>(std::vector<uint32_t>(dims.begin(), dims.end())));
    const auto it = files.find(names[k]);
    if (it == files.end()) {
      xs.push_back(random_inputs(want, 1, static_cast<uint32_t>(k))[0]);
      continue;
    }
    if (it->second.shape().volume() != want.volume())
      return invalid_argument_error("--input for '{}': shape {}, the model takes {}", names[k],
                                    it->second.shape().to_string(), want.to_string());
    TS_ASSIGN_OR_RETURN(Tensor x, it->second.view(want));
    xs.push_back(std::move(x));
  }
  return xs;
}

StatusOr<cnn::PipelineConfig> parse_pipeline_config(const std::string& text) {
  cnn::PipelineConfig c{.use_trace = true, .num_command_queues = 2};
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "trace")
      c.use_trace = true;
    else if (item == "notrace")
      c.use_trace = false;
    else if (item == "1cq")
      c.num_command_queues = 1;
    else if (item == "2cq")
      c.num_command_queues = 2;
    else if (item == "io")
      c.all_transfers_on_separate_command_queue = true;
    else if (!item.empty())
      return invalid_argument_error("--config item '{}': expected trace, notrace, 1cq, 2cq or io", item);
  }
  return c;
}

std::vector<Tensor> random_inputs(const Shape& shape, int count, uint32_t seed) {
  std::vector<Tensor> out;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int i = 0; i < count; ++i) {
    std::vector<float> v(shape.volume());
    for (float& x : v) x = u(rng);
    out.push_back(Tensor::from_vector(v, shape, DataType::FLOAT32).value());
  }
  return out;
}

StatusOr<std::vector<cnn::ModelOutput>> run_pipeline(runtime::CompiledModel& model, Device& device,
                                                     const cnn::PipelineConfig& config,
                                                     const std::vector<cnn::Frame>& frames,
                                                     std::vector<std::vector<Tensor>>* intermediates) {
  if (frames.empty()) return invalid_argument_error("no inputs to run");
  std::optional<MemoryConfig> dram_out;
  if (config.all_transfers_on_separate_command_queue) dram_out = DRAM_MEMORY_CONFIG;
  TS_ASSIGN_OR_RETURN(auto pipe, cnn::create_pipeline_from_config(config, model.pipeline_model(), device,
                                                                  DRAM_MEMORY_CONFIG, DRAM_MEMORY_CONFIG, dram_out));
  const bool taps = !model.intermediate_names().empty();
  pipe->split_intermediates(taps);
  TS_RETURN_IF_ERROR(pipe->compile(frames[0]));
  TS_RETURN_IF_ERROR(pipe->enqueue(std::span<const cnn::Frame>(frames)));
  TS_ASSIGN_OR_RETURN(auto outs, pipe->pop_all());
  if (taps && intermediates) {
    TS_ASSIGN_OR_RETURN(*intermediates, pipe->pop_intermediates());
  }
  TS_RETURN_IF_ERROR(pipe->cleanup());
  return outs;
}

}  // namespace tessera::tools
