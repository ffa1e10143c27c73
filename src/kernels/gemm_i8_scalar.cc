// The scalar int8 kernels: the specification of gemm_i8.h, written for clarity. The products are the shared scalar
// specification (gemm_tile_scalar.h): exact int32 group sums, combined in double.
#include <algorithm>
#include <cmath>

#include "kernels/gemm_i8.h"
#include "kernels/gemm_tile_scalar.h"

namespace glint::internal {
namespace {

void QuantizeScalar(const float* x, int64_t x_stride, int64_t tokens, int64_t cols, int64_t group, int64_t padded_cols,
                    int8_t* codes, float* scales, int32_t* bias_correction) {
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

}  // namespace

const Int8Kernels& Int8KernelsScalar() {
  static const Int8Kernels kernels{QuantizeScalar, scalar_tiles::Gemm<Int8MatrixView>,
                                   scalar_tiles::GroupSums<Int8MatrixView>};
  return kernels;
}

}  // namespace glint::internal
