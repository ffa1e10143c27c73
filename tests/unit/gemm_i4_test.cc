// Every int4 kernel level against the scalar specification (kernels/gemm_i4.h): shapes across SIMD and tile
// remainders (rows around 16-row blocks and 4-block tiles, K around groups and the 8-k byte column, tokens around
// the 4- and 6-token tiles), packed codes over the whole nibble range [−8, 7], exact equality of the int32 group
// sums, the fp32 output within its rounding bound, extreme codes (−8 and 7 against ±127), row-block ranges, the
// packed layout itself, and the W4A8 error against the exact product.
#include "kernels/gemm_i4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "quant/int4_matrix.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::FastIsas;
using glint::testing::Random;

// A matrix with uniformly random codes in [−8, 7] (−8 included, which quantization never produces) and random
// positive scales: exercises every nibble value the kernels can meet.
Int4Matrix RandomCodes(int64_t rows, int64_t cols, int64_t group, uint32_t seed) {
  Int4Matrix m(Int4Layout{rows, cols, group});
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(kInt4MinCode, kInt4MaxCode);
  std::uniform_real_distribution<float> scale(0.01f, 0.2f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) SetInt4Code(m.layout(), m.codes(), r, c, code(rng));
  }
  const Int4Layout& layout = m.layout();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < layout.groups(); ++g) {
      m.scales()[((r / 16) * layout.groups() + g) * 16 + r % 16] = scale(rng);
    }
  }
  return m;
}

struct Quantized {
  std::vector<int8_t> codes;
  std::vector<float> scales;
  std::vector<int32_t> corrections;
  QuantizedActivations view;
};

Quantized Quantize(const Int4Layout& layout, const std::vector<float>& x, int64_t tokens, int64_t x_stride) {
  const Int8Kernels& k = GetInt8Kernels(Isa::kScalar);  // the quantizer is int8's, tested in gemm_i8_test
  Quantized q;
  const int64_t padded = layout.padded_cols(), groups = layout.groups();
  q.codes.assign(tokens * padded + 64, 0);
  q.scales.assign(tokens * groups, 0.0f);
  q.corrections.assign(tokens * groups, 0);
  k.quantize(x.data(), x_stride, tokens, layout.cols, layout.group, padded, q.codes.data(), q.scales.data(),
             q.corrections.data());
  q.view = {tokens, layout.cols, padded, layout.group, q.codes.data(), q.scales.data(), q.corrections.data()};
  return q;
}

class Int4Kernel : public ::testing::TestWithParam<Isa> {
 protected:
  const Int4Kernels& fast() const { return GetInt4Kernels(GetParam()); }
  const Int4Kernels& reference() const { return GetInt4Kernels(Isa::kScalar); }

  void Check(const Int4Matrix& w, int64_t tokens, uint32_t seed) {
    const Int4Layout& layout = w.layout();
    SCOPED_TRACE(::testing::Message() << IsaName(GetParam()) << " rows " << layout.rows << " cols " << layout.cols
                                      << " group " << layout.group << " tokens " << tokens);
    const int64_t x_stride = layout.cols + 3;
    std::vector<float> x = Random(tokens * x_stride, seed, 2.0f);
    if (tokens > 1) std::fill_n(x.begin() + x_stride, layout.cols, 0.0f);  // an all-zero token
    const Quantized q = Quantize(layout, x, tokens, x_stride);

    const int64_t blocks = layout.row_blocks(), groups = layout.groups();
    std::vector<int32_t> sums_expected(tokens * blocks * 16 * groups), sums_actual(sums_expected.size(), -7);
    reference().group_sums(w.view(), q.view, 0, blocks, sums_expected.data());
    fast().group_sums(w.view(), q.view, 0, blocks, sums_actual.data());
    ASSERT_EQ(sums_actual, sums_expected) << "int32 group sums differ";

    const int64_t y_stride = layout.rows + 5;
    std::vector<float> y_expected(tokens * y_stride, 0.0f), y_actual(tokens * y_stride, 12345.0f);
    reference().gemm(w.view(), q.view, 0, blocks, y_expected.data(), y_stride);
    fast().gemm(w.view(), q.view, 0, blocks, y_actual.data(), y_stride);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t r = 0; r < y_stride; ++r) {
        const float got = y_actual[t * y_stride + r];
        if (r >= layout.rows) {
          ASSERT_EQ(got, 12345.0f) << "wrote past the rows at token " << t << " column " << r;
          continue;
        }
        // fp32 accumulation over `groups` terms, each one product rounding: a few ulps of Σ|term|.
        double magnitude = 0;
        for (int64_t g = 0; g < groups; ++g) {
          magnitude += std::fabs(static_cast<double>(sums_expected[(t * blocks * 16 + r) * groups + g]) *
                                 w.view().Scale(r, g) * q.scales[t * groups + g]);
        }
        ASSERT_NEAR(got, y_expected[t * y_stride + r], 4e-7 * (groups + 2) * magnitude + 1e-30)
            << "token " << t << " row " << r;
      }
    }
  }
};

TEST_P(Int4Kernel, SweepMatchesScalar) {
  uint32_t seed = 1;
  for (int64_t group : {16, 32, 64, 128}) {
    for (int64_t rows : {1, 15, 16, 17, 48, 64, 67, 100}) {
      for (int64_t cols : {int64_t{8}, int64_t{16}, group, group + 16, 3 * group - 5, int64_t{260}}) {
        for (int64_t tokens : {1, 2, 4, 5, 6, 7, 13}) {
          Check(RandomCodes(rows, cols, group, seed), tokens, seed + 1);
          if (HasFatalFailure()) return;
          ++seed;
        }
      }
    }
  }
}

TEST_P(Int4Kernel, QuantizedWeightsMatchScalar) {
  uint32_t seed = 100;
  for (int64_t group : {32, 64, 128}) {
    for (int64_t rows : {17, 67}) {
      const std::vector<float> weights = Random(rows * 200, seed);
      ASSERT_OK_AND_ASSIGN(Int4Matrix w, QuantizeInt4(weights.data(), rows, 200, group));
      Check(w, 7, seed + 1);
      if (HasFatalFailure()) return;
      seed += 2;
    }
  }
}

TEST_P(Int4Kernel, ExtremeCodesAreExact) {
  // Codes −8 and 7 (nibbles 0 and 15) against activation codes ±127 over a long K: every AVX2 int16 pair sum
  // reaches its bound 2·15·127 = 3810 and the two-step int16 sum 7620; the int32 sums reach 8·127·group.
  const int64_t rows = 35, cols = 2048, group = 128, tokens = 7;
  Int4Matrix w(Int4Layout{rows, cols, group});
  const Int4Layout& layout = w.layout();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int code = r == 0 ? -8 : r == 1 ? 7 : (((r + c) * 7) % 5 < 2 ? -8 : 7);
      SetInt4Code(layout, w.codes(), r, c, code);
    }
  }
  std::fill_n(w.scales(), layout.scale_count(), 0.5f);
  std::vector<float> x(tokens * cols);
  for (int64_t i = 0; i < tokens * cols; ++i) x[i] = ((i * 3) % 7 < 3) ? -0.5f : 0.5f;
  for (int64_t c = 0; c < cols; ++c) x[c] = 0.5f;          // token 0: all +127
  for (int64_t c = 0; c < cols; ++c) x[cols + c] = -0.5f;  // token 1: all −127
  const Quantized q = Quantize(layout, x, tokens, cols);
  for (int64_t i = 0; i < tokens * cols; ++i) ASSERT_EQ(std::abs(q.codes[i]), 127);
  const int64_t blocks = layout.row_blocks(), groups = layout.groups(), row_stride = blocks * 16 * groups;
  std::vector<int32_t> expected(tokens * row_stride), actual(expected.size());
  reference().group_sums(w.view(), q.view, 0, blocks, expected.data());
  fast().group_sums(w.view(), q.view, 0, blocks, actual.data());
  EXPECT_EQ(actual, expected);
  EXPECT_EQ(expected[0], -8 * 127 * group);          // row 0 × token 0
  EXPECT_EQ(expected[groups], 7 * 127 * group);      // row 1 × token 0
  EXPECT_EQ(expected[row_stride], 8 * 127 * group);  // row 0 × token 1
  EXPECT_EQ(expected[row_stride + groups], -7 * 127 * group);
  std::vector<float> y(tokens * rows);
  fast().gemm(w.view(), q.view, 0, blocks, y.data(), rows);
  // Every scale is exact here (0.5 and 0.5/127·127): y = code · 0.5 · 0.5 · cols.
  EXPECT_FLOAT_EQ(y[0], -8 * 0.5f * 0.5f * cols);
  EXPECT_FLOAT_EQ(y[1], 7 * 0.5f * 0.5f * cols);
  EXPECT_FLOAT_EQ(y[rows], 8 * 0.5f * 0.5f * cols);
}

TEST_P(Int4Kernel, RowBlockRangesWriteOnlyTheirRows) {
  const Int4Matrix w = RandomCodes(150, 96, 32, 5);
  const int64_t rows = 150, tokens = 3;
  const std::vector<float> x = Random(tokens * 96, 6);
  const Quantized q = Quantize(w.layout(), x, tokens, 96);
  std::vector<float> whole(tokens * rows), pieces(tokens * rows, NAN);
  fast().gemm(w.view(), q.view, 0, w.layout().row_blocks(), whole.data(), rows);
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 3}, {3, 4}, {4, 9}, {9, 10}}) {
    fast().gemm(w.view(), q.view, begin, end, pieces.data(), rows);
  }
  EXPECT_EQ(pieces, whole);
}

TEST_P(Int4Kernel, NonFiniteActivationsGiveNanOutputs) {
  const Int4Matrix w = RandomCodes(20, 64, 32, 8);
  std::vector<float> x = Random(2 * 64, 9);
  x[40] = NAN;           // token 0, group 1
  x[64 + 3] = INFINITY;  // token 1, group 0
  const Quantized q = Quantize(w.layout(), x, 2, 64);
  std::vector<float> y(2 * 20);
  fast().gemm(w.view(), q.view, 0, w.layout().row_blocks(), y.data(), 20);
  for (float v : y) EXPECT_TRUE(std::isnan(v));
}

// A W4A8 product against the exact fp32 product: with independent weight (e_w) and activation (e_x) rounding errors
// the output's relative RMS error is ≈ sqrt(e_w² + e_x²). For Gaussian weights in groups of 64, amax ≈ 2.4σ and a
// step of amax/7 gives e_w ≈ (2.4/7)/√12 ≈ 10%, 16–18× int8's.
TEST_P(Int4Kernel, ErrorAgainstFp32IsTheFormatsRoundingError) {
  const int64_t rows = 256, cols = 1024, tokens = 16;
  const std::vector<float> weights = Random(rows * cols, 21), x = Random(tokens * cols, 22);
  for (int64_t group : {32, 64, 128}) {
    ASSERT_OK_AND_ASSIGN(Int4Matrix w, QuantizeInt4(weights.data(), rows, cols, group));
    const Quantized q = Quantize(w.layout(), x, tokens, cols);
    std::vector<float> dequantized(rows * cols);
    DequantizeInt4(w.view(), dequantized.data());
    auto relative = [](const std::vector<float>& a, const std::vector<double>& b) {
      double error = 0, norm = 0;
      for (size_t i = 0; i < b.size(); ++i) error += (a[i] - b[i]) * (a[i] - b[i]), norm += b[i] * b[i];
      return std::sqrt(error / norm);
    };
    std::vector<double> exact_w(weights.begin(), weights.end()), exact_x(x.begin(), x.end());
    std::vector<float> x_back(tokens * cols);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t c = 0; c < cols; ++c) {
        x_back[t * cols + c] = q.codes[t * cols + c] * q.scales[t * (cols / group) + c / group];
      }
    }
    const double e_w = relative(dequantized, exact_w), e_x = relative(x_back, exact_x);
    std::vector<double> exact(tokens * rows);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        double sum = 0;
        for (int64_t c = 0; c < cols; ++c) sum += static_cast<double>(weights[r * cols + c]) * x[t * cols + c];
        exact[t * rows + r] = sum;
      }
    }
    std::vector<float> y(tokens * rows);
    fast().gemm(w.view(), q.view, 0, w.layout().row_blocks(), y.data(), rows);
    const double e_y = relative(y, exact), expected = std::sqrt(e_w * e_w + e_x * e_x);
    std::printf("W4A8 group %3lld: weight error %.4f, activation error %.4f, output error %.4f (expected %.4f)\n",
                static_cast<long long>(group), e_w, e_x, e_y, expected);
    EXPECT_LT(e_y, 1.25 * expected);
    EXPECT_GT(e_y, 0.5 * expected);
    EXPECT_LT(e_w, 0.13) << "group " << group;  // the rounding bound above, with margin
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, Int4Kernel, ::testing::ValuesIn(FastIsas()),
                         [](const ::testing::TestParamInfo<Isa>& info) { return std::string(IsaName(info.param)); });

}  // namespace
}  // namespace glint
