// fp8 e4m3fn and bf16 conversions, checked exhaustively against independent definitions.
#include "quant/formats.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>

namespace glint {
namespace {

// e4m3fn by definition: value = (-1)^s · 2^(e-7) · (1 + m/8) for e > 0, (-1)^s · 2^-6 · m/8 for e = 0.
double Fp8ByDefinition(int code) {
  const int sign = code >> 7;
  const int exponent = (code >> 3) & 15;
  const int mantissa = code & 7;
  double magnitude = exponent == 0 ? std::ldexp(mantissa / 8.0, -6) : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

TEST(Fp8E4m3, AllCodesDecodeExactly) {
  int nan_codes = 0;
  for (int code = 0; code < 256; ++code) {
    const float decoded = Fp8E4m3ToFloat(static_cast<uint8_t>(code));
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(decoded)) << "code " << code;
      ++nan_codes;
      continue;
    }
    EXPECT_EQ(static_cast<double>(decoded), Fp8ByDefinition(code)) << "code " << code;
    EXPECT_EQ(Fp8E4m3Table()[code], decoded) << "table, code " << code;
  }
  EXPECT_EQ(nan_codes, 2);
  EXPECT_EQ(Fp8E4m3ToFloat(0x7e), 448.0f);          // largest finite
  EXPECT_EQ(Fp8E4m3ToFloat(0x01), 0x1p-9f);         // smallest subnormal
  EXPECT_TRUE(std::signbit(Fp8E4m3ToFloat(0x80)));  // -0
}

TEST(Fp8E4m3, EncodeRoundTripsEveryFiniteCode) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    EXPECT_EQ(FloatToFp8E4m3(Fp8E4m3ToFloat(static_cast<uint8_t>(code))), code) << "code " << code;
  }
}

TEST(Fp8E4m3, EncodeRoundsToNearestEvenAndSaturates) {
  // 1.0 = 0x38, next is 1.125 = 0x39: the midpoint 1.0625 ties to the even code 0x38; just above rounds up.
  EXPECT_EQ(FloatToFp8E4m3(1.0625f), 0x38);
  EXPECT_EQ(FloatToFp8E4m3(std::nextafter(1.0625f, 2.0f)), 0x39);
  // 1.125 (0x39) .. 1.25 (0x3a): midpoint 1.1875 ties to even 0x3a.
  EXPECT_EQ(FloatToFp8E4m3(1.1875f), 0x3a);
  EXPECT_EQ(FloatToFp8E4m3(1000.0f), 0x7e);
  EXPECT_EQ(FloatToFp8E4m3(-1000.0f), 0xfe);
  EXPECT_EQ(FloatToFp8E4m3(std::nanf("")), 0x7f);
  EXPECT_EQ(FloatToFp8E4m3(0x1p-11f), 0x00);  // below half the smallest subnormal → 0
}

// Every one of the 65,536 binary16 codes against the compiler's own _Float16 conversion (an independent
// implementation): equal values, or both NaN with the same sign.
TEST(Fp16, AllCodesDecodeExactly) {
  for (uint32_t code = 0; code < 65536; ++code) {
    const float ours = Fp16ToFloat(static_cast<uint16_t>(code));
    const float theirs = static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(code)));
    if (std::isnan(theirs)) {
      ASSERT_TRUE(std::isnan(ours)) << "code " << code;
      ASSERT_EQ(std::signbit(ours), std::signbit(theirs)) << "code " << code;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(ours), std::bit_cast<uint32_t>(theirs)) << "code " << code;
    }
  }
  EXPECT_EQ(Fp16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));  // the smallest subnormal
  EXPECT_EQ(Fp16ToFloat(0x7bff), 65504.0f);               // the largest finite
}

TEST(Bf16, DecodeIsTheTopHalfOfFp32) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = Bf16ToFloat(static_cast<bf16_bits>(bits));
    EXPECT_EQ(std::bit_cast<uint32_t>(value), bits << 16);
  }
}

TEST(Bf16, EncodeRoundsToNearestEven) {
  // Every bf16 value maps to itself, and midpoints between neighbours go to the even one.
  for (uint32_t bits = 0; bits < 0x10000; bits += 1) {
    const uint32_t exponent = (bits >> 7) & 0xff;
    if (exponent == 0xff) continue;  // inf/NaN checked below
    const float value = Bf16ToFloat(static_cast<bf16_bits>(bits));
    ASSERT_EQ(FloatToBf16(value), bits);
    const float midpoint = std::bit_cast<float>((bits << 16) | 0x8000u);
    const uint32_t expected = (bits & 1) ? bits + 1 : bits;
    ASSERT_EQ(FloatToBf16(midpoint), expected) << std::hex << bits;
    const float above = std::bit_cast<float>((bits << 16) | 0x8001u);
    ASSERT_EQ(FloatToBf16(above), bits + 1) << std::hex << bits;
    const float below = std::bit_cast<float>((bits << 16) | 0x7fffu);
    ASSERT_EQ(FloatToBf16(below), bits) << std::hex << bits;
  }
  EXPECT_EQ(FloatToBf16(INFINITY), 0x7f80);
  EXPECT_EQ(FloatToBf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);  // max float rounds to inf
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::bit_cast<float>(0x7f800001u)))));  // NaN never becomes inf
}

}  // namespace
}  // namespace glint
