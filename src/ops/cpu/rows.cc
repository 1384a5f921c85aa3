#include "rows.h"

#include <algorithm>
#include <cstring>

#include "tessera/numerics/convert.h"

namespace tessera::cpu {

void read_row(const TensorAccess& a, DataType t, uint32_t r, uint32_t c, uint32_t n, float* dst) {
  for (uint32_t done = 0; done < n;) {
    uint32_t run = 0;
    const std::byte* p = a.unit(r, c + done, &run);
    run = std::min(run, n - done);
    convert_to_float(p, t, dst + done, run);
    done += run;
  }
}

void write_row(const TensorAccess& a, DataType t, uint32_t r, uint32_t c, uint32_t n, const float* src) {
  for (uint32_t done = 0; done < n;) {
    uint32_t run = 0;
    std::byte* p = a.unit(r, c + done, &run);
    run = std::min(run, n - done);
    convert_from_float(src + done, p, t, run);
    done += run;
  }
}

void copy_row(const TensorAccess& src, uint32_t sr, uint32_t sc, const TensorAccess& dst, uint32_t dr, uint32_t dc,
              uint32_t n) {
  for (uint32_t done = 0; done < n;) {
    uint32_t rs = 0, rd = 0;
    const std::byte* s = src.unit(sr, sc + done, &rs);
    std::byte* d = dst.unit(dr, dc + done, &rd);
    const uint32_t k = std::min({rs, rd, n - done});
    std::memcpy(d, s, uint64_t{k} * src.unit_bytes);
    done += k;
  }
}

}  // namespace tessera::cpu
