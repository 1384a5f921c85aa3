// Peak-throughput loop for AMX's BF16 tile multiply (TDPBF16PS): four
// accumulator tiles of 16 x 16 float32 fed by two A and two B tiles, held in
// the tile registers, so the loop runs at the tile unit's issue rate. Built
// with -mamx-tile -mamx-bf16 and called only where cpu_features().amx_bf16.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "peak.h"

namespace tessera::bench {

namespace {

// The 64-byte tile configuration LDTILECFG reads (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace

bool request_amx_tiles() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

float amx_bf16_loop(uint64_t iterations) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t operand[16 * 32];
  for (uint16_t& v : operand) v = 0x3a83;  // bfloat16 1e-3
  alignas(64) float out[16 * 16];
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  for (uint64_t i = 0; i < iterations; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0] + out[255];
}

}  // namespace tessera::bench
