#include "kernels/linear.h"

#include <algorithm>

namespace glint {

int64_t RowBlocksPerTask(int64_t row_blocks, int threads, int64_t macs_per_block) {
  const int64_t tasks = std::max<int64_t>(1, 8 * threads);
  const int64_t per_task = (row_blocks + tasks - 1) / tasks;
  const int64_t minimum =
      (kMinTaskMacs + std::max<int64_t>(1, macs_per_block) - 1) / std::max<int64_t>(1, macs_per_block);
  return std::max<int64_t>({4, (per_task + 3) / 4 * 4, minimum});
}

QuantizedActivations QuantizeActivationsParallel(WorkerPool& pool, const Int8Kernels& kernels, const Int8Layout& layout,
                                                 const float* x, int64_t x_stride, int64_t tokens,
                                                 ActivationScratch& scratch) {
  if (pool.size() == 1 || tokens < 2 * kMinQuantizeTokens) {
    return QuantizeActivations(kernels, layout, x, x_stride, tokens, scratch);
  }
  const int64_t padded = layout.padded_cols(), groups = layout.groups();
  scratch.Reserve(tokens, padded, groups);
  const int64_t grain = std::max(kMinQuantizeTokens, (tokens + 2 * pool.size() - 1) / (2 * pool.size()));
  pool.ParallelFor(tokens, grain, [&](int64_t begin, int64_t end, int) {
    kernels.quantize(x + begin * x_stride, x_stride, end - begin, layout.cols, layout.group, padded,
                     scratch.codes() + begin * padded, scratch.scales() + begin * groups,
                     scratch.bias_correction() + begin * groups);
  });
  return ActivationsIn(layout, tokens, scratch);
}

void LinearI8Quantized(WorkerPool& pool, const Int8Kernels& kernels, const Int8MatrixView& w,
                       const QuantizedActivations& x, float* y, int64_t y_stride) {
  const int64_t blocks = w.layout.row_blocks();
  const int64_t macs_per_block = kInt8RowBlock * w.layout.cols * x.tokens;
  pool.ParallelFor(blocks, RowBlocksPerTask(blocks, pool.size(), macs_per_block),
                   [&](int64_t begin, int64_t end, int) { kernels.gemm(w, x, begin, end, y, y_stride); });
}

void LinearI8(WorkerPool& pool, const Int8Kernels& kernels, const Int8MatrixView& w, const float* x, int64_t x_stride,
              int64_t tokens, float* y, int64_t y_stride, ActivationScratch& scratch) {
  const QuantizedActivations q = QuantizeActivationsParallel(pool, kernels, w.layout, x, x_stride, tokens, scratch);
  LinearI8Quantized(pool, kernels, w, q, y, y_stride);
}

void LinearI4Quantized(WorkerPool& pool, const Int4Kernels& kernels, const Int4MatrixView& w,
                       const QuantizedActivations& x, float* y, int64_t y_stride) {
  const int64_t blocks = w.layout.row_blocks();
  const int64_t macs_per_block = kInt8RowBlock * w.layout.cols * x.tokens;
  pool.ParallelFor(blocks, RowBlocksPerTask(blocks, pool.size(), macs_per_block),
                   [&](int64_t begin, int64_t end, int) { kernels.gemm(w, x, begin, end, y, y_stride); });
}

void LinearI4(WorkerPool& pool, const Int8Kernels& quantizer, const Int4Kernels& kernels, const Int4MatrixView& w,
              const float* x, int64_t x_stride, int64_t tokens, float* y, int64_t y_stride,
              ActivationScratch& scratch) {
  const QuantizedActivations q =
      QuantizeActivationsParallel(pool, quantizer, w.layout.ActivationGrouping(), x, x_stride, tokens, scratch);
  LinearI4Quantized(pool, kernels, w, q, y, y_stride);
}

void LinearBf16(WorkerPool& pool, const Bf16Kernels& kernels, const Bf16MatrixView& w, const float* x, int64_t x_stride,
                int64_t tokens, float* y, int64_t y_stride) {
  const int64_t blocks = w.layout.row_blocks();
  const int64_t macs_per_block = kBf16RowBlock * w.layout.cols * tokens;
  pool.ParallelFor(blocks, RowBlocksPerTask(blocks, pool.size(), macs_per_block), [&](int64_t begin, int64_t end, int) {
    kernels.gemm(w, x, x_stride, tokens, begin, end, y, y_stride);
  });
}

}  // namespace glint
