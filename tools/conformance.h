// The ONNX backend node tests (Debian's libonnx-testdata) through the whole
// compiler: import, bind, infer, optimize, compile, run on the device, and
// compare with the stored outputs.
//
// A test counts when every op of its graph is in runtime::supported_ops();
// the others are reported as unsupported with the missing op. Inputs a
// compiled model needs as constants (integer tensors, conv weights, shape
// arguments: runtime::needs_constant_input) are bound from the test data
// before shape inference, as an engine with static shapes does.
//
// Comparison: |got - want| <= atol + rtol * |want| with the backend tests'
// rtol 1e-3 and atol 1e-5 (their 1e-7 assumes double accumulation; float32
// kernels sum in other orders), NaN matching NaN, infinities exact.
#pragma once
#include <string>
#include <vector>

#include "tessera/device/device.h"

namespace tessera::tools {

struct ConformanceCase {
  std::string name;
  std::string status;  // "pass", "fail" or "unsupported"
  std::string detail;  // the failure's reason, or the unsupported op
  std::vector<std::string> fallbacks;  // nodes that ran on the host reference kernel
};

struct ConformanceResult {
  std::vector<ConformanceCase> cases;
  int pass = 0, fail = 0, unsupported = 0;
  double pass_rate() const { return pass + fail ? double(pass) / (pass + fail) : 0.0; }
};

inline constexpr char kDefaultNodeTestDir[] = "/usr/share/libonnx-testdata/data/node";

// Runs every test directory under `dir` whose name contains `filter`, each
// on a freshly opened device (a failed kernel leaves its device's queue
// with a sticky error). NOT_FOUND when `dir` does not exist.
StatusOr<ConformanceResult> run_conformance(const DeviceParams& params, const std::string& dir,
                                            const std::string& filter = "");
// One test directory.
ConformanceCase run_conformance_case(Device& device, const std::string& test_dir);

}  // namespace tessera::tools
