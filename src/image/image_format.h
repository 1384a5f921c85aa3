// The byte layout of a compiled image file (tessera/image/image.h), for the
// image reader and writer only.
//
// Why a hand-written preamble around the FlatBuffers table: the checksums
// must sit outside the bytes they cover, and the weights must start on a
// page boundary of the file so they can be mapped; FlatBuffers (src/image/
// image.fbs) holds everything else. CRC-32 is zlib's (the gzip polynomial,
// reflected), computed by ISA-L with carry-less multiplies: a 100 MB weights
// section in ~5 ms where zlib 1.2 takes ~15.
#pragma once

#include <isa-l/crc.h>

#include <cstdint>
#include <cstring>
#include <span>

namespace tessera::image::format {

inline constexpr char kMagic[8] = {'T', 'S', 'I', 'M', 'A', 'G', 'E', '\x1a'};
inline constexpr uint64_t kPreambleBytes = 64;
inline constexpr uint64_t kWeightsAlignment = 4096;  // of the section in the file
inline constexpr uint64_t kTensorAlignment = 64;     // of each array in the section

// Little-endian on disk; Tessera runs on little-endian hosts only (x86-64).
struct Preamble {
  char magic[8];
  uint16_t format_major;
  uint16_t format_minor;
  uint32_t preamble_bytes;  // 64
  uint64_t meta_offset, meta_bytes;
  uint64_t weights_offset, weights_bytes;
  uint32_t meta_crc, weights_crc;
  uint32_t preamble_crc;  // of the 56 bytes before it
  uint32_t reserved;
};
static_assert(sizeof(Preamble) == kPreambleBytes);
static_assert(offsetof(Preamble, preamble_crc) == 56);

inline uint32_t crc32_of(std::span<const uint8_t> bytes) {
  return bytes.empty() ? 0 : crc32_gzip_refl(0, bytes.data(), bytes.size());
}

inline uint32_t preamble_crc(const Preamble& p) {
  return crc32_of({reinterpret_cast<const uint8_t*>(&p), offsetof(Preamble, preamble_crc)});
}

inline uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace tessera::image::format
