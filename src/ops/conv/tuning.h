// The conv tuning table: every measured threshold that decides which conv
// algorithm runs and how each algorithm splits its work, as data per ISA
// tier, each with where it was measured (tuning.inc). select.cc and the
// algorithm files read it; none hard-codes a threshold.
//
// A table rather than constants so that it can be reviewed, printed
// (`tessera run --explain`) and later replaced by values measured or
// predicted on the machine at hand: conv_tuning() is the one place that
// would read them.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "tessera/base/cpu_features.h"

namespace tessera::conv {

struct ConvTuning {
#define TS_CONV_TUNING(name, avx2, avx512, provenance) uint64_t name;
#include "tuning.inc"
#undef TS_CONV_TUNING
};

// The values for a tier (kScalar shares the avx2 column: its candidates all
// decline on the ISA before any threshold is read).
const ConvTuning& conv_tuning(KernelIsa isa);

struct ConvTuningEntry {
  std::string_view name;
  uint64_t avx2, avx512;
  std::string_view provenance;
};
std::span<const ConvTuningEntry> conv_tuning_entries();

}  // namespace tessera::conv
