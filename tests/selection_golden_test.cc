// The safety net for refactoring kernel selection and lowering: a record of
// every decision the conv op and the compiler make on this machine, compared
// with the one committed for this machine (tests/golden/).
//
// Per conv layer of bench/layers (conv_layers.txt, and the dwconv / convT
// lines of op_layers.txt), per configuration (dtypes, math fidelity, a fused
// residual, batch) and per ISA tier this CPU offers (set_kernel_isa_limit):
// the kernel that ran, the prepared weights' key and digests of the packed
// weight bytes and of the output. Per project model (build/models) and
// precision: the CompileReport, each launch's kernel name and a digest of
// the outputs. A refactor that must not change behaviour leaves the record
// unchanged, bit for bit.
//
// The record depends on the CPU (ISA tiers, AMX, oneDNN's ISA, its model and
// cache sizes: oneDNN's blocking and Tessera's streaming and planning
// thresholds read them) and on the device's worker count, so goldens are per
// machine fingerprint: the test
// skips, saying so, on a machine that has none. Record one with
//   TESSERA_GOLDEN_WRITE=1 build/release/selection_golden_test
// (before the change), then run the test after it.
#include <cstdlib>
#include <dnnl.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "model_runner.h"
#include "tessera/base/cpu_features.h"
#include "tessera/cnn/weights.h"
#include "tessera/device/profiler.h"
#include "tessera/ops/conv2d.h"
#include "tessera/ops/conv_transpose2d.h"
#include "test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

uint64_t fnv1a(const void* data, uint64_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (uint64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

StatusOr<uint64_t> digest(const Tensor& t) {
  TS_ASSIGN_OR_RETURN(Tensor h, t.is_on_device() ? t.cpu() : t);
  return fnv1a(h.host_data(), h.spec().storage_bytes());
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  return "unknown";
}

// What decides the record besides the source: the CPU's model, features and
// cache sizes, oneDNN's ISA and the device's worker count and caches.
std::string fingerprint(const Device& dev) {
  return fmt::format("{} | {} | onednn isa {} | workers {} | caches L1d {} L2 {} L3 {} | device L1 {} shared {}",
                     cpu_model_name(), cpu_features().to_string(), static_cast<int>(dnnl::get_effective_cpu_isa()),
                     dev.workers().num_threads(), sysconf(_SC_LEVEL1_DCACHE_SIZE), sysconf(_SC_LEVEL2_CACHE_SIZE),
                     sysconf(_SC_LEVEL3_CACHE_SIZE), dev.descriptor().l1_size_per_core,
                     dev.descriptor().shared_cache_size);
}

std::string golden_path(const std::string& fp) {
  return fmt::format("{}/tests/golden/selection_{:016x}.txt", TESSERA_SOURCE_DIR, fnv1a(fp.data(), fp.size()));
}

std::vector<KernelIsa> tiers() {
  std::vector<KernelIsa> t;
  if (cpu_features().avx2 && cpu_features().fma) t.push_back(KernelIsa::kAvx2);
  if (cpu_features().has_avx512_kernels()) t.push_back(KernelIsa::kAvx512);
  return t;
}

struct Layer {
  std::string set, name, op;
  uint32_t h, w, c, k, r, stride;  // conv: k output channels, r x r kernel; convT: k = r = stride
};

std::vector<Layer> layers() {
  std::vector<Layer> out;
  std::ifstream conv(std::string(TESSERA_SOURCE_DIR) + "/bench/layers/conv_layers.txt");
  for (std::string line; std::getline(conv, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    Layer l{.op = "conv"};
    uint32_t count = 0;
    s >> l.set >> l.name >> l.h >> l.w >> l.c >> l.k >> l.r >> l.stride >> count;
    out.push_back(l);
  }
  std::ifstream ops(std::string(TESSERA_SOURCE_DIR) + "/bench/layers/op_layers.txt");
  for (std::string line; std::getline(ops, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    Layer l;
    uint32_t p1 = 0, p2 = 0, p3 = 0;
    s >> l.set >> l.name >> l.op >> l.h >> l.w >> l.c >> p1 >> p2 >> p3;
    if (l.op == "dwconv") out.push_back({l.set, l.name, l.op, l.h, l.w, l.c, l.c, p1, p2});
    if (l.op == "convT") out.push_back({l.set, l.name, l.op, l.h, l.w, l.c, p3, p1, p2});
  }
  return out;
}

struct Config {
  std::string name;
  DataType in, weights;
  MathFidelity fidelity;
  bool residual;
  uint32_t batch;
};

const Config kConfigs[] = {
    {"f32", DataType::FLOAT32, DataType::FLOAT32, MathFidelity::HiFi4, false, 1},
    {"f32_hifi2", DataType::FLOAT32, DataType::FLOAT32, MathFidelity::HiFi2, false, 1},
    {"f32_lofi", DataType::FLOAT32, DataType::BFLOAT16, MathFidelity::LoFi, false, 1},
    {"f32_residual", DataType::FLOAT32, DataType::FLOAT32, MathFidelity::HiFi4, true, 1},
    {"f32_b4", DataType::FLOAT32, DataType::FLOAT32, MathFidelity::HiFi4, false, 4},
    {"f32_residual_b8", DataType::FLOAT32, DataType::FLOAT32, MathFidelity::HiFi4, true, 8},
    {"bf16", DataType::BFLOAT16, DataType::BFLOAT16, MathFidelity::HiFi4, false, 1},
    {"bf16_bfp8", DataType::BFLOAT16, DataType::BFLOAT8_B, MathFidelity::LoFi, false, 1},
    {"bf16_residual", DataType::BFLOAT16, DataType::BFLOAT16, MathFidelity::HiFi4, true, 1},
};

StatusOr<Tensor> random_device(Device& dev, const Shape& shape, DataType dt, uint32_t seed) {
  const std::vector<Tensor> v = tools::random_inputs(shape, 1, seed);
  TS_ASSIGN_OR_RETURN(Tensor t, host_typecast(v[0], dt));
  return to_device(t, dev);
}

// One line: the kernel, the weights' key and the digests, or the error.
StatusOr<std::string> record_layer(Device& dev, const Layer& l, const Config& c) {
  const uint32_t n = l.set == "resnet50" || !c.residual ? c.batch : 1;
  if (c.batch > 1 && l.set != "resnet50") return std::string("-");  // large maps: batch 1 only
  if (c.residual && (l.op != "conv" || l.r != 1)) return std::string("-");
  Conv2dConfig cfg{.weights_dtype = c.weights};
  cfg.compute_config.math_fidelity = c.fidelity;
  TS_ASSIGN_OR_RETURN(Tensor x, random_device(dev, Shape{n, l.h, l.w, l.c}, c.in, 1));
  const uint32_t per_group = l.op == "dwconv" ? 1 : l.c;
  const Shape wshape = l.op == "convT" ? Shape{l.c, l.k, l.r, l.r} : Shape{l.k, per_group, l.r, l.r};
  const Tensor w = tools::random_inputs(wshape, 1, 2)[0];
  const Tensor b = tools::random_inputs(Shape{l.k}, 1, 3)[0];
  TS_RETURN_IF_ERROR(enable_profiler(dev));
  StatusOr<Conv2dResult> r = internal_error("not run");
  if (l.op == "convT") {
    ConvTranspose2dParams p{
        .batch_size = n, .input_height = l.h, .input_width = l.w, .in_channels = l.c, .out_channels = l.k};
    p.kernel_size = {l.r, l.r};
    p.stride = {l.stride, l.stride};
    r = conv_transpose2d(x, w, b, p, cfg);
  } else {
    Conv2dParams p{.batch_size = n, .input_height = l.h, .input_width = l.w, .in_channels = l.c, .out_channels = l.k};
    p.kernel_size = {l.r, l.r};
    p.stride = {l.stride, l.stride};
    p.with_padding(l.r / 2, l.r / 2);
    p.groups = l.op == "dwconv" ? l.c : 1;
    p.activation = {l.op == "dwconv" ? UnaryOpType::RELU6 : UnaryOpType::RELU};
    if (c.residual) {
      TS_ASSIGN_OR_RETURN(Tensor res,
                          random_device(dev, Shape{1, 1, n * p.output_height() * p.output_width(), l.k}, c.in, 4));
      r = conv2d_with_residual(x, w, b, p, {.tensor = res, .activation = {UnaryOpType::RELU}}, cfg);
    } else {
      r = conv2d(x, w, b, p, cfg);
    }
  }
  TS_ASSIGN_OR_RETURN(DeviceProfile prof, read_profile(dev));
  TS_RETURN_IF_ERROR(disable_profiler(dev));
  if (!r.ok()) return fmt::format("error {}", r.status().to_string());
  std::string kernels;
  for (const OpTiming& t : prof.ops) kernels += (kernels.empty() ? "" : ",") + t.kernel_name;
  TS_ASSIGN_OR_RETURN(uint64_t wd, digest(r->weights.weight));
  TS_ASSIGN_OR_RETURN(uint64_t bd, digest(r->weights.bias));
  TS_ASSIGN_OR_RETURN(uint64_t od, digest(r->output));
  return fmt::format("{} | {} | w {:016x} b {:016x} | out {:016x}", kernels, r->weights.key, wd, bd, od);
}

std::string model_dir() {
  const char* d = std::getenv("TESSERA_MODEL_DIR");
  return d ? d : TESSERA_DEFAULT_MODEL_DIR;
}

// The CompileReport, each launch's kernel and the outputs' digests of one run.
StatusOr<std::string> record_model(Device& dev, const std::string& name, const std::string& precision,
                                   const std::string& fidelity) {
  const std::string onnx = model_dir() + "/" + name + ".onnx";
  if (!fs::exists(onnx)) return fmt::format("missing {}", onnx);
  tools::ModelOptions mo{.precision = precision, .batch = 1};
  mo.math_fidelity = fidelity;
  TS_ASSIGN_OR_RETURN(tools::LoadedModel m, tools::load_model(onnx, dev, mo));
  std::string out = m.model->report().to_string();
  std::vector<Tensor> inputs;
  for (const auto& s : m.model->input_shapes()) {
    std::vector<uint32_t> d(s.begin(), s.end());
    TS_ASSIGN_OR_RETURN(Tensor t, to_device(tools::random_inputs(Shape(std::span<const uint32_t>(d)), 1, 5)[0], dev));
    inputs.push_back(t);
  }
  TS_RETURN_IF_ERROR(enable_profiler(dev));
  TS_ASSIGN_OR_RETURN(std::vector<Tensor> outs, m.model->run(inputs));
  TS_ASSIGN_OR_RETURN(DeviceProfile prof, read_profile(dev));
  TS_RETURN_IF_ERROR(disable_profiler(dev));
  for (const OpTiming& t : prof.ops) out += fmt::format("launch {} {}\n", t.kernel_name, t.key);
  for (const Tensor& o : outs) {
    TS_ASSIGN_OR_RETURN(uint64_t d, digest(o));
    out += fmt::format("output {:016x}\n", d);
  }
  return out;
}

TEST(SelectionGolden, MatchesTheRecordForThisMachine) {
  ASSERT_OK_AND_ASSIGN(auto dev, open_device({}));
  const std::string fp = fingerprint(*dev);
  const std::string path = golden_path(fp);
  const bool write = std::getenv("TESSERA_GOLDEN_WRITE") != nullptr;
  if (!write && !fs::exists(path))
    GTEST_SKIP() << "no golden record for this machine (" << fp << "): " << path
                 << " is missing; TESSERA_GOLDEN_WRITE=1 records one";
  std::string rec = "machine: " + fp + "\n";
  for (KernelIsa isa : tiers()) {
    set_kernel_isa_limit(isa);
    for (const Layer& l : layers())
      for (const Config& c : kConfigs) {
        ASSERT_OK_AND_ASSIGN(std::string line, record_layer(*dev, l, c));
        if (line != "-") rec += fmt::format("{} {}/{} {}: {}\n", kernel_isa_name(isa), l.set, l.name, c.name, line);
      }
    for (const char* model : {"resnet50", "mobilenet_v2", "unet", "yolo", "ppocr_det"})
      for (auto [precision, fidelity] : {std::pair{"float32", "HiFi4"}, std::pair{"float32", "LoFi"},
                                         std::pair{"bfloat16", "HiFi4"}, std::pair{"bfloat8_b", "LoFi"}}) {
        ASSERT_OK_AND_ASSIGN(std::string r, record_model(*dev, model, precision, fidelity));
        rec += fmt::format("== {} {} {} {}\n{}", kernel_isa_name(isa), model, precision, fidelity, r);
      }
  }
  set_kernel_isa_limit(KernelIsa::kAvx512);
  ASSERT_OK(close_device(*dev));
  if (write) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << rec;
    std::printf("wrote %s\n", path.c_str());
    return;
  }
  std::ifstream in(path);
  std::stringstream want;
  want << in.rdbuf();
  if (want.str() == rec) return;
  const std::string got_path = std::string(TESSERA_BINARY_DIR) + "/selection_golden_actual.txt";
  std::ofstream(got_path) << rec;
  ADD_FAILURE() << "the record differs from " << path << "; this run's is " << got_path << " (diff them)";
}

}  // namespace
}  // namespace tessera
