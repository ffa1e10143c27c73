// The rates glint's own int8 products reach on this machine, measured in the same run as the limits they are judged
// by (machine_limits.h): a decode-shaped product (one token; weights streamed from memory, never from cache) gives
// the achieved fraction of the triad bandwidth, and a prefill-shaped one (hundreds of tokens; weights reused from
// cache) the achieved fraction of the int8 peak. `glint plan --hardware host` projects the released model from them.
#pragma once

#include <cstdint>

#include "base/worker_pool.h"
#include "kernels/isa.h"
#include "quant/int8_matrix.h"

namespace glint {

// Random codes (1..255, biased int8) and equal scales: the kernels' speed does not depend on the values.
Int8Matrix RandomInt8Matrix(int64_t rows, int64_t cols, int64_t group, uint64_t seed = 0x9e3779b97f4a7c15ull);

struct LinearShape {
  int64_t rows = 0, cols = 0, tokens = 0, group = 128;
};

struct LinearRate {
  double seconds_per_call = 0;  // median of the timed calls
  double gops = 0;              // 2 · rows · cols · tokens / seconds
  double weight_gbps = 0;       // (codes + fp32 scales) bytes / seconds
};

// Times LinearI8 at `isa` on every thread of `pool` for about `seconds`. Cycles through enough copies of the
// weights to exceed `stream_bytes` (set it ≥ 4× the last-level cache for a decode shape so every call streams its
// weights from memory; 0 for a prefill shape that should run from cache).
LinearRate MeasureLinearI8(WorkerPool& pool, Isa isa, const LinearShape& shape, int64_t stream_bytes, double seconds);

// The same for bf16 weights (LinearBf16; `shape.group` unused): the rate of the products glint keeps in bf16
// (attention projections at their checkpoint precision, the merger of a vision tower).
LinearRate MeasureLinearBf16(WorkerPool& pool, Isa isa, const LinearShape& shape, int64_t stream_bytes, double seconds);

}  // namespace glint
