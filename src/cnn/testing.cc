#include "tessera/cnn/testing.h"

#include <cmath>
#include <random>

#include "tessera/device/profiler.h"
#include "tessera/numerics/bfloat16.h"
#include "tessera/ops/manipulation.h"
#include "tessera/ops/reference.h"

namespace tessera::cnn {

namespace {

bool all_nan(std::span<const float> v) {
  return !v.empty() && std::all_of(v.begin(), v.end(), [](float x) { return std::isnan(x); });
}
bool any_nonzero(std::span<const float> v) {
  return std::any_of(v.begin(), v.end(), [](float x) { return x != 0.0f; });  // NaN != 0
}

std::vector<float> standard_normal(uint64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

StatusOr<std::vector<float>> host_values(const Tensor& t) {
  if (!t.is_on_device()) return t.to_vector();
  TS_ASSIGN_OR_RETURN(Tensor h, t.cpu());
  return h.to_vector();
}

// PCC result as a Status: FAILED_PRECONDITION below the threshold.
StatusOr<double> checked(const PccResult& r, double threshold, std::string_view what) {
  if (!r.passed)
    return failed_precondition_error("{}: PCC {:.6f} is below the required {}", what, r.pcc, threshold);
  return r.pcc;
}

// A standard-normal input rounded to bfloat16, on the host and in DRAM.
struct VerifyInput {
  Tensor host, device;
};
StatusOr<VerifyInput> verify_input(const Shape& shape, Device& device, uint32_t seed) {
  std::vector<float> v = standard_normal(shape.volume(), seed);
  TS_ASSIGN_OR_RETURN(Tensor host, Tensor::from_vector(v, shape, DataType::BFLOAT16));
  TS_ASSIGN_OR_RETURN(Tensor dev, to_device(host, device, DRAM_MEMORY_CONFIG));
  return VerifyInput{host, dev};
}

}  // namespace

PccResult comp_pcc(std::span<const float> golden, std::span<const float> calculated_in, double pcc,
                   DataType golden_dtype) {
  std::vector<float> calc(calculated_in.begin(), calculated_in.end());
  if (golden_dtype == DataType::BFLOAT16)
    for (float& x : calc) x = round_to_bfloat16(x);
  const bool gn = all_nan(golden), cn = all_nan(calc);
  if (gn && cn) return {true, 1.0};
  if (gn || cn) return {false, 0.0};
  if (any_nonzero(golden) != any_nonzero(calc)) return {false, 0.0};
  std::vector<double> g(golden.size()), c(calc.size());
  auto clean = [](float x) { return std::isfinite(x) ? static_cast<double>(x) : 0.0; };
  for (size_t i = 0; i < g.size(); ++i) g[i] = clean(golden[i]);
  for (size_t i = 0; i < c.size(); ++i) c[i] = clean(calc[i]);
  if (g == c) return {true, 1.0};
  if (g.size() != c.size() || g.empty()) return {false, 0.0};
  double mg = 0, mc = 0;
  for (size_t i = 0; i < g.size(); ++i) mg += g[i], mc += c[i];
  mg /= static_cast<double>(g.size()), mc /= static_cast<double>(c.size());
  double sgc = 0, sgg = 0, scc = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double a = g[i] - mg, b = c[i] - mc;
    sgc += a * b, sgg += a * a, scc += b * b;
  }
  if (sgg == 0.0 || scc == 0.0) return {true, 1.0};  // numpy's masked (undefined) correlation
  const double r = sgc / std::sqrt(sgg * scc);
  return {r >= pcc, r};
}

StatusOr<PccResult> comp_pcc(const Tensor& golden, const Tensor& calculated, double pcc) {
  if (!(golden.shape() == calculated.shape()))
    return invalid_argument_error("comp_pcc: shapes differ: golden {} vs calculated {}", golden.shape().to_string(),
                                  calculated.shape().to_string());
  TS_ASSIGN_OR_RETURN(std::vector<float> g, host_values(golden));
  TS_ASSIGN_OR_RETURN(std::vector<float> c, host_values(calculated));
  return comp_pcc(g, c, pcc, golden.dtype());
}

StatusOr<double> assert_with_pcc(const Tensor& expected, const Tensor& actual, double pcc) {
  if (!(expected.shape() == actual.shape()))
    return invalid_argument_error("list(expected_pytorch_result.shape)={} vs list(actual_pytorch_result.shape)={}",
                                  expected.shape().to_string(), actual.shape().to_string());
  TS_ASSIGN_OR_RETURN(PccResult r, comp_pcc(expected, actual, pcc));
  return checked(r, pcc, "assert_with_pcc");
}

StatusOr<Tensor> pad_channels_up_to_target(const Tensor& nchw, uint32_t target) {
  if (nchw.shape().rank() != 4) return invalid_argument_error("pad_channels_up_to_target: expected NCHW, got {}",
                                                              nchw.shape().to_string());
  const uint32_t c = nchw.shape()[1];
  if (c >= target) return nchw;
  const std::array<uint32_t, 2> none{0, 0};
  const std::array<std::array<uint32_t, 2>, 4> pads{none, std::array<uint32_t, 2>{0, target - c}, none, none};
  return reference::pad(nchw, pads, 0.0f);
}

StatusOr<RandomInput> create_random_input_tensor(const RandomInputOptions& o) {
  const uint32_t c = o.input_channels * o.groups;
  const Shape s{o.batch, c, o.input_height, o.input_width};
  if (!s.volume()) return invalid_argument_error("create_random_input_tensor: empty shape {}", s.to_string());
  TS_ASSIGN_OR_RETURN(Tensor ref, Tensor::from_vector(standard_normal(s.volume(), o.seed), s, DataType::FLOAT32));
  Tensor x = ref;
  if (o.pad) {
    TS_ASSIGN_OR_RETURN(x, pad_channels_up_to_target(x, 16));
  }
  const uint32_t cp = x.shape()[1];
  if (o.channel_order == ChannelOrder::LAST) {
    const int perm[] = {0, 2, 3, 1};
    TS_ASSIGN_OR_RETURN(x, reference::permute(x, perm));
  }
  if (o.fold) {
    const uint32_t hw = o.input_height * o.input_width;
    TS_ASSIGN_OR_RETURN(x, x.view(o.channel_order == ChannelOrder::FIRST ? Shape{o.batch, 1, cp, hw}
                                                                          : Shape{o.batch, 1, hw, cp}));
  }
  TS_ASSIGN_OR_RETURN(std::vector<float> v, x.to_vector());
  TS_ASSIGN_OR_RETURN(Tensor typed, Tensor::from_vector(v, x.shape(), o.dtype));
  RandomInput r{ref, typed};
  if (o.device) {
    TS_ASSIGN_OR_RETURN(r.input, to_device(typed, *o.device, o.memory_config.value_or(DRAM_MEMORY_CONFIG)));
  }
  return r;
}

StatusOr<double> verify_conv2d_from_config(const Conv2dConfiguration& cfg, const std::shared_ptr<Device>& device,
                                           double pcc_threshold, uint32_t seed) {
  const Shape nhwc{cfg.batch_size, cfg.input_height, cfg.input_width, cfg.in_channels};
  TS_ASSIGN_OR_RETURN(VerifyInput in, verify_input(nhwc, *device, seed));
  const Tensor& x = in.host;
  const Tensor& dx = in.device;
  TS_ASSIGN_OR_RETURN(Conv2d layer, Conv2d::create(cfg, device));
  TS_ASSIGN_OR_RETURN(LayerOutput out, layer.forward(dx));
  const Shape want{1, 1, cfg.batch_size * out.output_height * out.output_width, cfg.out_channels};
  TS_ASSIGN_OR_RETURN(Tensor ref, reference::conv2d(x, cfg.weight, cfg.bias, cfg.params(), DataType::FLOAT32));
  if (!(out.output.shape() == want) || !(ref.shape() == want))
    return internal_error("verify_conv2d_from_config: output {} and reference {} should both be {}",
                          out.output.shape().to_string(), ref.shape().to_string(), want.to_string());
  TS_ASSIGN_OR_RETURN(PccResult r, comp_pcc(ref, out.output, pcc_threshold));
  return checked(r, pcc_threshold, cfg.params().descriptor());
}

StatusOr<double> verify_maxpool2d_from_config(const MaxPool2dConfiguration& cfg, const std::shared_ptr<Device>& device,
                                              double pcc_threshold, uint32_t seed) {
  const Shape flat{1, 1, cfg.batch_size * cfg.input_height * cfg.input_width, cfg.channels};
  TS_ASSIGN_OR_RETURN(VerifyInput in, verify_input(flat, *device, seed));
  const Tensor& x = in.host;
  const Tensor& dx = in.device;
  TS_ASSIGN_OR_RETURN(MaxPool2d layer, MaxPool2d::create(cfg, device));
  TS_ASSIGN_OR_RETURN(Tensor y, layer(dx));
  TS_ASSIGN_OR_RETURN(Tensor ref, reference::max_pool2d(x, cfg.params(), DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(PccResult r, comp_pcc(ref, y, pcc_threshold));
  return checked(r, pcc_threshold, cfg.params().descriptor());
}

StatusOr<double> verify_upsample_from_config(const UpsampleConfiguration& cfg, const std::shared_ptr<Device>& device,
                                             double pcc_threshold, uint32_t seed) {
  const Shape nhwc{cfg.batch_size, cfg.input_height, cfg.input_width, cfg.channels};
  TS_ASSIGN_OR_RETURN(VerifyInput in, verify_input(nhwc, *device, seed));
  const Tensor& x = in.host;
  const Tensor& dx = in.device;
  TS_ASSIGN_OR_RETURN(Upsample layer, Upsample::create(cfg, device));
  TS_ASSIGN_OR_RETURN(Tensor y, layer(dx));
  const UpsampleParams up{.scale_h = static_cast<float>(cfg.scale_factor[0]),
                          .scale_w = static_cast<float>(cfg.scale_factor[1]),
                          .mode = cfg.mode == "bilinear" ? UpsampleMode::BILINEAR : UpsampleMode::NEAREST};
  TS_ASSIGN_OR_RETURN(Tensor ref, reference::upsample(x, up, DataType::FLOAT32));
  TS_ASSIGN_OR_RETURN(PccResult r, comp_pcc(ref, y, pcc_threshold));
  return checked(r, pcc_threshold, up.descriptor(nhwc));
}

StatusOr<DevicePerformanceResult> run_device_perf_test(const DevicePerformanceTestConfiguration& config) {
  if (!config.device || !config.test_command)
    return invalid_argument_error("run_device_perf_test({}): expected a device and a test command", config.model_name);
  if (config.num_iterations == 0 || config.expected_throughput_fps <= 0)
    return invalid_argument_error("run_device_perf_test({}): expected num_iterations >= 1 and a positive expected "
                                  "throughput, got {} and {}",
                                  config.model_name, config.num_iterations, config.expected_throughput_fps);
  Device& device = *config.device;
  TS_RETURN_IF_ERROR(enable_profiler(device));
  Status ran = config.test_command();
  StatusOr<DeviceProfile> profile = read_profile(device);
  TS_RETURN_IF_ERROR(disable_profiler(device));
  TS_RETURN_IF_ERROR(ran);
  TS_RETURN_IF_ERROR(profile.status());
  if (profile->dropped)
    return resource_exhausted_error("run_device_perf_test({}): the profiler dropped {} launches", config.model_name,
                                    profile->dropped);
  if (profile->ops.empty())
    return failed_precondition_error("run_device_perf_test({}): the test command launched nothing on the device",
                                     config.model_name);
  const double kernel_ns = profile->total_us() * 1e3 / config.num_iterations;
  const double fps = config.batch_size * 1e9 / kernel_ns;
  DevicePerformanceResult r;
  r.post_processed_results[config.inference_time_key] = fps;
  r.post_processed_results["AVG DEVICE KERNEL DURATION [ns]"] = kernel_ns;
  r.post_processed_results["NUM OPS PER ITERATION"] =
      static_cast<double>(profile->ops.size()) / config.num_iterations;
  r.expected_results[config.inference_time_key] = config.expected_throughput_fps;
  const double lo = config.expected_throughput_fps * (1 - config.margin);
  const double hi = config.expected_throughput_fps * (1 + config.margin);
  r.passed = fps >= lo && fps <= hi;
  if (!r.passed)
    return failed_precondition_error(
        "run_device_perf_test({}): {} = {:.2f} is outside the expected {:.2f} +- {:.0f}% ({:.2f}..{:.2f}){}",
        config.model_name, config.inference_time_key, fps, config.expected_throughput_fps, config.margin * 100, lo,
        hi, fps > hi ? "; faster than expected: raise the expectation" : "");
  return r;
}

}  // namespace tessera::cnn
