// Load-time conversion of checkpoint tensors (FP8 e4m3 with 128×128 block scales, BF16, F32) into the packed
// kernel formats (int8_matrix.h, bf16_matrix.h).
//
// A RowSource decodes a few rows at a time to fp32, so converting the 154880 × 4096 lm_head never holds a whole
// fp32 copy (2.5 GB); sources stack (ConcatRows) so that projections sharing an input become one packed matrix.
// FP8 → int8 is a requantization: the exact FP8 value (e4m3 code × block scale, model doc §9) is rounded to the
// nearest multiple of the int8 group scale, an error of at most half a step: |W − Ŵ| ≤ amax(row, group) / 254.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "quant/bf16_matrix.h"
#include "quant/int4_matrix.h"
#include "quant/int8_matrix.h"

namespace glint {

struct RowSource {
  int64_t rows = 0;
  int64_t cols = 0;
  // Writes rows [begin, begin + count) as fp32 into out [count, cols].
  std::function<Status(int64_t begin, int64_t count, float* out)> read;
  // Writes the same rows as bf16 bits when the source is exactly bf16 (else null): bf16 packing keeps the bits.
  std::function<Status(int64_t begin, int64_t count, uint16_t* out)> read_bf16;
};

// FP8 e4m3 codes [rows, cols] with F32 block multipliers `scale_inv` [ceil(rows/br), ceil(cols/bc)] (§9: despite
// its name, scale_inv multiplies). Neither array needs any alignment. The pointers must outlive the source.
RowSource Fp8BlockSource(const uint8_t* codes, const uint8_t* scale_inv_bytes, int64_t rows, int64_t cols,
                         int64_t block_rows, int64_t block_cols);
// BF16 bits [rows, cols] (unaligned bytes).
RowSource Bf16Source(const uint8_t* bytes, int64_t rows, int64_t cols);
// F32 [rows, cols] (unaligned bytes).
RowSource F32Source(const uint8_t* bytes, int64_t rows, int64_t cols);
// F16 [rows, cols] (unaligned bytes).
RowSource F16Source(const uint8_t* bytes, int64_t rows, int64_t cols);
// Rows of `parts` one after the other; every part must have the same cols.
Result<RowSource> ConcatRows(std::vector<RowSource> parts);

// Quantizes a source into an allocated int8 layout (rows and cols must match the source) — the caller's memory
// may be an output file's mapping. Errors name the first non-finite weight.
Status RequantizeInt8Into(const RowSource& source, const Int8Layout& layout, uint8_t* codes, float* scales);
Result<Int8Matrix> RequantizeInt8(const RowSource& source, int64_t group);

// The same into int4 (int4_matrix.h): FP8 → int4 rounds the exact FP8 value to the nearest multiple of the int4
// group scale, |W − Ŵ| ≤ amax(row, group) / 14 — 127/7 ≈ 18× the int8 bound.
Status RequantizeInt4Into(const RowSource& source, const Int4Layout& layout, uint8_t* codes, float* scales);
Result<Int4Matrix> RequantizeInt4(const RowSource& source, int64_t group);

// Packs a source as bf16: bit-exact for a bf16 source, rounded to nearest even otherwise.
Status PackBf16Into(const RowSource& source, const Bf16Layout& layout, uint16_t* values);
Result<Bf16Matrix> PackBf16(const RowSource& source);

}  // namespace glint
