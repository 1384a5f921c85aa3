// DeviceComputeKernelConfig: how an op's compute kernel does its arithmetic,
// with the original's names and defaults.
//
// Tessera's CPU kernels multiply exactly (bfloat16 and block-float operands
// are exact in float32) and always accumulate in float32, which is the
// original's best setting (HiFi4, fp32_dest_acc_en). LoFi's truncated
// multiplies are not emulated on these kernels: results are at least as
// accurate as the original's for any fidelity (matrix_engine.h emulates
// them exactly, for studies: the compiler's Numerics::kTt). Below HiFi4 a float32 conv may trade
// exactness for speed as the original does: HiFi2 and HiFi3 let 3x3
// stride-1 convs run Winograd (relative error ~1e-5), and LoFi on CPUs
// with AMX computes float32 convs, upconvs and matmuls (matmul.h's
// compute_kernel_config) on bfloat16-rounded operands (8-bit
// significands, where the original's LoFi multiplies 5 by 7 bits) on
// oneDNN's AMX kernels, float32 accumulation and output.
// fp32_dest_acc_en and packer_l1_acc are kept
// because they size the original's partial-result buffers, which the conv2d
// L1 estimate (conv2d_l1.h) counts.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

enum class MathFidelity : uint8_t { LoFi = 0, HiFi2 = 2, HiFi3 = 3, HiFi4 = 4 };

std::string_view math_fidelity_name(MathFidelity f);  // "LoFi", "HiFi2", ...
// The fidelity math_fidelity_name names, or nullopt.
std::optional<MathFidelity> parse_math_fidelity(std::string_view name);

struct DeviceComputeKernelConfig {
  MathFidelity math_fidelity = MathFidelity::HiFi4;
  bool math_approx_mode = true;
  bool fp32_dest_acc_en = false;
  bool packer_l1_acc = false;
};

}  // namespace tessera
