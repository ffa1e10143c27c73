// The compact cache rows (quant/kv_rows.h): exact round trips of values each dtype represents, rounding bounds of
// the others, zero and non-finite rows, names and segment sizes.
#include "quant/kv_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/formats.h"

namespace glint {
namespace {

constexpr KvCacheDtype kAll[] = {KvCacheDtype::kFloat32, KvCacheDtype::kBfloat16, KvCacheDtype::kFp8,
                                 KvCacheDtype::kInt8};

std::vector<float> RoundTrip(KvCacheDtype dtype, const std::vector<float>& x, float* scale_out = nullptr) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<std::byte> values(n * KvValueBytes(dtype));
  float scale = -1.0f;
  EncodeKvRow(dtype, x.data(), n, values.data(), &scale);
  std::vector<float> out(n);
  DecodeKvRow(dtype, values.data(), &scale, n, out.data());
  if (scale_out != nullptr) *scale_out = scale;
  return out;
}

TEST(KvRows, NamesParseAndUnknownIsRefused) {
  for (KvCacheDtype dtype : kAll) {
    auto parsed = ParseKvCacheDtype(KvCacheDtypeName(dtype));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(parsed.value(), dtype);
  }
  const auto bad = ParseKvCacheDtype("fp16");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("fp32, bf16, fp8 or int8"), std::string::npos) << bad.status().ToString();
}

TEST(KvRows, RepresentableValuesRoundTripExactly) {
  // Each row holds amax exactly at the format's limit, so the scale is a power of two and every value is a code.
  const std::vector<float> fp32 = {1.0f, -3.25e-7f, 12345.678f, 0.0f};
  EXPECT_EQ(RoundTrip(KvCacheDtype::kFloat32, fp32), fp32);
  const std::vector<float> bf16 = {RoundToBf16(0.3f), RoundToBf16(-1e-20f), RoundToBf16(3e30f), 0.0f};
  EXPECT_EQ(RoundTrip(KvCacheDtype::kBfloat16, bf16), bf16);
  std::vector<float> int8;  // codes −127..127 times 2^-6: s = 127 · 2^-6 / 127 = 2^-6
  for (int q = -127; q <= 127; ++q) int8.push_back(std::ldexp(static_cast<float>(q), -6));
  float scale = 0;
  EXPECT_EQ(RoundTrip(KvCacheDtype::kInt8, int8, &scale), int8);
  EXPECT_EQ(scale, std::ldexp(1.0f, -6));
  std::vector<float> fp8;  // every finite e4m3 code times 2^-3, including ±448 · 2^-3 (s = 2^-3)
  for (int code = 0; code < 256; ++code) {
    const float v = Fp8E4m3ToFloat(static_cast<uint8_t>(code));
    if (std::isfinite(v)) fp8.push_back(std::ldexp(v, -3));
  }
  EXPECT_EQ(RoundTrip(KvCacheDtype::kFp8, fp8, &scale), fp8);
  EXPECT_EQ(scale, std::ldexp(1.0f, -3));
}

TEST(KvRows, RoundingStaysWithinTheFormatsStep) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(512);
  for (float& v : x) v = normal(rng);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const std::vector<float> bf16 = RoundTrip(KvCacheDtype::kBfloat16, x);
  const std::vector<float> int8 = RoundTrip(KvCacheDtype::kInt8, x);
  const std::vector<float> fp8 = RoundTrip(KvCacheDtype::kFp8, x);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_LE(std::fabs(bf16[i] - x[i]), std::ldexp(std::fabs(x[i]), -8)) << i;  // half an 8-bit-mantissa ulp
    // Half a step s = amax/127, plus fp32 rounding of q · s and of x · 127/amax (a few ulps of amax).
    EXPECT_LE(std::fabs(int8[i] - x[i]), amax / 127 * (0.5f + 1e-5f)) << i;
    // e4m3: 3 mantissa bits → half an ulp is 2^-4 relative, or half the subnormal step 2^-10 · s absolute.
    EXPECT_LE(std::fabs(fp8[i] - x[i]),
              std::max(std::ldexp(std::fabs(x[i]), -4), std::ldexp(amax / 448, -10)) * (1 + 1e-5f))
        << i;
  }
}

TEST(KvRows, ZeroRowsStayZeroAndNonFiniteRowsBecomeNan) {
  for (KvCacheDtype dtype : kAll) {
    const std::vector<float> zeros(64, 0.0f);
    for (float v : RoundTrip(dtype, zeros)) EXPECT_EQ(v, 0.0f) << KvCacheDtypeName(dtype);
  }
  std::vector<float> broken(64, 1.0f);
  broken[5] = std::numeric_limits<float>::infinity();
  for (KvCacheDtype dtype : {KvCacheDtype::kFp8, KvCacheDtype::kInt8}) {
    for (float v : RoundTrip(dtype, broken)) EXPECT_TRUE(std::isnan(v)) << KvCacheDtypeName(dtype);
  }
}

TEST(KvRows, SegmentsHoldValuesThenAlignedScales) {
  const KvSegment fp32 = KvSegment::Make(KvCacheDtype::kFloat32, 64, 512);
  EXPECT_EQ(fp32.Bytes(), 64 * 512 * 4);
  const KvSegment int8 = KvSegment::Make(KvCacheDtype::kInt8, 16, 100);
  EXPECT_EQ(int8.RowStride(), 100);
  EXPECT_EQ(int8.scales_offset, 1600);  // 1600 is a multiple of 64
  EXPECT_EQ(int8.Bytes(), 1600 + 16 * 4);
  const KvSegment fp8 = KvSegment::Make(KvCacheDtype::kFp8, 3, 10);
  EXPECT_EQ(fp8.scales_offset, 64);
  EXPECT_EQ(KvRowBytes(KvCacheDtype::kFp8, 512), 516);
  EXPECT_EQ(KvRowBytes(KvCacheDtype::kBfloat16, 128), 256);
}

}  // namespace
}  // namespace glint
