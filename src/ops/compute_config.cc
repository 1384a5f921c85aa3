#include "tessera/ops/compute_config.h"

namespace tessera {

std::string_view math_fidelity_name(MathFidelity f) {
  switch (f) {
    case MathFidelity::LoFi: return "LoFi";
    case MathFidelity::HiFi2: return "HiFi2";
    case MathFidelity::HiFi3: return "HiFi3";
    case MathFidelity::HiFi4: return "HiFi4";
  }
  return "?";
}

std::optional<MathFidelity> parse_math_fidelity(std::string_view name) {
  for (MathFidelity f : {MathFidelity::LoFi, MathFidelity::HiFi2, MathFidelity::HiFi3, MathFidelity::HiFi4})
    if (math_fidelity_name(f) == name) return f;
  return std::nullopt;
}

}  // namespace tessera
