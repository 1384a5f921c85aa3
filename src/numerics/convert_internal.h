// AVX-512 variants of the numerics bulk functions; called only when
// avx512_kernels_enabled(). Bit-identical to the scalar code by contract.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::avx512 {

void float_to_bfloat16(const float* src, uint16_t* dst, size_t n);
void float_to_bfloat16_rows(const float* src, size_t src_stride, uint16_t* dst, size_t dst_stride, size_t rows,
                            size_t n);
void bfloat16_to_float(const uint16_t* src, float* dst, size_t n);
void pack_bfp_tiles(const float* src, std::byte* dst, size_t num_tiles, int mantissa_bits);
void unpack_bfp_tiles(const std::byte* src, float* dst, size_t num_tiles, int mantissa_bits);

}  // namespace tessera::avx512

// AVX2 variants of the bfloat16 bulk conversions; called when the kernel set
// is AVX2 (no AVX-512). Bit-identical to the scalar code by contract.
namespace tessera::avx2 {

void float_to_bfloat16(const float* src, uint16_t* dst, size_t n);
void bfloat16_to_float(const uint16_t* src, float* dst, size_t n);

}  // namespace tessera::avx2
