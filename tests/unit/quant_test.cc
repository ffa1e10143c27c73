// Int8 and bf16 packed formats and the FP8 → int8 requantization: round trips with the bound each format
// promises (int8: half a step, |W − Ŵ| ≤ scale/2 per element; bf16: bit-exact), padding, and bad weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "quant/formats.h"
#include "quant/requantize.h"
#include "test_util.h"

namespace glint {
namespace {

std::vector<float> RandomMatrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(rows * cols);
  // Rows of very different magnitude, and an outlier now and then, as real weights have.
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::exp2(static_cast<float>(static_cast<int>(r % 7) - 3));
    for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = normal(rng) * row_scale * ((c % 37 == 5) ? 8.0f : 1.0f);
  }
  return w;
}

// Every element within half a step (plus fp32 rounding of the product), every code in [−127, 127], the largest
// magnitude of each non-zero group coded as ±127, padding zero.
void ExpectInt8RoundTrip(const std::vector<float>& w, const Int8MatrixView& m) {
  const Int8Layout& l = m.layout;
  std::vector<float> back(l.rows * l.cols);
  DequantizeInt8(m, back.data());
  for (int64_t r = 0; r < l.padded_rows(); ++r) {
    for (int64_t g = 0; g < l.groups(); ++g) {
      const float scale = m.Scale(r, g);
      int max_code = 0;
      for (int64_t c = g * l.group; c < (g + 1) * l.group; ++c) {
        const int code = m.Code(r, c);
        ASSERT_GE(code, -127);
        ASSERT_LE(code, 127);
        if (r >= l.rows || c >= l.cols) {
          ASSERT_EQ(code, 0) << "padding at " << r << ", " << c;
          continue;
        }
        max_code = std::max(max_code, std::abs(code));
        const float original = w[r * l.cols + c];
        ASSERT_LE(std::fabs(back[r * l.cols + c] - original), 0.5f * scale * (1 + 1e-5f) + 1e-30f)
            << "row " << r << " col " << c;
      }
      if (r >= l.rows) {
        EXPECT_EQ(scale, 0.0f);
      } else if (scale > 0) {
        EXPECT_EQ(max_code, 127) << "row " << r << " group " << g;
      }
    }
  }
}

TEST(Int8Matrix, RoundTripWithinHalfAStepAcrossShapesAndGroups) {
  for (int64_t group : {16, 32, 64, 128, 256}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {15, 17}, {16, 64}, {17, 130}, {33, 256}, {48, 300}}) {
      SCOPED_TRACE(::testing::Message() << "group " << group << " shape " << rows << "x" << cols);
      const std::vector<float> w = RandomMatrix(rows, cols, static_cast<uint32_t>(rows * 1000 + cols));
      ASSERT_OK_AND_ASSIGN(Int8Matrix m, QuantizeInt8(w.data(), rows, cols, group));
      EXPECT_EQ(m.layout().padded_cols() % group, 0);
      EXPECT_EQ(m.layout().padded_rows() % 16, 0);
      ExpectInt8RoundTrip(w, m.view());
    }
  }
}

TEST(Int8Matrix, ZeroGroupsAndExactValues) {
  // A zero group has scale 0 and codes 0; a group whose values are multiples of amax/127 is exact.
  const int64_t rows = 2, cols = 32;
  std::vector<float> w(rows * cols, 0.0f);
  for (int64_t c = 16; c < 32; ++c) w[c] = static_cast<float>((c - 24) * 10) * 0.5f;      // row 0 group 1: arbitrary
  for (int64_t c = 0; c < 16; ++c) w[cols + c] = static_cast<float>(c * 8 - 63) * 0.25f;  // row 1 group 0
  w[cols + 15] = 127 * 0.25f;
  ASSERT_OK_AND_ASSIGN(Int8Matrix m, QuantizeInt8(w.data(), rows, cols, 16));
  EXPECT_EQ(m.view().Scale(0, 0), 0.0f);
  for (int64_t c = 0; c < 16; ++c) EXPECT_EQ(m.view().Code(0, c), 0);
  EXPECT_FLOAT_EQ(m.view().Scale(1, 0), 0.25f);
  for (int64_t c = 0; c < 15; ++c) EXPECT_EQ(m.view().Code(1, c), c * 8 - 63);
  EXPECT_EQ(m.view().Code(1, 15), 127);
  ExpectInt8RoundTrip(w, m.view());
}

TEST(Int8Matrix, RefusesNonFiniteWeightsAndBadLayouts) {
  std::vector<float> w(4 * 20, 1.0f);
  w[2 * 20 + 7] = NAN;
  EXPECT_ERROR_CONTAINS(QuantizeInt8(w.data(), 4, 20, 16), "weight row 2 column 7");
  w[2 * 20 + 7] = INFINITY;
  EXPECT_ERROR_CONTAINS(QuantizeInt8(w.data(), 4, 20, 16), "needs finite weights");
  EXPECT_ERROR_CONTAINS(QuantizeInt8(w.data(), 4, 20, 24), "not a positive multiple of 16");
  EXPECT_ERROR_CONTAINS(QuantizeInt8(w.data(), 0, 20, 16), "at least one row");
}

// FP8 e4m3 with 128×128 block scales, as in the checkpoint; rows and cols not multiples of the block.
struct Fp8Tensor {
  int64_t rows, cols;
  std::vector<uint8_t> codes;    // [rows, cols]
  std::vector<float> scale_inv;  // [ceil(rows/128), ceil(cols/128)]
  std::vector<float> Dequantized() const {
    std::vector<float> w(rows * cols);
    const int64_t scale_cols = (cols + 127) / 128;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        w[r * cols + c] = Fp8E4m3ToFloat(codes[r * cols + c]) * scale_inv[(r / 128) * scale_cols + c / 128];
      }
    }
    return w;
  }
};

Fp8Tensor RandomFp8(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Fp8Tensor t{rows, cols, {}, {}};
  const int64_t scale_rows = (rows + 127) / 128, scale_cols = (cols + 127) / 128;
  for (int64_t i = 0; i < scale_rows * scale_cols; ++i) t.scale_inv.push_back(std::exp2(-9.0f + (i % 5)));
  // Codes of a normal sample scaled so each block reaches ±448, like the checkpoint (scale = amax/448).
  for (int64_t i = 0; i < rows * cols; ++i)
    t.codes.push_back(FloatToFp8E4m3(std::clamp(normal(rng) * 150.0f, -448.0f, 448.0f)));
  return t;
}

TEST(Requantize, Fp8BlockToInt8WithinHalfAStep) {
  for (int64_t group : {32, 64, 128, 256}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{130, 200}, {16, 512}, {257, 129}}) {
      SCOPED_TRACE(::testing::Message() << "group " << group << " shape " << rows << "x" << cols);
      const Fp8Tensor t = RandomFp8(rows, cols, static_cast<uint32_t>(rows + cols + group));
      const RowSource source =
          Fp8BlockSource(t.codes.data(), reinterpret_cast<const uint8_t*>(t.scale_inv.data()), rows, cols, 128, 128);
      ASSERT_OK_AND_ASSIGN(Int8Matrix m, RequantizeInt8(source, group));
      ExpectInt8RoundTrip(t.Dequantized(), m.view());
    }
  }
}

TEST(Requantize, RelativeErrorShrinksWithTheGroup) {
  // The trade-off behind the group-size choice (docs/fast-path.md): smaller groups follow the weights' local
  // magnitude more closely. Blocks here differ in scale by up to 16×, as FP8 blocks may.
  const Fp8Tensor t = RandomFp8(256, 1024, 7);
  const std::vector<float> exact = t.Dequantized();
  const RowSource source =
      Fp8BlockSource(t.codes.data(), reinterpret_cast<const uint8_t*>(t.scale_inv.data()), t.rows, t.cols, 128, 128);
  double previous = 1.0;
  for (int64_t group : {1024, 256, 128, 64, 32}) {
    ASSERT_OK_AND_ASSIGN(Int8Matrix m, RequantizeInt8(source, group));
    std::vector<float> back(exact.size());
    DequantizeInt8(m.view(), back.data());
    double error = 0, norm = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      error += (back[i] - exact[i]) * (back[i] - exact[i]);
      norm += exact[i] * exact[i];
    }
    const double relative = std::sqrt(error / norm);
    std::printf("group %4lld: relative RMS error %.3g\n", static_cast<long long>(group), relative);
    // A group inside one 128-wide FP8 block sees one block scale; wider groups span blocks of different scale.
    if (group <= 128) {
      EXPECT_LT(relative, 1e-2) << "group " << group;
    }
    EXPECT_LE(relative, previous * 1.01) << "group " << group;
    previous = relative;
  }
}

TEST(Requantize, Fp8NanCodeIsAnErrorNamingThePosition) {
  Fp8Tensor t = RandomFp8(20, 40, 3);
  t.codes[5 * 40 + 9] = 0x7f;  // e4m3 NaN
  const RowSource source =
      Fp8BlockSource(t.codes.data(), reinterpret_cast<const uint8_t*>(t.scale_inv.data()), t.rows, t.cols, 128, 128);
  EXPECT_ERROR_CONTAINS(RequantizeInt8(source, 32), "weight row 5 column 9");
}

// ---- int4 (quant/int4_matrix.h) ----

TEST(Int4Matrix, RoundTripWithinHalfAStepAcrossShapesAndGroups) {
  for (int64_t group : {16, 32, 64, 128}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {15, 17}, {16, 64}, {17, 130}, {48, 300}}) {
      SCOPED_TRACE(::testing::Message() << "group " << group << " shape " << rows << "x" << cols);
      const std::vector<float> w = RandomMatrix(rows, cols, static_cast<uint32_t>(rows * 1000 + cols));
      ASSERT_OK_AND_ASSIGN(Int4Matrix m, QuantizeInt4(w.data(), rows, cols, group));
      const Int4Layout& l = m.layout();
      EXPECT_EQ(l.code_bytes(), l.padded_rows() * l.padded_cols() / 2);
      std::vector<float> back(rows * cols);
      DequantizeInt4(m.view(), back.data());
      for (int64_t r = 0; r < l.padded_rows(); ++r) {
        for (int64_t g = 0; g < l.groups(); ++g) {
          const float scale = m.view().Scale(r, g);
          int max_code = 0;
          for (int64_t c = g * group; c < (g + 1) * group; ++c) {
            const int code = m.view().Code(r, c);
            ASSERT_GE(code, -7);
            ASSERT_LE(code, 7);
            if (r >= rows || c >= cols) {
              ASSERT_EQ(code, 0) << "padding at " << r << ", " << c;
              continue;
            }
            max_code = std::max(max_code, std::abs(code));
            ASSERT_LE(std::fabs(back[r * cols + c] - w[r * cols + c]), 0.5f * scale * (1 + 1e-5f) + 1e-30f)
                << "row " << r << " col " << c;
          }
          if (r >= rows) {
            EXPECT_EQ(scale, 0.0f);
          } else if (scale > 0) {
            EXPECT_EQ(max_code, 7) << "row " << r << " group " << g;
          }
        }
      }
    }
  }
}

TEST(Int4Matrix, PackedLayoutIsTwoFourKStepsPerByte) {
  // Byte (p, lane, j) of a row block: low nibble = code (lane, 8p + j) + 8, high nibble = code (lane, 8p + 4 + j) + 8.
  const int64_t rows = 20, cols = 48;
  Int4Matrix m(Int4Layout{rows, cols, 16});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) SetInt4Code(m.layout(), m.codes(), r, c, static_cast<int>((r + 3 * c) % 16) - 8);
  }
  const uint8_t* codes = m.view().codes;
  const int64_t block_bytes = m.layout().block_code_bytes();
  EXPECT_EQ(block_bytes, 16 * 48 / 2);
  // Row 17 (block 1, lane 1), columns 13 and 9 share byte p = 1, j = 1.
  const uint8_t byte = codes[block_bytes + 1 * 64 + 1 * 4 + 1];
  EXPECT_EQ(byte & 0x0f, (17 + 3 * 9) % 16);
  EXPECT_EQ(byte >> 4, (17 + 3 * 13) % 16);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(m.view().Code(r, c), static_cast<int>((r + 3 * c) % 16) - 8);
  }
  // Padding rows 20..31 hold zero codes (byte 0x88).
  EXPECT_EQ(codes[block_bytes + 5 * 4], kInt4ZeroByte);
}

TEST(Int4Matrix, RefusesNonFiniteWeightsAndBadLayouts) {
  std::vector<float> w(4 * 20, 1.0f);
  w[2 * 20 + 7] = NAN;
  EXPECT_ERROR_CONTAINS(QuantizeInt4(w.data(), 4, 20, 16), "weight row 2 column 7");
  w[2 * 20 + 7] = INFINITY;
  EXPECT_ERROR_CONTAINS(QuantizeInt4(w.data(), 4, 20, 16), "needs finite weights");
  EXPECT_ERROR_CONTAINS(QuantizeInt4(w.data(), 4, 20, 24), "not a positive multiple of 16");
  EXPECT_ERROR_CONTAINS(QuantizeInt4(w.data(), 0, 20, 16), "at least one row");
}

TEST(Requantize, Int4ErrorByGroupOnFp8Blocks) {
  // The int4 group-size trade-off (docs/fast-path.md): relative RMS error of FP8 → int4 per group, beside int8's
  // at group 128. A uniform rounding error of a step amax/7 is amax/(7√12); amax/RMS ≈ 2.5–3.5 → 10–14%.
  const Fp8Tensor t = RandomFp8(256, 1024, 7);
  const std::vector<float> exact = t.Dequantized();
  const RowSource source =
      Fp8BlockSource(t.codes.data(), reinterpret_cast<const uint8_t*>(t.scale_inv.data()), t.rows, t.cols, 128, 128);
  auto relative = [&](const std::vector<float>& back) {
    double error = 0, norm = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      error += (back[i] - exact[i]) * (back[i] - exact[i]);
      norm += exact[i] * exact[i];
    }
    return std::sqrt(error / norm);
  };
  ASSERT_OK_AND_ASSIGN(Int8Matrix int8, RequantizeInt8(source, 128));
  std::vector<float> back(exact.size());
  DequantizeInt8(int8.view(), back.data());
  const double int8_error = relative(back);
  double previous = 1.0;
  for (int64_t group : {128, 64, 32}) {
    ASSERT_OK_AND_ASSIGN(Int4Matrix m, RequantizeInt4(source, group));
    DequantizeInt4(m.view(), back.data());
    const double error = relative(back);
    std::printf("int4 group %3lld: relative RMS error %.4f (%.1fx int8 group 128's %.4f)\n",
                static_cast<long long>(group), error, error / int8_error, int8_error);
    EXPECT_LT(error, 0.16) << "group " << group;
    EXPECT_GT(error, 10 * int8_error) << "group " << group;  // a step 127/7 ≈ 18× coarser
    EXPECT_LE(error, previous * 1.01) << "group " << group;
    previous = error;
  }
}

TEST(Bf16Matrix, PackingIsBitExactAndPadded) {
  const int64_t rows = 19, cols = 37;
  std::vector<uint16_t> bits(rows * cols);
  std::mt19937 rng(1);
  for (auto& b : bits) b = FloatToBf16(std::normal_distribution<float>(0, 3)(rng));
  const RowSource source = Bf16Source(reinterpret_cast<const uint8_t*>(bits.data()), rows, cols);
  ASSERT_OK_AND_ASSIGN(Bf16Matrix m, PackBf16(source));
  EXPECT_EQ(m.layout().padded_rows(), 32);
  EXPECT_EQ(m.layout().padded_cols(), 48);
  for (int64_t r = 0; r < m.layout().padded_rows(); ++r) {
    for (int64_t c = 0; c < m.layout().padded_cols(); ++c) {
      const uint16_t expected = (r < rows && c < cols) ? bits[r * cols + c] : 0;
      ASSERT_EQ(m.view().Bits(r, c), expected) << r << ", " << c;
    }
  }
  // The fp32 path rounds to the same bits.
  std::vector<float> floats(rows * cols);
  for (size_t i = 0; i < bits.size(); ++i) floats[i] = Bf16ToFloat(bits[i]);
  ASSERT_OK_AND_ASSIGN(Bf16Matrix again, PackBf16FromFloat(floats.data(), rows, cols));
  EXPECT_EQ(std::memcmp(again.view().values, m.view().values, m.layout().value_count() * 2), 0);
}

TEST(Requantize, ConcatRowsStacksPartsAndKeepsBf16Bits) {
  std::vector<uint16_t> a(3 * 16), b(20 * 16);
  for (size_t i = 0; i < a.size(); ++i) a[i] = FloatToBf16(static_cast<float>(i));
  for (size_t i = 0; i < b.size(); ++i) b[i] = FloatToBf16(-static_cast<float>(i) - 0.5f);
  ASSERT_OK_AND_ASSIGN(RowSource both, ConcatRows({Bf16Source(reinterpret_cast<const uint8_t*>(a.data()), 3, 16),
                                                   Bf16Source(reinterpret_cast<const uint8_t*>(b.data()), 20, 16)}));
  EXPECT_EQ(both.rows, 23);
  ASSERT_TRUE(both.read_bf16 != nullptr);
  std::vector<float> rows(5 * 16);
  ASSERT_OK(both.read(1, 5, rows.data()));  // rows 1, 2 of a and 0..2 of b
  EXPECT_EQ(rows[0], 16.0f);
  EXPECT_EQ(rows[2 * 16], -0.5f);
  EXPECT_EQ(rows[4 * 16 + 1], Bf16ToFloat(FloatToBf16(-(2 * 16 + 1) - 0.5f)));
  std::vector<float> f32(4 * 8, 1.0f);
  EXPECT_ERROR_CONTAINS(ConcatRows({both, F32Source(reinterpret_cast<const uint8_t*>(f32.data()), 4, 8)}),
                        "equal column counts");
}

}  // namespace
}  // namespace glint
