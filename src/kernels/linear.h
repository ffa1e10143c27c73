// Linear layers on the worker pool: y [tokens, rows] = W x for packed int8 (W8A8) or bf16 weights.
//
// The output rows are split into ranges of row blocks, one task each; every task streams its own weights, so a
// decode step (one or a few tokens) reads each weight byte once, spread over the threads, and a prefill tile
// reuses each weight block from cache across all tokens. Activations are quantized once, before the split (by token
// ranges over the pool when there are many).
#pragma once

#include <cstdint>

#include "base/worker_pool.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_i4.h"
#include "kernels/gemm_i8.h"

namespace glint {

// Quantizes x [tokens, w.cols] (row stride x_stride) into `scratch` and computes y (row stride y_stride ≥ rows).
void LinearI8(WorkerPool& pool, const Int8Kernels& kernels, const Int8MatrixView& w, const float* x, int64_t x_stride,
              int64_t tokens, float* y, int64_t y_stride, ActivationScratch& scratch);

// The same with activations already quantized for w's K-grouping (several matrices sharing one input).
void LinearI8Quantized(WorkerPool& pool, const Int8Kernels& kernels, const Int8MatrixView& w,
                       const QuantizedActivations& x, float* y, int64_t y_stride);

// The same for int4 weights (W4A8, gemm_i4.h) with activations quantized for w's grouping
// (Int4Layout::ActivationGrouping) by the int8 quantizer.
void LinearI4Quantized(WorkerPool& pool, const Int4Kernels& kernels, const Int4MatrixView& w,
                       const QuantizedActivations& x, float* y, int64_t y_stride);
void LinearI4(WorkerPool& pool, const Int8Kernels& quantizer, const Int4Kernels& kernels, const Int4MatrixView& w,
              const float* x, int64_t x_stride, int64_t tokens, float* y, int64_t y_stride, ActivationScratch& scratch);

// y = W x for bf16 weights and fp32 activations x [tokens, w.cols] (row stride x_stride).
void LinearBf16(WorkerPool& pool, const Bf16Kernels& kernels, const Bf16MatrixView& w, const float* x, int64_t x_stride,
                int64_t tokens, float* y, int64_t y_stride);

// QuantizeActivations (gemm_i8.h) split by tokens over the pool: a prefill's 512 rows would otherwise be quantized
// by one thread while the others wait for the product. Fewer than 2 · kMinQuantizeTokens rows stay on the calling
// thread (a hand-off costs more than quantizing them). The codes are the same whichever thread writes a row.
inline constexpr int64_t kMinQuantizeTokens = 16;
QuantizedActivations QuantizeActivationsParallel(WorkerPool& pool, const Int8Kernels& kernels, const Int8Layout& layout,
                                                 const float* x, int64_t x_stride, int64_t tokens,
                                                 ActivationScratch& scratch);

// Row blocks per task for a matrix of `row_blocks` blocks on `threads` threads: about 8 tasks per thread for
// balance, never fewer than 4 blocks (one full 4-block tile), and at least kMinTaskMacs multiply-adds per task
// (`macs_per_block` = 16 · cols · tokens) so that small products run on one thread instead of paying a hand-off.
inline constexpr int64_t kMinTaskMacs = int64_t{1} << 18;
int64_t RowBlocksPerTask(int64_t row_blocks, int threads, int64_t macs_per_block = kMinTaskMacs);

}  // namespace glint
