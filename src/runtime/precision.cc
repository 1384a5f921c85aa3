// Precision rules: JSON in and out, AMP levels, descriptions.
#include "tessera/runtime/precision.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace tessera::runtime {

using nlohmann::json;

StatusOr<std::optional<AmpDefaults>> amp_level_defaults(int level) {
  switch (level) {
    case 0:
      return std::optional<AmpDefaults>();
    case 1:
      return std::optional(AmpDefaults{DataType::BFLOAT16, DataType::BFLOAT8_B, MathFidelity::HiFi2});
    case 2:
      return std::optional(AmpDefaults{DataType::BFLOAT16, DataType::BFLOAT4_B, MathFidelity::LoFi});
    default:
      return invalid_argument_error("AMP level {}: expected 0 (off), 1 or 2", level);
  }
}

std::string_view numerics_name(Numerics n) { return n == Numerics::kTt ? "tt" : "fast"; }
std::optional<Numerics> parse_numerics(std::string_view name) {
  if (name == "fast") return Numerics::kFast;
  if (name == "tt") return Numerics::kTt;
  return std::nullopt;
}

std::string describe_rule(const PrecisionRule& r, size_t index) {
  std::string what;
  if (!r.op_type.empty()) what += fmt::format("op_type {}", r.op_type);
  if (!r.name_regex.empty()) what += fmt::format("{}name_regex '{}'", what.empty() ? "" : ", ", r.name_regex);
  return fmt::format("rule {} ({})", index + 1, what.empty() ? "every op" : what);
}

namespace {

StatusOr<DataType> format_of(const json& v, const std::string& where) {
  if (!v.is_string()) return invalid_argument_error("{}: expected a format name (a string), found {}", where, v.dump());
  const std::string s = v.get<std::string>();
  const auto t = parse_data_type(s);
  if (!t || !is_floating(*t))
    return invalid_argument_error("{}: unknown format '{}' (expected float32, bfloat16, bfloat8_b or bfloat4_b)", where,
                                  s);
  return *t;
}

StatusOr<PrecisionRule> rule_of(const json& j, size_t index) {
  const std::string at = fmt::format("rule {}", index + 1);
  if (!j.is_object()) return invalid_argument_error("{}: expected an object, found {}", at, j.dump());
  PrecisionRule r;
  for (const auto& [key, v] : j.items()) {
    const std::string where = fmt::format("{}: '{}'", at, key);
    if (key == "op_type" || key == "name_regex") {
      if (!v.is_string()) return invalid_argument_error("{}: expected a string, found {}", where, v.dump());
      (key == "op_type" ? r.op_type : r.name_regex) = v.get<std::string>();
    } else if (key == "output_df" || key == "intermediate_df" || key == "accumulate_df") {
      TS_ASSIGN_OR_RETURN(DataType t, format_of(v, where));
      (key == "output_df" ? r.output_df : key == "intermediate_df" ? r.intermediate_df : r.accumulate_df) = t;
    } else if (key == "math_fidelity") {
      const auto f = v.is_string() ? parse_math_fidelity(v.get<std::string>()) : std::nullopt;
      if (!f) return invalid_argument_error("{}: expected LoFi, HiFi2, HiFi3 or HiFi4, found {}", where, v.dump());
      r.math_fidelity = *f;
    } else if (key == "input_df") {
      if (!v.is_object())
        return invalid_argument_error("{}: expected an object of operand index -> format, found {}", where, v.dump());
      for (const auto& [k, f] : v.items()) {
        const bool digits = !k.empty() && k.size() < 4 && k.find_first_not_of("0123456789") == std::string::npos;
        if (!digits) return invalid_argument_error("{}: operand '{}' is not an operand index (0, 1, ...)", where, k);
        TS_ASSIGN_OR_RETURN(r.input_df[std::stoi(k)], format_of(f, fmt::format("{}[{}]", where, k)));
      }
    } else {
      return invalid_argument_error(
          "{}: unknown key '{}' (expected op_type, name_regex, output_df, intermediate_df, accumulate_df, "
          "math_fidelity, input_df)",
          at, key);
    }
  }
  return r;
}

}  // namespace

StatusOr<PrecisionConfig> parse_precision_config(std::string_view text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument_error("precision config: not valid JSON");
  PrecisionConfig c;
  const json* rules = &j;
  if (j.is_object()) {
    for (const auto& [key, v] : j.items())
      if (key != "amp_level" && key != "rules")
        return invalid_argument_error("precision config: unknown key '{}' (expected amp_level, rules)", key);
    rules = j.contains("rules") ? &j["rules"] : nullptr;
    if (j.contains("amp_level")) {
      if (!j["amp_level"].is_number_integer())
        return invalid_argument_error("precision config: amp_level: expected 0, 1 or 2, found {}",
                                      j["amp_level"].dump());
      c.amp_level = j["amp_level"].get<int>();
      TS_RETURN_IF_ERROR(amp_level_defaults(c.amp_level).status());
    }
  }
  if (rules) {
    if (!rules->is_array())
      return invalid_argument_error("precision config: expected a list of rules, found {}", rules->dump());
    for (size_t i = 0; i < rules->size(); ++i) {
      TS_ASSIGN_OR_RETURN(PrecisionRule r, rule_of((*rules)[i], i));
      c.rules.push_back(std::move(r));
    }
  }
  return c;
}

std::string precision_config_to_json(const PrecisionConfig& c) {
  json rules = json::array();
  for (const PrecisionRule& r : c.rules) {
    json o = json::object();
    if (!r.op_type.empty()) o["op_type"] = r.op_type;
    if (!r.name_regex.empty()) o["name_regex"] = r.name_regex;
    if (r.output_df) o["output_df"] = data_type_name(*r.output_df);
    if (r.intermediate_df) o["intermediate_df"] = data_type_name(*r.intermediate_df);
    if (r.accumulate_df) o["accumulate_df"] = data_type_name(*r.accumulate_df);
    if (r.math_fidelity) o["math_fidelity"] = math_fidelity_name(*r.math_fidelity);
    for (const auto& [k, t] : r.input_df) o["input_df"][std::to_string(k)] = data_type_name(t);
    rules.push_back(std::move(o));
  }
  return json{{"amp_level", c.amp_level}, {"rules", std::move(rules)}}.dump();
}

std::string OpPrecision::to_string() const {
  auto by = [](const std::string& who) { return who.empty() ? std::string() : fmt::format(" ({})", who); };
  std::string s = fmt::format("output {}{}", data_type_name(output_df), by(output_by));
  if (weights_df) s += fmt::format(", weights {}{}", data_type_name(*weights_df), by(weights_by));
  if (math_fidelity) s += fmt::format(", {}{}", math_fidelity_name(*math_fidelity), by(fidelity_by));
  if (accumulate_df) s += fmt::format(", accumulate {}{}", data_type_name(*accumulate_df), by(accumulate_by));
  return s;
}

}  // namespace tessera::runtime
