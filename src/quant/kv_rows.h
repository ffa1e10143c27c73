// Storage of the per-token cache rows of a DSA layer (the MLA latent c_j and the indexer's pooled keys pk_m) in a
// compact dtype, one scale per row (docs/long-context.md "Compact caches" says why per row):
//
//   fp32  x as computed (the default; what every other dtype is measured against)
//   bf16  round to nearest even, no scale (bf16 keeps fp32's exponent range)
//   fp8   e4m3fn code of x / s, s = amax(|x|) / 448, round to nearest even      value = decode(code) · s
//   int8  q = round(x / s) clamped to ±127, s = amax(|x|) / 127 (symmetric)     value = q · s
//
// A row of n values takes n · ValueBytes bytes plus, for fp8 and int8, one fp32 scale kept beside the rows of its
// block (KvSegment). A row of zeros gets s = 0 and decodes to zeros exactly. A non-finite amax (an inf or NaN in
// the row) gives s = NaN: the whole row decodes to NaN, so a broken latent is never silently turned into numbers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace glint {

enum class KvCacheDtype : uint8_t { kFloat32, kBfloat16, kFp8, kInt8 };

inline constexpr const char* kKvCacheDtypeNames = "fp32, bf16, fp8 or int8";
std::string_view KvCacheDtypeName(KvCacheDtype dtype);
Result<KvCacheDtype> ParseKvCacheDtype(std::string_view name);  // error names the accepted values
bool KvCacheDtypeHasScale(KvCacheDtype dtype);                  // fp8, int8
int64_t KvValueBytes(KvCacheDtype dtype);                       // 4, 2, 1, 1

// Bytes of one row of n values including its scale (what a cache position costs per row).
inline int64_t KvRowBytes(KvCacheDtype dtype, int64_t n) {
  return n * KvValueBytes(dtype) + (KvCacheDtypeHasScale(dtype) ? 4 : 0);
}

// values: n · KvValueBytes(dtype) bytes; scale: the row's scale (unused and may be null for fp32 and bf16).
void EncodeKvRow(KvCacheDtype dtype, const float* x, int64_t n, std::byte* values, float* scale);
void DecodeKvRow(KvCacheDtype dtype, const std::byte* values, const float* scale, int64_t n, float* out);

// Rows [rows, n] of a block in one segment: the values of every row, then (fp8, int8) the rows' scales.
struct KvSegment {
  KvCacheDtype dtype = KvCacheDtype::kFloat32;
  int64_t rows = 0;           // per block
  int64_t width = 0;          // values per row
  int64_t scales_offset = 0;  // bytes from the segment start to the scales

  static KvSegment Make(KvCacheDtype dtype, int64_t rows, int64_t width);
  int64_t RowStride() const { return width * KvValueBytes(dtype); }
  int64_t Bytes() const;  // the whole segment, scales included (not aligned)
};

}  // namespace glint
