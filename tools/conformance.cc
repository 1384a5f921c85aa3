#include "conformance.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "tessera/graph/host_tail.h"
#include "tessera/graph/shape_inference.h"
#include "tessera/import/onnx.h"
#include "tessera/runtime/compiled_model.h"

namespace tessera::tools {
namespace {

namespace fs = std::filesystem;

Shape to_shape(const std::vector<int64_t>& dims) {
  if (dims.empty()) return Shape{1};
  std::vector<uint32_t> d(dims.begin(), dims.end());
  return Shape(std::span<const uint32_t>(d));
}

std::string compare(const std::vector<float>& got, const graph::HostTensor& want, const std::vector<int64_t>& got_dims) {
  if (got_dims != want.dims)
    return fmt::format("shape {}, expected {}", graph::dims_to_string(got_dims), graph::dims_to_string(want.dims));
  if (got.size() != want.size()) return fmt::format("{} values, expected {}", got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want.at(i), g = got[i];
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    if (!(std::fabs(g - w) <= 1e-5 + 1e-3 * std::fabs(w))) return fmt::format("element {}: {} vs {}", i, g, w);
  }
  return "";
}

ConformanceCase fail(ConformanceCase c, const Status& s) {
  c.status = "fail";
  c.detail = s.message();
  return c;
}

// A test of an op whose output shape depends on the data: every input
// given as a constant, the model split (graph::HostTail) and its tail run on
// the host, as `tessera run` runs a model's post-processing.
ConformanceCase run_host_tail_case(ConformanceCase c, graph::Graph g, const fs::path& data) {
  const std::vector<int> inputs = g.inputs;
  for (size_t k = 0; k < inputs.size(); ++k) {
    auto t = importer::load_tensor_proto((data / fmt::format("input_{}.pb", k)).string());
    if (!t.ok()) return fail(c, t.status());
    if (Status s = g.bind_constant(g.value(inputs[k]).name, *t); !s.ok()) return fail(c, s);
  }
  auto tail = graph::HostTail::split(g);
  if (!tail.ok() && tail.status().code() == StatusCode::kUnimplemented) {  // (an op with no host kernel)
    c.detail = tail.status().message();
    return c;
  }
  if (!tail.ok()) return fail(c, tail.status());
  if (!*tail || (*tail)->num_prefix_outputs() != 0)
    return fail(c, internal_error("expected the whole test in the host tail"));
  auto outs = (*tail)->run({});
  if (!outs.ok()) return fail(c, outs.status());
  for (size_t k = 0; k < outs->size(); ++k) {
    auto want = importer::load_tensor_proto((data / fmt::format("output_{}.pb", k)).string());
    if (!want.ok()) return fail(c, want.status());
    const graph::HostTensor& got = (*outs)[k];
    std::vector<float> v(got.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(got.at(i));
    if (std::string err = compare(v, *want, got.dims); !err.empty()) {
      c.status = "fail";
      c.detail = fmt::format("output {}: {}", k, err);
      return c;
    }
  }
  c.status = "pass";
  c.detail = fmt::format("host tail: {}", (*tail)->summary());
  return c;
}

}  // namespace

ConformanceCase run_conformance_case(Device& device, const std::string& test_dir) {
  ConformanceCase c{fs::path(test_dir).filename().string(), "unsupported", "", {}};
  importer::OnnxImportOptions opts;
  opts.infer_shapes = false;
  auto imported = importer::import_onnx((fs::path(test_dir) / "model.onnx").string(), opts);
  // Op coverage first: only graphs of supported ops count.
  if (imported.ok()) {
    const auto supported = runtime::supported_ops();
    for (const auto& n : imported->nodes)
      if (!std::binary_search(supported.begin(), supported.end(), n.op_type)) {
        c.detail = "op " + n.op_type;
        return c;
      }
  } else if (imported.status().code() == StatusCode::kUnimplemented) {
    // Valid ONNX outside Tessera's scope (another domain, sequences, strings).
    c.detail = imported.status().message();
    return c;
  } else {
    return fail(c, imported.status());
  }
  graph::Graph g = std::move(*imported);
  const fs::path data = fs::path(test_dir) / "test_data_set_0";
  if (std::any_of(g.nodes.begin(), g.nodes.end(),
                  [](const graph::Node& n) { return graph::has_data_dependent_shape(n.op_type); }))
    return run_host_tail_case(std::move(c), std::move(g), data);
  const auto consumers = g.consumers();
  // input_K.pb is graph input K (initializers are not inputs here).
  std::vector<graph::HostTensor> feeds;
  std::vector<std::string> feed_names;
  const std::vector<int> inputs = g.inputs;
  for (size_t k = 0; k < inputs.size(); ++k) {
    auto t = importer::load_tensor_proto((data / fmt::format("input_{}.pb", k)).string());
    if (!t.ok()) return fail(c, t.status());
    const int v = inputs[k];
    bool bind = t->type == graph::ElemType::INT64;
    for (const auto& [node, slot] : consumers[static_cast<size_t>(v)])
      bind = bind || runtime::needs_constant_input(g.nodes[static_cast<size_t>(node)], static_cast<size_t>(slot));
    const std::string name = g.value(v).name;
    if (bind) {
      if (Status s = g.bind_constant(name, *t); !s.ok()) return fail(c, s);
    } else {
      g.value(v).dims = t->dims;
      feeds.push_back(std::move(*t));
      feed_names.push_back(name);
    }
  }
  if (Status s = graph::infer_shapes(g); !s.ok()) return fail(c, s);
  g.remove_dead_nodes();
  auto model = runtime::CompiledModel::compile(std::move(g), device, {});
  if (!model.ok()) return fail(c, model.status());
  c.fallbacks = (*model)->report().fallbacks;
  std::vector<Tensor> device_inputs;
  for (const auto& f : feeds) {
    std::vector<float> v(f.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(f.at(i));
    auto host = Tensor::from_vector(v, to_shape(f.dims), DataType::FLOAT32);
    if (!host.ok()) return fail(c, host.status());
    auto dev = to_device(*host, device);
    if (!dev.ok()) return fail(c, dev.status());
    device_inputs.push_back(*dev);
  }
  auto outs = (*model)->run(device_inputs);
  if (!outs.ok()) return fail(c, outs.status());
  for (size_t k = 0; k < outs->size(); ++k) {
    auto want = importer::load_tensor_proto((data / fmt::format("output_{}.pb", k)).string());
    if (!want.ok()) return fail(c, want.status());
    auto host = (*outs)[k].cpu();
    if (!host.ok()) return fail(c, host.status());
    auto got = host->to_vector();
    if (!got.ok()) return fail(c, got.status());
    if (std::string err = compare(*got, *want, (*model)->output_shapes()[k]); !err.empty()) {
      c.status = "fail";
      c.detail = fmt::format("output {}: {}", k, err);
      return c;
    }
  }
  c.status = "pass";
  c.detail = c.fallbacks.empty() ? "device" : fmt::format("{} host fallback(s)", c.fallbacks.size());
  return c;
}

StatusOr<ConformanceResult> run_conformance(const DeviceParams& params, const std::string& dir,
                                            const std::string& filter) {
  if (!fs::is_directory(dir)) return not_found_error("'{}' is not a directory (install libonnx-testdata?)", dir);
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && fs::exists(e.path() / "model.onnx") &&
        e.path().filename().string().find(filter) != std::string::npos)
      dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  ConformanceResult r;
  for (const auto& d : dirs) {
    TS_ASSIGN_OR_RETURN(auto device, open_device(params));
    ConformanceCase c = run_conformance_case(*device, d.string());
    if (Status s = close_device(*device); !s.ok() && c.status == "pass") c = fail(c, s);
    if (c.status == "pass") ++r.pass;
    else if (c.status == "fail") ++r.fail;
    else ++r.unsupported;
    r.cases.push_back(std::move(c));
  }
  return r;
}

}  // namespace tessera::tools
