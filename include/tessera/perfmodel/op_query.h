// OpQuery: one op launch described as data, the question the op runtime
// predictor answers ("how long will this op take?") and the unit its sweeps
// measure.
//
// A query names an op of the table below (op_specs()), its input tensors as
// the original's serialized tensor spec has them (logical shape, dtype,
// layout, memory config) and the op's own arguments. Parsing fills in every
// default, so two queries for the same launch serialize (to_json) to the
// same canonical text: the dataset's key, and the group that keeps a
// configuration in one split when the predictor is trained.
//
// JSON (docs/predictor.md has the whole schema and each op's arguments):
//   {"op": "conv2d",
//    "input": {"logical_shape": [1, 64, 56, 56], "dtype": "FLOAT32"},
//    "out_channels": 64, "kernel_size": [3, 3], "padding": [1, 1]}
// Inputs are "input" (the first), "input_b" (the second; "input_a" is the
// first's other name) or "inputs": [...] (every input, in order). A tensor's
// dtype, layout and memory config may also sit in "tensor_layout", as the
// original writes them; "DataType::BFLOAT16", "BFLOAT16" and "bfloat16" all
// name one dtype. Omitted: dtype FLOAT32, layout ROW_MAJOR, memory config
// DRAM interleaved. Spatial ops (conv2d, conv_transpose2d, pools, upsample) read a 4-d input
// as (N, C, H, W), PyTorch's order; the device runs them on NHWC rows.
//
// Errors are INVALID_ARGUMENT naming what was expected and what was found:
// an unknown op or argument, a missing required one, a wrong arity or kind.
// Sharded memory configs are UNIMPLEMENTED (the sweeps do not cover them yet).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/base/status.h"
#include "tessera/numerics/data_type.h"
#include "tessera/tensor/types.h"

namespace tessera::perfmodel {

struct TensorQuery {
  std::vector<uint32_t> logical_shape;
  DataType dtype = DataType::FLOAT32;
  Layout layout = Layout::ROW_MAJOR;
  BufferType buffer_type = BufferType::DRAM;  // interleaved
  uint64_t volume() const;
  bool operator==(const TensorQuery&) const = default;
};

// An argument: numbers (one, or a fixed count) or a word.
struct ArgValue {
  std::vector<double> numbers;
  std::string word;
  bool operator==(const ArgValue&) const = default;
};

struct OpQuery {
  std::string op;
  std::vector<TensorQuery> inputs;
  std::map<std::string, ArgValue, std::less<>> args;  // every argument of the op, defaults filled in
  // The worker threads the op is split over (0: the machine's default, one per physical core).
  uint32_t workers = 0;

  // The argument's i-th number / its word (the op's table guarantees they exist after parsing).
  double num(std::string_view name, size_t i = 0) const;
  const std::string& word(std::string_view name) const;
  bool operator==(const OpQuery&) const = default;
};

enum class ArgKind : uint8_t { kNumber, kNumbers, kWord };

struct ArgSpec {
  std::string_view name;
  ArgKind kind;
  uint8_t count;              // kNumbers: how many (a 2-number padding also reads as 4: top=bottom, left=right)
  std::string_view fallback;  // the default as JSON text; "" = required
  std::string_view doc;
};

struct OpSpec {
  std::string_view name;
  std::string_view family;  // ops of a family share one learned model, the op a feature of it
  uint8_t min_inputs, max_inputs;
  bool spatial;  // 4-d inputs are (N, C, H, W)
  std::span<const ArgSpec> args;
  std::string_view doc;
};

// Every op the predictor knows, in table order (families contiguous).
std::span<const OpSpec> op_specs();
const OpSpec* find_op(std::string_view name);
// The families, in table order.
std::vector<std::string_view> op_families();

StatusOr<OpQuery> parse_op_query(std::string_view json);
// Canonical JSON: every argument, sorted keys, one line.
std::string to_json(const OpQuery& query);
// What parse_op_query checks, for queries built in C++: the op exists, the
// inputs' count and ranks, every argument present with its kind and count.
Status validate(const OpQuery& query);

// Words a query may use: dtypes ("FLOAT32", "DataType::BFLOAT16", "bfloat8_b"), layouts, buffer types.
std::optional<DataType> parse_dtype_word(std::string_view word);

}  // namespace tessera::perfmodel
