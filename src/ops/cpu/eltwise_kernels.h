// Element-wise kernels (internal). A launch walks the pages of its tensors
// (shards, row pages or tile pages; identical structure for every operand)
// in chunks of up to 1024 elements, so block-float tiles convert whole.
#pragma once

#include <string>

#include "tessera/device/program.h"
#include "tessera/numerics/data_type.h"
#include "tessera/tensor/access.h"

namespace tessera::cpu {

enum class EltwiseOp : uint8_t { kRelu, kAdd, kTypecast };

struct EltwiseArgs {
  TensorAccess a, b, out;
  DataType a_type, b_type, out_type;
  EltwiseOp op;
  uint32_t num_pages;
  uint32_t page_elements;
};

// Chooses the kernel for this op and dtypes on this CPU; `name` receives its
// grammar name (<dtype>_<op>__<isa>).
KernelFn select_eltwise_kernel(EltwiseOp op, DataType a, DataType b, DataType out, std::string* name);

namespace avx512 {
void relu_f32(const float* x, float* y, size_t n);
void add_f32(const float* a, const float* b, float* y, size_t n);
void relu_bf16(const uint16_t* x, uint16_t* y, size_t n);
void add_bf16(const uint16_t* a, const uint16_t* b, uint16_t* y, size_t n);
}  // namespace avx512

}  // namespace tessera::cpu
