// The scalar specification of the integer-weight products, shared by the int8 (gemm_i8_scalar.cc) and int4
// (gemm_i4_scalar.cc) references: group sums are exact int32 from the unbiased codes (View::Code), the
// cross-group combination is accumulated in double, so the fast levels are compared against a result whose only
// rounding is the final one to fp32.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/gemm_i8.h"

namespace glint::internal::scalar_tiles {

template <typename View>
int32_t GroupSum(const View& w, const QuantizedActivations& x, int64_t t, int64_t r, int64_t g) {
  int32_t sum = 0;
  const int8_t* codes = x.codes + t * x.padded_cols;
  for (int64_t c = g * x.group; c < (g + 1) * x.group; ++c) sum += w.Code(r, c) * codes[c];
  return sum;
}

template <typename View>
void Gemm(const View& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end, float* y,
          int64_t y_stride) {
  const int64_t groups = x.groups();
  const int64_t row_end = std::min(w.layout.rows, block_end * kInt8RowBlock);
  for (int64_t t = 0; t < x.tokens; ++t) {
    for (int64_t r = block_begin * kInt8RowBlock; r < row_end; ++r) {
      double total = 0;
      for (int64_t g = 0; g < groups; ++g) {
        total += static_cast<double>(GroupSum(w, x, t, r, g)) * w.Scale(r, g) * x.scales[t * groups + g];
      }
      y[t * y_stride + r] = static_cast<float>(total);
    }
  }
}

template <typename View>
void GroupSums(const View& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end, int32_t* sums) {
  const int64_t groups = x.groups(), rows = (block_end - block_begin) * kInt8RowBlock;
  for (int64_t t = 0; t < x.tokens; ++t) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t g = 0; g < groups; ++g) {
        sums[(t * rows + i) * groups + g] = GroupSum(w, x, t, block_begin * kInt8RowBlock + i, g);
      }
    }
  }
}

}  // namespace glint::internal::scalar_tiles
