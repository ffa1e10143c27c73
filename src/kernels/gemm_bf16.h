// bf16-weight × fp32-activation matrix products: y[t, r] = Σ_c W[r, c] · x[t, c] with W exactly the checkpoint's
// bf16 values (quant/bf16_matrix.h) and x unrounded fp32, accumulated in fp32.
//
// For tensors whose outputs make discrete choices (MoE router, DSA indexer) or feed exponentials (KDA gates) the
// extra precision over W8A8 costs little: together they are < 2% of the bytes a decode step reads
// (docs/fast-path.md has the measurement). Levels as in gemm_i8.h; gemm_bf16_scalar.cc is the specification.
#pragma once

#include <cstdint>

#include "kernels/isa.h"
#include "quant/bf16_matrix.h"

namespace glint {

struct Bf16Kernels {
  // y[t, r] for every token and the rows of row blocks [block_begin, block_end) that exist. x: [tokens] rows of
  // w.cols values, stride x_stride (values past cols are never read). y: row stride y_stride.
  void (*gemm)(const Bf16MatrixView& w, const float* x, int64_t x_stride, int64_t tokens, int64_t block_begin,
               int64_t block_end, float* y, int64_t y_stride);
};

const Bf16Kernels& GetBf16Kernels(Isa isa);

namespace internal {
const Bf16Kernels& Bf16KernelsScalar();
const Bf16Kernels& Bf16KernelsAvx2();
const Bf16Kernels& Bf16KernelsAvx512();
}  // namespace internal

}  // namespace glint
