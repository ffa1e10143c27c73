#include "quant/kv_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "quant/formats.h"

namespace glint {
namespace {

constexpr float kFp8Max = 448.0f;   // largest finite e4m3fn value
constexpr float kInt8Max = 127.0f;  // symmetric: −128 is never produced

float RowAmax(const float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return std::numeric_limits<float>::quiet_NaN();
    amax = std::max(amax, std::fabs(x[i]));
  }
  return amax;
}

}  // namespace

std::string_view KvCacheDtypeName(KvCacheDtype dtype) {
  switch (dtype) {
    case KvCacheDtype::kFloat32:
      return "fp32";
    case KvCacheDtype::kBfloat16:
      return "bf16";
    case KvCacheDtype::kFp8:
      return "fp8";
    case KvCacheDtype::kInt8:
      return "int8";
  }
  return "unknown";
}

Result<KvCacheDtype> ParseKvCacheDtype(std::string_view name) {
  for (KvCacheDtype dtype :
       {KvCacheDtype::kFloat32, KvCacheDtype::kBfloat16, KvCacheDtype::kFp8, KvCacheDtype::kInt8}) {
    if (name == KvCacheDtypeName(dtype)) return dtype;
  }
  return InvalidArgument("KV cache dtype '", name, "' is unknown; expected ", kKvCacheDtypeNames);
}

bool KvCacheDtypeHasScale(KvCacheDtype dtype) { return dtype == KvCacheDtype::kFp8 || dtype == KvCacheDtype::kInt8; }

int64_t KvValueBytes(KvCacheDtype dtype) {
  switch (dtype) {
    case KvCacheDtype::kFloat32:
      return 4;
    case KvCacheDtype::kBfloat16:
      return 2;
    case KvCacheDtype::kFp8:
    case KvCacheDtype::kInt8:
      return 1;
  }
  return 4;
}

void EncodeKvRow(KvCacheDtype dtype, const float* x, int64_t n, std::byte* values, float* scale) {
  switch (dtype) {
    case KvCacheDtype::kFloat32:
      std::memcpy(values, x, n * sizeof(float));
      return;
    case KvCacheDtype::kBfloat16:
      for (int64_t i = 0; i < n; ++i) {
        const bf16_bits bits = FloatToBf16(x[i]);
        std::memcpy(values + 2 * i, &bits, 2);
      }
      return;
    case KvCacheDtype::kFp8:
    case KvCacheDtype::kInt8: {
      const float limit = dtype == KvCacheDtype::kFp8 ? kFp8Max : kInt8Max;
      const float amax = RowAmax(x, n);
      *scale = amax / limit;  // NaN stays NaN; 0 for a row of zeros
      const float inverse = amax > 0 && std::isfinite(amax) ? limit / amax : 0.0f;
      auto* out = reinterpret_cast<uint8_t*>(values);
      for (int64_t i = 0; i < n; ++i) {
        const float y = x[i] * inverse;  // |y| ≤ limit up to rounding
        if (dtype == KvCacheDtype::kFp8) {
          out[i] = FloatToFp8E4m3(y);
        } else {
          out[i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(y), -kInt8Max, kInt8Max)));
        }
      }
      return;
    }
  }
}

void DecodeKvRow(KvCacheDtype dtype, const std::byte* values, const float* scale, int64_t n, float* out) {
  switch (dtype) {
    case KvCacheDtype::kFloat32:
      std::memcpy(out, values, n * sizeof(float));
      return;
    case KvCacheDtype::kBfloat16:
      for (int64_t i = 0; i < n; ++i) {
        bf16_bits bits;
        std::memcpy(&bits, values + 2 * i, 2);
        out[i] = Bf16ToFloat(bits);
      }
      return;
    case KvCacheDtype::kFp8: {
      const float* table = Fp8E4m3Table();
      const auto* codes = reinterpret_cast<const uint8_t*>(values);
      for (int64_t i = 0; i < n; ++i) out[i] = table[codes[i]] * *scale;
      return;
    }
    case KvCacheDtype::kInt8: {
      const auto* q = reinterpret_cast<const int8_t*>(values);
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(q[i]) * *scale;
      return;
    }
  }
}

KvSegment KvSegment::Make(KvCacheDtype dtype, int64_t rows, int64_t width) {
  KvSegment segment{dtype, rows, width, 0};
  // Scales start on a 64-byte boundary after the values (rows of 512 or 128 one-byte values already end on one).
  segment.scales_offset = (rows * segment.RowStride() + 63) / 64 * 64;
  return segment;
}

int64_t KvSegment::Bytes() const { return KvCacheDtypeHasScale(dtype) ? scales_offset + rows * 4 : rows * RowStride(); }

}  // namespace glint
