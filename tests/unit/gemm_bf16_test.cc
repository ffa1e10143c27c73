// The bf16 kernel levels against the scalar specification (kernels/gemm_bf16.h): shapes across 16-row blocks, the
// 4-block and 4-token tiles and odd K; fp32 accumulation within its rounding bound; activations past K are never
// read (NaN there must not leak); row-block ranges write only their rows.
#include "kernels/gemm_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernel_test_util.h"
#include "quant/formats.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::FastIsas;

class Bf16Kernel : public ::testing::TestWithParam<Isa> {};

TEST_P(Bf16Kernel, SweepMatchesScalar) {
  const Bf16Kernels& fast = GetBf16Kernels(GetParam());
  const Bf16Kernels& reference = GetBf16Kernels(Isa::kScalar);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (int64_t rows : {1, 15, 16, 17, 40, 64, 70}) {
    for (int64_t cols : {1, 2, 15, 16, 33, 128, 131}) {
      for (int64_t tokens : {1, 3, 4, 5, 9}) {
        SCOPED_TRACE(::testing::Message() << "rows " << rows << " cols " << cols << " tokens " << tokens);
        std::vector<float> w(rows * cols);
        for (float& v : w) v = normal(rng);
        ASSERT_OK_AND_ASSIGN(Bf16Matrix m, PackBf16FromFloat(w.data(), rows, cols));
        const int64_t x_stride = cols + 1;
        std::vector<float> x(tokens * x_stride);
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t c = 0; c < cols; ++c) x[t * x_stride + c] = normal(rng);
          x[t * x_stride + cols] = NAN;  // past K: must never be read
        }
        const int64_t y_stride = rows + 2;
        std::vector<float> expected(tokens * y_stride, 0.0f), actual(tokens * y_stride, -1.0f);
        reference.gemm(m.view(), x.data(), x_stride, tokens, 0, m.layout().row_blocks(), expected.data(), y_stride);
        fast.gemm(m.view(), x.data(), x_stride, tokens, 0, m.layout().row_blocks(), actual.data(), y_stride);
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t r = 0; r < y_stride; ++r) {
            if (r >= rows) {
              ASSERT_EQ(actual[t * y_stride + r], -1.0f) << "wrote past the rows";
              continue;
            }
            // fp32 accumulation of K products: |error| ≤ K · 2^-24 · Σ|w·x| (a loose, always-valid bound).
            double magnitude = 0;
            for (int64_t c = 0; c < cols; ++c) {
              magnitude += std::fabs(Bf16ToFloat(m.view().Bits(r, c)) * x[t * x_stride + c]);
            }
            ASSERT_NEAR(actual[t * y_stride + r], expected[t * y_stride + r], (cols + 1) * 6e-8 * magnitude + 1e-30)
                << "token " << t << " row " << r;
          }
        }
      }
    }
  }
}

TEST_P(Bf16Kernel, RowBlockRangesWriteOnlyTheirRows) {
  const Bf16Kernels& fast = GetBf16Kernels(GetParam());
  const int64_t rows = 120, cols = 48, tokens = 6;
  std::vector<float> w(rows * cols), x(tokens * cols);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * i);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * i);
  ASSERT_OK_AND_ASSIGN(Bf16Matrix m, PackBf16FromFloat(w.data(), rows, cols));
  std::vector<float> whole(tokens * rows), pieces(tokens * rows, NAN);
  fast.gemm(m.view(), x.data(), cols, tokens, 0, m.layout().row_blocks(), whole.data(), rows);
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 1}, {1, 6}, {6, 8}}) {
    fast.gemm(m.view(), x.data(), cols, tokens, begin, end, pieces.data(), rows);
  }
  EXPECT_EQ(pieces, whole);
}

INSTANTIATE_TEST_SUITE_P(Levels, Bf16Kernel, ::testing::ValuesIn(FastIsas()),
                         [](const ::testing::TestParamInfo<Isa>& info) { return std::string(IsaName(info.param)); });

}  // namespace
}  // namespace glint
