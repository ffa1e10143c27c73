// W4A8 matrix products: int4 weights (quant/int4_matrix.h, a scale per output row and K-group) times int8
// activations quantized per token and K-group exactly as for the int8 kernels (gemm_i8.h: the same quantizer,
// QuantizedActivations and bias correction), accumulated exactly in int32 within each group, combined in fp32:
//
//   y[t, r] = Σ_g  s_w[r, g] · s_x[t, g] · Σ_{c ∈ g} w[r, c] · x[t, c]          (the inner sum is exact int32)
//
// The nibbles are unpacked to bytes in registers (`& 0x0f`, `>> 4 & 0x0f`) and fed to the same inner product as
// the int8 weights: vpdpbusd on AVX-512 VNNI (gemm_tile_avx512.h), vpmaddubsw on AVX2 (gemm_tile_avx2.h), where
// unsigned nibbles ≤ 15 times codes ≤ 127 keep every int16 pair sum ≤ 3810 (no saturation, no sign trick). The
// tiles, the token/row-block walk and the epilogue are the int8 kernels'; only the inner step and the bias
// correction (8·Σx = int8 correction / 16) differ. gemm_i4_scalar.cc is the specification.
#pragma once

#include <cstdint>

#include "kernels/gemm_i8.h"
#include "kernels/isa.h"
#include "quant/int4_matrix.h"

namespace glint {

struct Int4Kernels {
  // y[t, r] for every token and the rows of row blocks [block_begin, block_end) that exist (r < rows); y has row
  // stride y_stride (≥ rows). Other rows of y are not touched. x must be quantized for w.layout's grouping
  // (Int4Layout::ActivationGrouping).
  void (*gemm)(const Int4MatrixView& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end, float* y,
               int64_t y_stride);
  // The exact int32 group sums Σ_{c ∈ g} w[r, c] · x[t, c] for row blocks [block_begin, block_end):
  // sums [tokens, (block_end − block_begin) · 16, groups]. For tests.
  void (*group_sums)(const Int4MatrixView& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end,
                     int32_t* sums);
};

const Int4Kernels& GetInt4Kernels(Isa isa);  // the level must be supported (IsaSupported)

namespace internal {
const Int4Kernels& Int4KernelsScalar();
const Int4Kernels& Int4KernelsAvx2();
const Int4Kernels& Int4KernelsAvx512();
}  // namespace internal

}  // namespace glint
