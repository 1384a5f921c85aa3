#include "tuning.h"

namespace tessera::conv {

namespace {

constexpr ConvTuning kAvx2 = {
#define TS_CONV_TUNING(name, avx2, avx512, provenance) avx2,
#include "tuning.inc"
#undef TS_CONV_TUNING
};
constexpr ConvTuning kAvx512 = {
#define TS_CONV_TUNING(name, avx2, avx512, provenance) avx512,
#include "tuning.inc"
#undef TS_CONV_TUNING
};
constexpr ConvTuningEntry kEntries[] = {
#define TS_CONV_TUNING(name, avx2, avx512, provenance) {#name, avx2, avx512, provenance},
#include "tuning.inc"
#undef TS_CONV_TUNING
};

}  // namespace

const ConvTuning& conv_tuning(KernelIsa isa) { return isa == KernelIsa::kAvx512 ? kAvx512 : kAvx2; }

std::span<const ConvTuningEntry> conv_tuning_entries() { return kEntries; }

}  // namespace tessera::conv
