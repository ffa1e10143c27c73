// The scalar int8 kernels: the specification of gemm_i8.h, written for clarity. Group sums are exact int32;
// the cross-group combination is accumulated in double, so the fast levels are compared against a result whose
// only rounding is the final one to fp32.
#include <algorithm>
#include <cmath>

#include "kernels/gemm_i8.h"

namespace glint::internal {
namespace {

void QuantizeScalar(const float* x, int64_t x_stride, int64_t tokens, int64_t cols, int64_t group,
                    int64_t padded_cols, int8_t* codes, float* scales, int32_t* bias_correction) {
  const int64_t groups = padded_cols / group;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = x + t * x_stride;
    int8_t* out = codes + t * padded_cols;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * group, end = std::min(cols, begin + group);
      float amax = 0.0f;
      bool finite = true;
      for (int64_t c = begin; c < end; ++c) {
        finite = finite && std::isfinite(row[c]);
        amax = std::max(amax, std::fabs(row[c]));
      }
      if (!finite) {  // int8 cannot carry it: the group's scale is NaN, so every output it touches is NaN
        std::fill(out + begin, out + begin + group, int8_t{0});
        scales[t * groups + g] = std::nanf("");
        bias_correction[t * groups + g] = 0;
        continue;
      }
      const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      for (int64_t c = begin; c < begin + group; ++c) {
        int code = 0;
        if (c < end) code = static_cast<int>(std::clamp(std::nearbyint(row[c] * inverse), -127.0f, 127.0f));
        out[c] = static_cast<int8_t>(code);
        sum += code;
      }
      scales[t * groups + g] = amax / 127.0f;
      bias_correction[t * groups + g] = 128 * sum;
    }
  }
}

int32_t GroupSum(const Int8MatrixView& w, const QuantizedActivations& x, int64_t t, int64_t r, int64_t g) {
  int32_t sum = 0;
  const int8_t* codes = x.codes + t * x.padded_cols;
  for (int64_t c = g * x.group; c < (g + 1) * x.group; ++c) sum += w.Code(r, c) * codes[c];
  return sum;
}

void GemmScalar(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end,
                float* y, int64_t y_stride) {
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

void GroupSumsScalar(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end,
                     int32_t* sums) {
  const int64_t groups = x.groups(), rows = (block_end - block_begin) * kInt8RowBlock;
  for (int64_t t = 0; t < x.tokens; ++t) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t g = 0; g < groups; ++g) {
        sums[(t * rows + i) * groups + g] = GroupSum(w, x, t, block_begin * kInt8RowBlock + i, g);
      }
    }
  }
}

}  // namespace

const Int8Kernels& Int8KernelsScalar() {
  static const Int8Kernels kernels{QuantizeScalar, GemmScalar, GroupSumsScalar};
  return kernels;
}

}  // namespace glint::internal
