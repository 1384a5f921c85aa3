#include "tessera/numerics/convert.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "tessera/numerics/bfloat16.h"
#include "tessera/numerics/block_float.h"
#include "tessera/numerics/float16.h"

namespace tessera {

namespace {

template <class T>
void ints_to_float(const std::byte* src, float* dst, size_t n) {
  const T* s = reinterpret_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
}

template <class T>
void float_to_ints(const float* src, std::byte* dst, DataType t, size_t n) {
  T* d = reinterpret_cast<T*>(dst);
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(float_to_integer(src[i], t));
}

int64_t load_integer(const std::byte* p, DataType t, size_t i) {
  switch (t) {
    case DataType::UINT8: return reinterpret_cast<const uint8_t*>(p)[i];
    case DataType::UINT16: return reinterpret_cast<const uint16_t*>(p)[i];
    case DataType::UINT32: return reinterpret_cast<const uint32_t*>(p)[i];
    default: return reinterpret_cast<const int32_t*>(p)[i];
  }
}

void store_integer(std::byte* p, DataType t, size_t i, int64_t v) {
  switch (t) {
    case DataType::UINT8: reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DataType::UINT16: reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v); break;
    case DataType::UINT32: reinterpret_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v); break;
    default: reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
  }
}

}  // namespace

float integer_to_float(int64_t v) { return static_cast<float>(v); }

int64_t saturate_integer(int64_t v, DataType t) {
  int64_t lo = 0, hi = 0;
  switch (t) {
    case DataType::UINT8: hi = 255; break;
    case DataType::UINT16: hi = 65535; break;
    case DataType::UINT32: hi = 4294967295LL; break;
    default: lo = std::numeric_limits<int32_t>::min(); hi = std::numeric_limits<int32_t>::max(); break;
  }
  return v < lo ? lo : v > hi ? hi : v;
}

int64_t float_to_integer(float f, DataType t) {
  if (std::isnan(f)) return 0;
  double d = std::trunc(static_cast<double>(f));
  if (d < -9.0e18) d = -9.0e18;
  if (d > 9.0e18) d = 9.0e18;
  return saturate_integer(static_cast<int64_t>(d), t);
}

void convert_to_float(const std::byte* src, DataType t, float* dst, size_t n) {
  switch (t) {
    case DataType::FLOAT32: std::memcpy(dst, src, n * 4); break;
    case DataType::BFLOAT16: bfloat16_to_float(reinterpret_cast<const uint16_t*>(src), dst, n); break;
    case DataType::FLOAT16: float16_to_float(reinterpret_cast<const uint16_t*>(src), dst, n); break;
    case DataType::BFLOAT8_B: case DataType::BFLOAT4_B: case DataType::BFLOAT2_B:
      unpack_bfp_tiles(src, dst, n / kTileElements, t);
      break;
    case DataType::UINT8: ints_to_float<uint8_t>(src, dst, n); break;
    case DataType::UINT16: ints_to_float<uint16_t>(src, dst, n); break;
    case DataType::UINT32: ints_to_float<uint32_t>(src, dst, n); break;
    case DataType::INT32: ints_to_float<int32_t>(src, dst, n); break;
  }
}

void convert_from_float(const float* src, std::byte* dst, DataType t, size_t n) {
  switch (t) {
    case DataType::FLOAT32: std::memcpy(dst, src, n * 4); break;
    case DataType::BFLOAT16: float_to_bfloat16(src, reinterpret_cast<uint16_t*>(dst), n); break;
    case DataType::FLOAT16: float_to_float16(src, reinterpret_cast<uint16_t*>(dst), n); break;
    case DataType::BFLOAT8_B: case DataType::BFLOAT4_B: case DataType::BFLOAT2_B:
      pack_bfp_tiles(src, dst, n / kTileElements, t);
      break;
    case DataType::UINT8: float_to_ints<uint8_t>(src, dst, t, n); break;
    case DataType::UINT16: float_to_ints<uint16_t>(src, dst, t, n); break;
    case DataType::UINT32: float_to_ints<uint32_t>(src, dst, t, n); break;
    case DataType::INT32: float_to_ints<int32_t>(src, dst, t, n); break;
  }
}

void convert_elements(const std::byte* src, DataType st, std::byte* dst, DataType dt, size_t n) {
  if (st == dt) {
    std::memcpy(dst, src, is_block_float(st) ? n / kTileElements * tile_size_bytes(st) : n * element_size(st));
    return;
  }
  // float32 <-> bfloat16 in one pass, not through the float32 buffer below.
  if (st == DataType::FLOAT32 && dt == DataType::BFLOAT16) {
    float_to_bfloat16(reinterpret_cast<const float*>(src), reinterpret_cast<uint16_t*>(dst), n);
    return;
  }
  if (st == DataType::BFLOAT16 && dt == DataType::FLOAT32) {
    bfloat16_to_float(reinterpret_cast<const uint16_t*>(src), reinterpret_cast<float*>(dst), n);
    return;
  }
  if (!is_floating(st) && !is_floating(dt)) {
    for (size_t i = 0; i < n; ++i) store_integer(dst, dt, i, saturate_integer(load_integer(src, st, i), dt));
    return;
  }
  float buf[kTileElements];
  const size_t in_unit = is_block_float(st) ? tile_size_bytes(st) : kTileElements * element_size(st);
  const size_t out_unit = is_block_float(dt) ? tile_size_bytes(dt) : kTileElements * element_size(dt);
  for (size_t i = 0; i < n; i += kTileElements) {
    size_t m = n - i < kTileElements ? n - i : kTileElements;
    convert_to_float(src + i / kTileElements * in_unit, st, buf, m);
    convert_from_float(buf, dst + i / kTileElements * out_unit, dt, m);
  }
}

}  // namespace tessera
