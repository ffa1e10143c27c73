// Every int8 kernel level against the scalar specification (kernels/gemm_i8.h): shapes across SIMD and tile
// remainders (rows around 16-row blocks and 4-block tiles, K around groups, tokens around the 6-token tile),
// exact equality of quantized activations and int32 group sums, the fp32 output within its rounding bound,
// saturation edges (codes ±127 everywhere), non-finite activations, and row-block ranges that leave other rows
// untouched; the AVX-512 level's two walks against each other bit for bit.
#include "kernels/gemm_i8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "base/worker_pool.h"
#include "kernel_test_util.h"
#include "kernels/gemm_tile_avx512.h"
#include "kernels/linear.h"
#include "quant/int8_matrix.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::FastIsas;
using glint::testing::QuantizedRows;
using glint::testing::QuantizeRows;
using glint::testing::Random;

class Int8Kernel : public ::testing::TestWithParam<Isa> {
 protected:
  const Int8Kernels& fast() const { return GetInt8Kernels(GetParam()); }
  const Int8Kernels& reference() const { return GetInt8Kernels(Isa::kScalar); }

  // Compares every output of the level with the scalar specification for one shape.
  void Check(int64_t rows, int64_t cols, int64_t group, int64_t tokens, uint32_t seed) {
    SCOPED_TRACE(::testing::Message() << IsaName(GetParam()) << " rows " << rows << " cols " << cols << " group "
                                      << group << " tokens " << tokens);
    const std::vector<float> weights = Random(rows * cols, seed);
    ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(weights.data(), rows, cols, group));
    const int64_t x_stride = cols + 3;  // rows of x need not be packed
    std::vector<float> x = Random(tokens * x_stride, seed + 1, 2.0f);
    if (tokens > 1) std::fill_n(x.begin() + x_stride, cols, 0.0f);  // an all-zero token
    const QuantizedRows expected = QuantizeRows(reference(), w.layout(), x, tokens, x_stride);
    const QuantizedRows actual = QuantizeRows(fast(), w.layout(), x, tokens, x_stride);
    ASSERT_EQ(actual.codes, expected.codes);
    ASSERT_EQ(actual.scales, expected.scales);
    ASSERT_EQ(actual.corrections, expected.corrections);

    const int64_t blocks = w.layout().row_blocks(), groups = w.layout().groups();
    std::vector<int32_t> sums_expected(tokens * blocks * 16 * groups), sums_actual(sums_expected.size(), -7);
    reference().group_sums(w.view(), expected.view, 0, blocks, sums_expected.data());
    fast().group_sums(w.view(), expected.view, 0, blocks, sums_actual.data());
    ASSERT_EQ(sums_actual, sums_expected) << "int32 group sums differ";

    const int64_t y_stride = rows + 5;
    std::vector<float> y_expected(tokens * y_stride, 0.0f), y_actual(tokens * y_stride, 12345.0f);
    reference().gemm(w.view(), expected.view, 0, blocks, y_expected.data(), y_stride);
    fast().gemm(w.view(), expected.view, 0, blocks, y_actual.data(), y_stride);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t r = 0; r < y_stride; ++r) {
        const float got = y_actual[t * y_stride + r];
        if (r >= rows) {
          ASSERT_EQ(got, 12345.0f) << "wrote past the rows at token " << t << " column " << r;
          continue;
        }
        // fp32 accumulation over `groups` terms, each one product rounding: a few ulps of Σ|term|.
        double magnitude = 0;
        for (int64_t g = 0; g < groups; ++g) {
          magnitude += std::fabs(static_cast<double>(sums_expected[(t * blocks * 16 + r) * groups + g]) *
                                 w.view().Scale(r, g) * expected.scales[t * groups + g]);
        }
        ASSERT_NEAR(got, y_expected[t * y_stride + r], 4e-7 * (groups + 2) * magnitude + 1e-30)
            << "token " << t << " row " << r;
      }
    }
  }
};

TEST_P(Int8Kernel, SweepMatchesScalar) {
  uint32_t seed = 1;
  for (int64_t group : {16, 32, 64, 128}) {
    for (int64_t rows : {1, 15, 16, 17, 48, 64, 67, 100}) {
      for (int64_t cols : {int64_t{16}, group, group + 16, 3 * group - 5, int64_t{260}}) {
        for (int64_t tokens : {1, 2, 4, 5, 6, 7, 13, 16}) {
          Check(rows, cols, group, tokens, seed++);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST_P(Int8Kernel, SaturationEdgesAreExact) {
  // Every weight and activation code at ±127 over a long K: each group sum reaches ±127²·group, and the AVX2
  // int16 pair sums reach 2·127² (no saturation). Signs follow a pattern so sums are not trivially equal.
  const int64_t rows = 35, cols = 2048, group = 128, tokens = 7;
  std::vector<float> weights(rows * cols), x(tokens * cols);
  for (int64_t i = 0; i < rows * cols; ++i) weights[i] = ((i * 7) % 5 < 2) ? -3.0f : 3.0f;
  for (int64_t i = 0; i < tokens * cols; ++i) x[i] = ((i * 3) % 7 < 3) ? -0.5f : 0.5f;
  for (int64_t c = 0; c < cols; ++c) x[c] = 0.5f;          // token 0: all positive
  for (int64_t c = 0; c < cols; ++c) x[cols + c] = -0.5f;  // token 1: all negative
  for (int64_t c = 0; c < cols; ++c) weights[c] = 3.0f;    // row 0: all positive
  ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(weights.data(), rows, cols, group));
  const QuantizedRows q = QuantizeRows(reference(), w.layout(), x, tokens, cols);
  for (int8_t code : q.codes) ASSERT_EQ(std::abs(code), 127);
  const int64_t blocks = w.layout().row_blocks(), groups = w.layout().groups();
  std::vector<int32_t> expected(tokens * blocks * 16 * groups), actual(expected.size());
  reference().group_sums(w.view(), q.view, 0, blocks, expected.data());
  fast().group_sums(w.view(), q.view, 0, blocks, actual.data());
  EXPECT_EQ(actual, expected);
  EXPECT_EQ(expected[0], 127 * 127 * group);                      // row 0 × token 0
  EXPECT_EQ(expected[blocks * 16 * groups], -127 * 127 * group);  // row 0 × token 1
  std::vector<float> y(tokens * rows);
  fast().gemm(w.view(), q.view, 0, blocks, y.data(), rows);
  EXPECT_FLOAT_EQ(y[0], 3.0f * 0.5f * cols);
  EXPECT_FLOAT_EQ(y[rows], -3.0f * 0.5f * cols);
}

TEST_P(Int8Kernel, RowBlockRangesWriteOnlyTheirRows) {
  const int64_t rows = 150, cols = 96, group = 32, tokens = 3;
  const std::vector<float> weights = Random(rows * cols, 5);
  ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(weights.data(), rows, cols, group));
  const std::vector<float> x = Random(tokens * cols, 6);
  const QuantizedRows q = QuantizeRows(fast(), w.layout(), x, tokens, cols);
  std::vector<float> whole(tokens * rows), pieces(tokens * rows, NAN);
  fast().gemm(w.view(), q.view, 0, w.layout().row_blocks(), whole.data(), rows);
  // Uneven ranges exercise the 4-, 2- and 1-block tiles; together they cover every block exactly once.
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 3}, {3, 4}, {4, 9}, {9, 10}}) {
    fast().gemm(w.view(), q.view, begin, end, pieces.data(), rows);
  }
  EXPECT_EQ(pieces, whole);
}

TEST_P(Int8Kernel, NonFiniteActivationsGiveNanOutputs) {
  const int64_t rows = 20, cols = 64, group = 32, tokens = 2;
  const std::vector<float> weights = Random(rows * cols, 8);
  ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(weights.data(), rows, cols, group));
  std::vector<float> x = Random(tokens * cols, 9);
  x[40] = NAN;             // token 0, group 1
  x[cols + 3] = INFINITY;  // token 1, group 0
  const QuantizedRows expected = QuantizeRows(reference(), w.layout(), x, tokens, cols);
  const QuantizedRows actual = QuantizeRows(fast(), w.layout(), x, tokens, cols);
  EXPECT_EQ(actual.codes, expected.codes);
  EXPECT_TRUE(std::isnan(actual.scales[1]) && std::isnan(actual.scales[2]));
  EXPECT_FALSE(std::isnan(actual.scales[0]) || std::isnan(actual.scales[3]));
  std::vector<float> y(tokens * rows);
  fast().gemm(w.view(), actual.view, 0, w.layout().row_blocks(), y.data(), rows);
  for (float v : y) EXPECT_TRUE(std::isnan(v));
}

// Quality gate (a) at the kernel level: a W8A8 product against the exact fp32 product. With independent rounding
// errors of relative RMS e_w (weights, measured by dequantizing) and e_x (activations, likewise), the output's
// relative RMS error is ≈ sqrt(e_w² + e_x²); bound 1.25× that. On Gaussian data with group 128 both are ≈ 0.6%.
TEST_P(Int8Kernel, ErrorAgainstFp32IsTheFormatsRoundingError) {
  const int64_t rows = 256, cols = 1024, tokens = 16, group = 128;
  const std::vector<float> weights = Random(rows * cols, 21), x = Random(tokens * cols, 22);
  ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(weights.data(), rows, cols, group));
  const QuantizedRows q = QuantizeRows(fast(), w.layout(), x, tokens, cols);
  std::vector<float> dequantized(rows * cols);
  DequantizeInt8(w.view(), dequantized.data());
  auto relative = [](const std::vector<float>& a, const std::vector<double>& b) {
    double error = 0, norm = 0;
    for (size_t i = 0; i < b.size(); ++i) error += (a[i] - b[i]) * (a[i] - b[i]), norm += b[i] * b[i];
    return std::sqrt(error / norm);
  };
  std::vector<double> exact_w(weights.begin(), weights.end()), exact_x(x.begin(), x.end());
  std::vector<float> x_back(tokens * cols);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < cols; ++c)
      x_back[t * cols + c] = q.codes[t * cols + c] * q.scales[t * (cols / group) + c / group];
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
  std::printf("W8A8: weight error %.4f, activation error %.4f, output error %.4f (expected %.4f)\n", e_w, e_x, e_y,
              expected);
  EXPECT_LT(e_y, 1.25 * expected);
  EXPECT_GT(e_y, 0.5 * expected);  // the product really is quantized
}

// Quantizing over a pool by token ranges writes exactly what one call writes: every row's codes, scales and
// corrections, for counts below the split threshold, at it and past it with a ragged last range.
TEST_P(Int8Kernel, ParallelQuantizationEqualsOneCall) {
  const int64_t cols = 300, group = 128, x_stride = cols + 7;
  ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(Random(16 * cols, 31).data(), 16, cols, group));
  WorkerPool pool(3);
  for (int64_t tokens : {int64_t{1}, 2 * kMinQuantizeTokens - 1, 2 * kMinQuantizeTokens, int64_t{101}}) {
    SCOPED_TRACE(::testing::Message() << IsaName(GetParam()) << " tokens " << tokens);
    const std::vector<float> x = Random(tokens * x_stride, 32, 3.0f);
    const QuantizedRows expected = QuantizeRows(fast(), w.layout(), x, tokens, x_stride);
    ActivationScratch scratch;
    const QuantizedActivations q =
        QuantizeActivationsParallel(pool, fast(), w.layout(), x.data(), x_stride, tokens, scratch);
    const int64_t padded = w.layout().padded_cols(), groups = w.layout().groups();
    ASSERT_EQ(q.tokens, tokens);
    ASSERT_EQ(q.padded_cols, padded);
    EXPECT_EQ(std::vector<int8_t>(q.codes, q.codes + tokens * padded), expected.codes);
    EXPECT_EQ(std::vector<float>(q.scales, q.scales + tokens * groups), expected.scales);
    EXPECT_EQ(std::vector<int32_t>(q.bias_correction, q.bias_correction + tokens * groups), expected.corrections);
  }
}

// Each row's codes, scales and corrections depend on that row alone, whatever the other rows hold (a non-finite row,
// a zero row, large values): the MoE quantizes its input's rows once and gathers them per expert (fast_moe.cc), which
// gives the bits of quantizing each expert's rows by themselves only because of this.
TEST_P(Int8Kernel, EachRowQuantizesAsItWouldAlone) {
  const int64_t cols = 300, group = 128, tokens = 37, x_stride = cols + 5;
  ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(Random(16 * cols, 41).data(), 16, cols, group));
  std::vector<float> x = Random(tokens * x_stride, 42, 3.0f);
  x[5 * x_stride + 17] = std::nanf("");
  for (int64_t c = 0; c < cols; ++c) x[9 * x_stride + c] = 0.0f, x[20 * x_stride + c] *= 1e30f;
  const int64_t padded = w.layout().padded_cols(), groups = w.layout().groups();
  ActivationScratch all_scratch, row_scratch;
  const QuantizedActivations all = QuantizeActivations(fast(), w.layout(), x.data(), x_stride, tokens, all_scratch);
  for (int64_t t = 0; t < tokens; ++t) {
    SCOPED_TRACE(::testing::Message() << IsaName(GetParam()) << " row " << t);
    const QuantizedActivations one =
        QuantizeActivations(fast(), w.layout(), x.data() + t * x_stride, x_stride, 1, row_scratch);
    EXPECT_EQ(0, std::memcmp(one.codes, all.codes + t * padded, static_cast<size_t>(padded)));
    EXPECT_EQ(0, std::memcmp(one.scales, all.scales + t * groups, groups * sizeof(float)));  // NaN scales too
    EXPECT_EQ(0, std::memcmp(one.bias_correction, all.bias_correction + t * groups, groups * sizeof(int32_t)));
  }
}

// A token's outputs are the same bits whether it is multiplied alone (one-token tiles) or with others (the lead tile
// and the multi-token tiles of ForEachTile): the walk may choose any tiling, and batched decode relies on a
// sequence's logits not depending on its neighbours. Rows 67 and 100 end in a partial row block (the epilogue's
// masked stores); y_stride leaves a gap that must stay untouched.
TEST_P(Int8Kernel, ATokensOutputsDoNotDependOnItsTile) {
  for (const int64_t rows : {67, 100, 256}) {
    const int64_t cols = 384, group = 128, tokens = 16, y_stride = rows + 5;
    SCOPED_TRACE(::testing::Message() << IsaName(GetParam()) << " rows " << rows);
    ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(Random(rows * cols, 31).data(), rows, cols, group));
    const QuantizedRows q = QuantizeRows(fast(), w.layout(), Random(tokens * cols, 32), tokens, cols);
    const int64_t blocks = w.layout().row_blocks();
    std::vector<float> together(tokens * y_stride, -1.0f), alone(tokens * y_stride, -1.0f);
    fast().gemm(w.view(), q.view, 0, blocks, together.data(), y_stride);
    for (int64_t t = 0; t < tokens; ++t) {
      QuantizedActivations one = q.view;
      one.tokens = 1;
      one.codes += t * one.padded_cols;
      one.scales += t * one.groups();
      one.bias_correction += t * one.groups();
      fast().gemm(w.view(), one, 0, blocks, alone.data() + t * y_stride, y_stride);
    }
    for (size_t i = 0; i < together.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(together[i]), std::bit_cast<uint32_t>(alone[i]))
          << "token " << i / y_stride << " row " << i % y_stride;
    }
  }
}

// The AVX-512 walker's token tiles (gemm_tile_avx512.h): they cover the tokens once in order, each of 1 to 6 tokens;
// from kLeadTileMinTokens tokens the first is a single token (it streams the row group from memory) and the others
// are as even as possible; below it, one tile of up to 6 and then the rest.
TEST(Int8TileWalk, OneTokenLeadThenEvenTiles) {
  using internal::avx512_tiles::kLeadTileMinTokens;
  using internal::avx512_tiles::kMaxTileTokens;
  using internal::avx512_tiles::TileTokens;
  for (int64_t tokens = 1; tokens <= 40; ++tokens) {
    SCOPED_TRACE(::testing::Message() << "tokens " << tokens);
    std::vector<int> tiles;
    for (int64_t t = 0; t < tokens; t += tiles.back()) tiles.push_back(TileTokens(tokens, t));
    int64_t covered = 0;
    for (int n : tiles) {
      EXPECT_GE(n, 1);
      EXPECT_LE(n, kMaxTileTokens);
      covered += n;
    }
    EXPECT_EQ(covered, tokens);
    EXPECT_EQ(tiles.front() == 1 && tokens > 1, tokens >= kLeadTileMinTokens);
    const size_t first_even = tokens >= kLeadTileMinTokens ? 1 : 0;
    if (tiles.size() > first_even) {
      const auto [low, high] = std::minmax_element(tiles.begin() + first_even, tiles.end());
      EXPECT_LE(*high - *low, 1);
    }
  }
  EXPECT_EQ(TileTokens(16, 0), 1);  // batched decode: 1, 5, 5, 5
  EXPECT_EQ(TileTokens(16, 1), 5);
}

// The AVX-512 lane walk (gemm_i8_avx512.cc) against the tile walk and the scalar specification: the same int32
// group sums exactly and the same output bits for every token — whole lane tiles (16, 96), a partial one (12, 15),
// tails left to the tile walk (17, 27, 28, 31, 33, 97, 130), all tail (1, 5: the function takes any count) — over rows
// ending in a partial row block, row groups cut short by uneven block ranges, K from a part of one 16-step transpose
// chunk (16) to 33½ chunks (2,144), and group widths 16 to 128.
TEST(Int8Lanes, MatchTheTileWalkBitForBit) {
  if (!IsaSupported(Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  const Int8Kernels& tiles = internal::Int8KernelsAvx512Tiles();
  const Int8Kernels& scalar = GetInt8Kernels(Isa::kScalar);
  uint32_t seed = 100;
  struct Shape {
    int64_t rows, cols, group;
  };
  for (const Shape shape : {Shape{1, 16, 16}, Shape{17, 260, 64}, Shape{67, 384, 128}, Shape{100, 2048 + 96, 32},
                            Shape{256 + 3, 512, 128}}) {
    for (const int64_t tokens : {1, 5, 12, 15, 16, 17, 27, 28, 31, 33, 96, 97, 130}) {
      SCOPED_TRACE(::testing::Message() << "rows " << shape.rows << " cols " << shape.cols << " group " << shape.group
                                        << " tokens " << tokens);
      ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(Random(shape.rows * shape.cols, seed).data(), shape.rows,
                                                      shape.cols, shape.group));
      std::vector<float> x = Random(tokens * shape.cols, seed + 1, 2.0f);
      if (tokens > 2) std::fill_n(x.begin() + 2 * shape.cols, shape.cols, 0.0f);  // an all-zero token
      seed += 2;
      const QuantizedRows q = QuantizeRows(tiles, w.layout(), x, tokens, shape.cols);
      const int64_t blocks = w.layout().row_blocks(), groups = w.layout().groups();

      std::vector<int32_t> sums_expected(tokens * blocks * 16 * groups), sums_actual(sums_expected.size(), -7);
      scalar.group_sums(w.view(), q.view, 0, blocks, sums_expected.data());
      internal::Int8GroupSumsLanesAvx512(w.view(), q.view, 0, blocks, sums_actual.data());
      ASSERT_EQ(sums_actual, sums_expected) << "int32 group sums differ";

      const int64_t y_stride = shape.rows + 5;
      std::vector<float> expected(tokens * y_stride, -1.0f), actual(tokens * y_stride, -1.0f);
      tiles.gemm(w.view(), q.view, 0, blocks, expected.data(), y_stride);
      // In uneven block ranges: row groups of 4 cut short, and ranges that start mid-matrix.
      for (int64_t begin = 0; begin < blocks; begin += 5) {
        internal::Int8GemmLanesAvx512(w.view(), q.view, begin, std::min(blocks, begin + 5), actual.data(), y_stride);
      }
      for (size_t i = 0; i < expected.size(); ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(actual[i]), std::bit_cast<uint32_t>(expected[i]))
            << "token " << i / y_stride << " row " << i % y_stride;  // the gap past the rows stays −1 in both
      }
    }
  }
}

// The level's table hands kLanesMinTokens–kLanesMaxTokens tokens to the lane walk and the rest to the tiles; at the
// range's ends both give the tile walk's bits, so whichever walk runs, a sequence's logits do not depend on how many
// others share the batch.
TEST(Int8Lanes, TheLevelGivesTheTileWalksBitsAtTheRangesEnds) {
  if (!IsaSupported(Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  const int64_t rows = 40, cols = 256, group = 128;
  ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(Random(rows * cols, 41).data(), rows, cols, group));
  for (const int64_t tokens : {internal::kLanesMinTokens - 1, internal::kLanesMinTokens, internal::kLanesMaxTokens,
                               internal::kLanesMaxTokens + 1}) {
    SCOPED_TRACE(::testing::Message() << "tokens " << tokens);
    const QuantizedRows q =
        QuantizeRows(GetInt8Kernels(Isa::kAvx512), w.layout(), Random(tokens * cols, 42), tokens, cols);
    std::vector<float> level(tokens * rows), tile_walk(tokens * rows);
    GetInt8Kernels(Isa::kAvx512).gemm(w.view(), q.view, 0, w.layout().row_blocks(), level.data(), rows);
    internal::Int8KernelsAvx512Tiles().gemm(w.view(), q.view, 0, w.layout().row_blocks(), tile_walk.data(), rows);
    EXPECT_EQ(0, std::memcmp(level.data(), tile_walk.data(), level.size() * sizeof(float)));
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, Int8Kernel, ::testing::ValuesIn(FastIsas()),
                         [](const ::testing::TestParamInfo<Isa>& info) { return std::string(IsaName(info.param)); });

}  // namespace
}  // namespace glint
