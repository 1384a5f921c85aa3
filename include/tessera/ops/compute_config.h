// DeviceComputeKernelConfig: how an op's compute kernel does its arithmetic,
// with the original's names and defaults.
//
// Tessera's CPU kernels multiply exactly (bfloat16 and block-float operands
// are exact in float32) and always accumulate in float32, which is the
// original's best setting (HiFi4, fp32_dest_acc_en). LoFi's truncated
// multiplies are not emulated: results are at least as accurate as the
// original's for any fidelity. fp32_dest_acc_en and packer_l1_acc are kept
// because they size the original's partial-result buffers, which the conv2d
// L1 estimate (conv2d_l1.h) counts.
#pragma once

#include <cstdint>
#include <string_view>

namespace tessera {

enum class MathFidelity : uint8_t { LoFi = 0, HiFi2 = 2, HiFi3 = 3, HiFi4 = 4 };

std::string_view math_fidelity_name(MathFidelity f);  // "LoFi", "HiFi2", ...

struct DeviceComputeKernelConfig {
  MathFidelity math_fidelity = MathFidelity::HiFi4;
  bool math_approx_mode = true;
  bool fp32_dest_acc_en = false;
  bool packer_l1_acc = false;
};

}  // namespace tessera
