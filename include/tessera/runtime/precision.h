// Per-op precision: the original's configure_mixed_precision rules and AMP
// levels, mapped onto a conv net compiled for Tessera's devices.
//
//   CompileOptions o{.dtype = DataType::BFLOAT16, .weights_dtype = DataType::BFLOAT8_B};
//   o.precision.rules.push_back({.name_regex = "conv1|fc", .output_df = DataType::FLOAT32,
//                                .input_df = {{1, DataType::FLOAT32}}});   // first and last layer wide
//   // or: TS_ASSIGN_OR_RETURN(o.precision, parse_precision_config(json_text));
//
// What an op ends with, field by field (later steps win):
//   1. the defaults: CompileOptions::dtype (activations), weights_dtype,
//      math_fidelity;
//   2. the AMP level, which replaces those defaults (amp_level_defaults);
//   3. the rules, in order: a rule that matches an op sets the fields it
//      names, so a later rule overrides an earlier one field by field, and
//      the report names the rule that set each field.
// A rule matches an op when its op_type (an ONNX op type, any case) equals
// the op's and its name_regex (ECMAScript, whole match) matches the op's
// name, one of its output value names or the name of one of its constant
// inputs (its weights: "layer1.0.conv1.weight"); an empty field matches
// every op. Rules see the graph after the compiler's passes: a Relu fused
// into its conv is the conv's (its output value keeps its name).
//
// What the fields mean on Tessera's kernels, which multiply exactly and
// accumulate in float32:
//   output_df       the format an op writes: float32 or bfloat16 (other
//                   ops read it as it is; graph outputs reach the caller as
//                   float32 either way);
//   input_df        per operand index; for a constant operand of Conv,
//                   ConvTranspose, MatMul or Gemm (index 1: the weights)
//                   the format its values are rounded to: float32,
//                   bfloat16, float16, bfloat8_b, bfloat4_b, bfloat2_b;
//   math_fidelity   of Conv, ConvTranspose, MatMul and Gemm (compute_config.h);
//   accumulate_df   float32; with Numerics::kTt also bfloat16 (the
//                   matrix engine's destination register, fp32_dest_acc_en
//                   off), which is its default in bfloat16 models there;
//   intermediate_df float32 only: Tessera's kernels keep partial results in
//                   float32, so a narrower request is an error, not ignored.
// Bad rules (an unknown op type, an invalid regex, a format an op cannot
// take) are INVALID_ARGUMENT naming the rule.
//
// AMP levels (the original's PYBUDA_AMP_LEVEL / amp_light; convs and
// matmuls play the role the original's matmuls do):
//   0  off: the CompileOptions defaults;
//   1  the original's Mixed_B / amp_light 1: bfloat16 activations (its
//      Float16_b softmax, layernorm and fused ops: every op here), conv and
//      matmul weights bfloat8_b, HiFi2;
//   2  the original's amp_light 3 (its docs' level 2): bfloat16 activations,
//      conv and matmul weights bfloat4_b, LoFi.
// (The original's A-formats (Bfp8, Float16 with a 5-bit exponent) have no
// Tessera counterpart; its Mixed_A maps onto level 1's formats.)
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/base/status.h"
#include "tessera/numerics/data_type.h"
#include "tessera/ops/compute_config.h"

namespace tessera::runtime {

// How convs and matmuls compute: Tessera's fast kernels (exact products,
// float32 accumulation; the fidelity only picks faster kernels), or the
// Wormhole matrix engine's numerics emulated exactly (ops/matrix_engine.h:
// truncated multiplies per fidelity phase, bfloat16 or float32
// destination), a study mode several times slower.
enum class Numerics : uint8_t { kFast, kTt };
std::string_view numerics_name(Numerics n);               // "fast", "tt"
std::optional<Numerics> parse_numerics(std::string_view name);

struct PrecisionRule {
  std::string op_type;     // empty: any op
  std::string name_regex;  // empty: any name
  std::optional<DataType> output_df, intermediate_df, accumulate_df;
  std::optional<MathFidelity> math_fidelity;
  std::map<int, DataType> input_df;  // operand index -> format
};

struct PrecisionConfig {
  int amp_level = 0;  // 0, 1 or 2 (above)
  std::vector<PrecisionRule> rules;
  bool empty() const { return amp_level == 0 && rules.empty(); }
};

// The defaults an AMP level sets (level 0: none).
struct AmpDefaults {
  DataType dtype, weights_dtype;
  MathFidelity math_fidelity;
};
StatusOr<std::optional<AmpDefaults>> amp_level_defaults(int level);

// JSON in the shape of configure_mixed_precision's arguments:
//   {"amp_level": 1,
//    "rules": [{"op_type": "Conv", "name_regex": "layer4\\..*", "output_df": "float32",
//               "input_df": {"1": "bfloat16"}, "math_fidelity": "HiFi4"}]}
// (a bare list of rules is accepted too). INVALID_ARGUMENT naming the rule
// and key for an unknown key, format or fidelity, or a value of the wrong type.
StatusOr<PrecisionConfig> parse_precision_config(std::string_view json);
// The same JSON back (compiled images store their rules so).
std::string precision_config_to_json(const PrecisionConfig& config);
// "rule 2 (op_type Conv, name_regex 'conv1')" for reports and errors (index from 0, printed from 1).
std::string describe_rule(const PrecisionRule& r, size_t index);

// What one op ended up with, and which rule set each field ("" : the
// defaults, "amp_level N": the level).
struct OpPrecision {
  DataType output_df = DataType::FLOAT32;
  std::optional<DataType> weights_df;  // ops with weights (Conv, ConvTranspose, MatMul, Gemm with a constant operand 1)
  std::optional<MathFidelity> math_fidelity;  // convs and matmuls
  std::optional<DataType> accumulate_df;      // convs and matmuls, with Numerics::kTt
  std::string output_by, weights_by, fidelity_by, accumulate_by;
  std::string to_string() const;  // "output bfloat16, weights bfloat8_b (rule 1), HiFi2 (amp_level 1)"
};

}  // namespace tessera::runtime
