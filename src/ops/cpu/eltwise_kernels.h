// Element-wise kernels (internal).
//
// Same-shape ops walk the pages of their tensors (shards, row pages or tile
// pages; identical structure for every operand) in chunks of up to 1024
// elements, so block-float tiles convert whole. Broadcasting binary ops walk
// the output's rows (ROW_MAJOR only) and map each to a row of each operand.
#pragma once

#include <string>

#include "float_math.h"
#include "tessera/device/program.h"
#include "tessera/numerics/data_type.h"
#include "tessera/tensor/access.h"

namespace tessera::cpu {

enum class EltwiseOp : uint8_t { kUnary, kBinary, kTypecast };

struct EltwiseArgs {
  TensorAccess a, b, out;
  DataType a_type, b_type, out_type;
  EltwiseOp op;
  BinaryOpType binary_op;
  UnaryWithParam activation;
  FloatMath math;
  uint32_t num_pages;
  uint32_t page_elements;
  // Packed operands: the tensor is one array cut into pages of
  // page_elements (a multiple of 1024), the last one short, so small rows
  // do not cost a call each.
  bool flat;
  uint64_t total_elements;
  // b is one float32 / bfloat16 ROW_MAJOR element for every element of a
  // (a scalar operand, such as a learnable scale), read at launch.
  bool b_scalar;
};

// Chooses the kernel for this op and dtypes on this CPU; `name` receives its
// grammar name (<dtype>_<op>__<isa>).
KernelFn select_eltwise_kernel(const EltwiseArgs& args, std::string_view op_name, std::string* name);

// Broadcasting: out row r = (i_0, ..., i_{k-1}) over the output's leading
// dims; operand row = sum of i_j * stride_j (stride 0 where it broadcasts).
// A column count of 1 in an operand broadcasts its single column.
struct BroadcastArgs {
  static constexpr int kMaxLead = 7;
  TensorAccess a, b, out;
  DataType a_type, b_type, out_type;
  BinaryOpType binary_op;
  UnaryWithParam activation;
  FloatMath math;
  uint32_t num_lead;
  uint32_t lead[kMaxLead];
  uint32_t a_stride[kMaxLead], b_stride[kMaxLead];
  uint32_t cols;
  bool a_col_broadcast, b_col_broadcast;
  // Float32 / bfloat16 rows, evenly spaced in all three, none broadcast along
  // the row (math.fused set): each row in one FloatMath::fused pass, in
  // place. Their byte strides, else 0.
  uint64_t a_row_stride, b_row_stride, out_row_stride;
};

Status broadcast_kernel(const void* args, uint32_t row_begin, uint32_t row_end);

}  // namespace tessera::cpu
