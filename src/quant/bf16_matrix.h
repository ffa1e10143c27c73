// Packed bf16 weights for the bf16 kernels (kernels/gemm_bf16.h): the checkpoint's BF16 values, bit-exact.
//
// Layout ("16 rows × 2 k"), the int8 layout's twin: one 64-byte line holds the weights of 16 output rows at two
// consecutive k. Read as 16 uint32 lanes, lane r is (W[r, k+1] << 16) | W[r, k]: masking the low half gives
// W[·, k+1] as fp32 and shifting left by 16 gives W[·, k], two instructions for 32 weights, after which the
// activation is a plain broadcast and 16 rows accumulate in one register without horizontal sums. The same
// lines are the operand order of AVX512-BF16 `vdpbf16ps`.
//
//   values: uint16 [row_blocks][padded_cols / 2][16 rows][2 k]   (bf16 bits; padding is +0)
#pragma once

#include <cstdint>

#include "base/aligned_buffer.h"
#include "base/status.h"

namespace glint {

inline constexpr int64_t kBf16RowBlock = 16;
inline constexpr int64_t kBf16KPad = 16;  // columns are padded to a multiple of this (whole 32-byte steps)

struct Bf16Layout {
  int64_t rows = 0;
  int64_t cols = 0;

  int64_t row_blocks() const { return (rows + kBf16RowBlock - 1) / kBf16RowBlock; }
  int64_t padded_rows() const { return row_blocks() * kBf16RowBlock; }
  int64_t padded_cols() const { return (cols + kBf16KPad - 1) / kBf16KPad * kBf16KPad; }
  int64_t value_count() const { return padded_rows() * padded_cols(); }
  int64_t block_values() const { return kBf16RowBlock * padded_cols(); }
  bool operator==(const Bf16Layout&) const = default;
};

Status ValidateBf16Layout(const Bf16Layout& layout);

struct Bf16MatrixView {
  Bf16Layout layout;
  const uint16_t* values = nullptr;  // [row_blocks][padded_cols/2][16][2]

  uint16_t Bits(int64_t r, int64_t c) const {
    const int64_t block = r / kBf16RowBlock, lane = r % kBf16RowBlock;
    return values[block * layout.block_values() + (c / 2) * kBf16RowBlock * 2 + lane * 2 + c % 2];
  }
  const uint16_t* BlockValues(int64_t block) const { return values + block * layout.block_values(); }
};

class Bf16Matrix {
 public:
  Bf16Matrix() = default;
  explicit Bf16Matrix(const Bf16Layout& layout);  // zeros

  const Bf16Layout& layout() const { return layout_; }
  Bf16MatrixView view() const { return {layout_, values_.As<uint16_t>()}; }
  uint16_t* values() { return values_.As<uint16_t>(); }

 private:
  Bf16Layout layout_;
  AlignedBuffer values_;
};

// Packs rows [block·16, block·16 + n) given as bf16 bits [n, cols] into row block `block` of `values`.
void PackBf16Block(const uint16_t* rows, int64_t n, int64_t block, const Bf16Layout& layout, uint16_t* values);

// Packs fp32 weights [rows, cols], rounding each to the nearest bf16 (exact for values that came from bf16).
Result<Bf16Matrix> PackBf16FromFloat(const float* w, int64_t rows, int64_t cols);

// The weights as fp32 [rows, cols].
void UnpackBf16(const Bf16MatrixView& matrix, float* out);

}  // namespace glint
