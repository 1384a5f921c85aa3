// TT-CNN testing utilities: random inputs shaped as the original's tests
// build them, the original's PCC rules, per-layer verification of builder
// configurations against Tessera's reference kernels, and the device
// (kernel-only) performance check.
//
// comp_pcc follows models/common/utility_functions.py::comp_pcc exactly
// (../shared/reference/tt-cnn-and-ttnn.md §3), in this order:
//   `calculated` is rounded to the golden tensor's dtype (bfloat16 golden:
//   calculated rounds to bfloat16);
//   both all NaN -> (true, 1.0); one all NaN -> (false, 0.0);
//   exactly one tensor all zero (NaN counts as non-zero) -> (false, 0.0);
//   NaN and +-inf become 0;
//   equal -> (true, 1.0);
//   else the Pearson r of the flattened tensors (double accumulation); an
//   undefined r (a constant tensor) -> (true, 1.0);
//   passed = r >= pcc.
#pragma once

#include <functional>
#include <map>
#include <span>
#include <string>

#include "tessera/cnn/builder.h"

namespace tessera::cnn {

struct PccResult {
  bool passed = false;
  double pcc = 0.0;
};
PccResult comp_pcc(std::span<const float> golden, std::span<const float> calculated, double pcc = 0.99,
                   DataType golden_dtype = DataType::FLOAT32);
// Host or device tensors of any float dtype and layout (values compared in
// logical row-major order); INVALID_ARGUMENT when the shapes differ.
StatusOr<PccResult> comp_pcc(const Tensor& golden, const Tensor& calculated, double pcc = 0.99);
// The PCC when it is at least `pcc`; else FAILED_PRECONDITION naming both.
// Shapes must be equal (INVALID_ARGUMENT otherwise).
StatusOr<double> assert_with_pcc(const Tensor& expected, const Tensor& actual, double pcc = 0.9999);

// pad_channels_up_to_target: zero-pads the channels of an NCHW host tensor to `target`.
StatusOr<Tensor> pad_channels_up_to_target(const Tensor& nchw, uint32_t target = 16);

enum class ChannelOrder : uint8_t { FIRST, LAST };
struct RandomInput {
  Tensor reference;  // float32 NCHW (batch, channels * groups, h, w), unpadded
  Tensor input;      // what the model takes: on `device` when one is given, else host
};
struct RandomInputOptions {
  uint32_t batch = 1, groups = 1, input_channels = 4, input_height = 1056, input_width = 160;
  ChannelOrder channel_order = ChannelOrder::LAST;
  bool fold = true;  // FIRST: (B, 1, C, H*W); LAST: (B, 1, H*W, C)
  bool pad = true;   // channels padded with zeros to 16
  DataType dtype = DataType::BFLOAT16;
  std::shared_ptr<Device> device;
  std::optional<MemoryConfig> memory_config;  // default DRAM interleaved
  uint32_t seed = 0;
};
// torch.randn(B, C*groups, H, W) (standard normal, fixed seed), padded, put in
// the channel order, folded, converted to `dtype` ROW_MAJOR.
StatusOr<RandomInput> create_random_input_tensor(const RandomInputOptions& options);

// One layer against the reference kernel on the same inputs: a standard
// normal input rounded to bfloat16, the layer on `device` (input NHWC
// bfloat16 in DRAM), the reference in double precision from the unrounded
// float32 weights. Returns the PCC; FAILED_PRECONDITION below the threshold.
StatusOr<double> verify_conv2d_from_config(const Conv2dConfiguration& configuration,
                                           const std::shared_ptr<Device>& device, double pcc_threshold = 0.999,
                                           uint32_t seed = 0);
StatusOr<double> verify_maxpool2d_from_config(const MaxPool2dConfiguration& configuration,
                                              const std::shared_ptr<Device>& device, double pcc_threshold = 0.999,
                                              uint32_t seed = 0);
StatusOr<double> verify_upsample_from_config(const UpsampleConfiguration& configuration,
                                             const std::shared_ptr<Device>& device, double pcc_threshold = 0.999,
                                             uint32_t seed = 0);

// The original's DevicePerformanceTestConfiguration: `test_command` runs the
// model num_iterations times on `device` (a callable here: there is no
// separate process to profile). The device profiler times every launch;
// "AVG DEVICE KERNEL SAMPLES/S" = batch_size * num_iterations / kernel
// seconds, and the test passes when it lies within margin of
// expected_throughput_fps (either side, as check_device_perf does).
struct DevicePerformanceTestConfiguration {
  std::string model_name;
  std::function<Status()> test_command;
  std::shared_ptr<Device> device;
  uint32_t batch_size = 1;
  double expected_throughput_fps = 0.0;
  uint32_t num_iterations = 1;
  double margin = 0.02;
  std::string inference_time_key = "AVG DEVICE KERNEL SAMPLES/S";
  std::string comments;
};
struct DevicePerformanceResult {
  std::map<std::string, double> post_processed_results;  // inference_time_key, "AVG DEVICE KERNEL DURATION [ns]", ...
  std::map<std::string, double> expected_results;
  bool passed = false;
};
// FAILED_PRECONDITION (with the measured and expected numbers) outside the
// margin; errors of the command pass through.
StatusOr<DevicePerformanceResult> run_device_perf_test(const DevicePerformanceTestConfiguration& config);

}  // namespace tessera::cnn
