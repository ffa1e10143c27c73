// The scalar bf16 kernel: the specification of gemm_bf16.h, accumulated in double.
#include <algorithm>

#include "kernels/gemm_bf16.h"
#include "quant/formats.h"

namespace glint {
namespace internal {
namespace {

void GemmScalar(const Bf16MatrixView& w, const float* x, int64_t x_stride, int64_t tokens, int64_t block_begin,
                int64_t block_end, float* y, int64_t y_stride) {
  const int64_t row_end = std::min(w.layout.rows, block_end * kBf16RowBlock);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t r = block_begin * kBf16RowBlock; r < row_end; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < w.layout.cols; ++c)
        sum += static_cast<double>(Bf16ToFloat(w.Bits(r, c))) * x[t * x_stride + c];
      y[t * y_stride + r] = static_cast<float>(sum);
    }
  }
}

}  // namespace

const Bf16Kernels& Bf16KernelsScalar() {
  static const Bf16Kernels kernels{GemmScalar};
  return kernels;
}

}  // namespace internal

const Bf16Kernels& GetBf16Kernels(Isa isa) {
  GLINT_CHECK(IsaSupported(isa)) << "bf16 kernels for " << IsaName(isa) << " requested on a CPU without it";
  switch (isa) {
    case Isa::kAmx:  // bf16 products stay on AVX-512 at the AMX level (docs/fast-path.md, "AMX": < 2% of the work)
    case Isa::kAvx512:
      return internal::Bf16KernelsAvx512();
    case Isa::kAvx2:
      return internal::Bf16KernelsAvx2();
    case Isa::kScalar:
      break;
  }
  return internal::Bf16KernelsScalar();
}

}  // namespace glint
