// Packed int4 weights with a scale per output row and K-group: the weight format of the W4A8 kernels
// (kernels/gemm_i4.h), used for the routed experts when a model is converted with `--experts int4`.
// W[r, c] ≈ code[r, c] · scale[r, c / group], code ∈ [−7, 7] as produced (the kernels accept the whole nibble range
// [−8, 7]), symmetric (no zero point), scale = amax(|W[r, group]|) / 7, codes rounded to nearest, ties to even.
//
// Layout: the int8 format's "16 rows × 4 k" line (int8_matrix.h) with two k-steps per byte. Byte (p, lane, j) of a
// row block holds, biased by +8, code (lane, 8p + j) in its low nibble and code (lane, 8p + 4 + j) in its high
// nibble. One 64-byte load therefore gives two vpdpbusd operands after `& 0x0f` and `>> 4 & 0x0f`, each the same
// 16 rows × 4 k operand the int8 kernels use, so the int8 kernels' tiles, activation broadcasts and epilogue apply
// unchanged. The bias works as in int8: Σ (w + 8)·x = Σ w·x + 8·Σ x, and 8·Σ x = (128·Σ x) / 16 is the int8
// activation quantizer's bias correction shifted right by 4 (exact: it is a multiple of 128).
//
//   codes:  uint8 [row_blocks][padded_cols / 8][16 rows][4 k]   (two biased nibbles; padding holds 8, i.e. 0)
//   scales: float [row_blocks][groups][16 rows]                 (padding rows have scale 0)
//
// Groups are multiples of 16 (so a group holds whole bytes of both nibbles, and the int8 activation grouping is
// shared); rows are padded to a multiple of 16 and columns to a multiple of the group, with zero codes.
#pragma once

#include <cstdint>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "quant/int8_matrix.h"

namespace glint {

inline constexpr int64_t kInt4KPair = 8;  // k values per byte column: two 4-k steps, low then high nibble
inline constexpr int kInt4CodeBias = 8;
inline constexpr int kInt4MaxCode = 7;          // symmetric quantization never produces −8
inline constexpr int kInt4MinCode = -8;         // but the format (and every kernel) carries it
inline constexpr uint8_t kInt4ZeroByte = 0x88;  // two zero codes

struct Int4Layout {
  int64_t rows = 0;   // logical output rows
  int64_t cols = 0;   // logical K
  int64_t group = 0;  // K values sharing one scale; a positive multiple of 16

  int64_t row_blocks() const { return (rows + kInt8RowBlock - 1) / kInt8RowBlock; }
  int64_t padded_rows() const { return row_blocks() * kInt8RowBlock; }
  int64_t padded_cols() const { return group > 0 ? (cols + group - 1) / group * group : 0; }
  int64_t groups() const { return group > 0 ? padded_cols() / group : 0; }
  int64_t code_bytes() const { return padded_rows() * padded_cols() / 2; }
  int64_t scale_count() const { return padded_rows() * groups(); }
  int64_t block_code_bytes() const { return kInt8RowBlock * padded_cols() / 2; }  // one row block of codes
  // The activation grouping these weights need: the same as an int8 matrix of the same shape and group.
  Int8Layout ActivationGrouping() const { return {rows, cols, group}; }
  bool operator==(const Int4Layout&) const = default;
};

// Rows, cols ≥ 1 and a group that is a positive multiple of 16.
Status ValidateInt4Layout(const Int4Layout& layout);

// Byte offset and nibble shift (0 or 4) of element (lane, c) within a row block's codes.
inline int64_t Int4ByteOffset(int64_t lane, int64_t c) {
  return (c / kInt4KPair) * kInt8RowBlock * kInt8KStep + lane * kInt8KStep + c % kInt8KStep;
}
inline int Int4NibbleShift(int64_t c) { return (c % kInt4KPair) < kInt8KStep ? 0 : 4; }

// Writes code ∈ [−8, 7] of element (r, c) into a whole matrix's codes (r < padded_rows, c < padded_cols).
void SetInt4Code(const Int4Layout& layout, uint8_t* codes, int64_t r, int64_t c, int code);

// A non-owning view of packed weights (owned by an Int4Matrix or by a mapped container file).
struct Int4MatrixView {
  Int4Layout layout;
  const uint8_t* codes = nullptr;  // [row_blocks][padded_cols/8][16][4], two biased nibbles per byte
  const float* scales = nullptr;   // [row_blocks][groups][16]

  // Unbiased code of element (r, c), for tests and reference kernels (r < padded_rows, c < padded_cols).
  int Code(int64_t r, int64_t c) const {
    const uint8_t byte = BlockCodes(r / kInt8RowBlock)[Int4ByteOffset(r % kInt8RowBlock, c)];
    return static_cast<int>((byte >> Int4NibbleShift(c)) & 0x0f) - kInt4CodeBias;
  }
  float Scale(int64_t r, int64_t g) const {
    return scales[((r / kInt8RowBlock) * layout.groups() + g) * kInt8RowBlock + r % kInt8RowBlock];
  }
  const uint8_t* BlockCodes(int64_t block) const { return codes + block * layout.block_code_bytes(); }
  const float* BlockScales(int64_t block) const { return scales + block * layout.groups() * kInt8RowBlock; }
};

// Owning packed weights in 64-byte-aligned memory.
class Int4Matrix {
 public:
  Int4Matrix() = default;
  // Zero weights (codes 0, scales 0) of `layout`, which must be valid.
  explicit Int4Matrix(const Int4Layout& layout);

  const Int4Layout& layout() const { return layout_; }
  Int4MatrixView view() const { return {layout_, codes_.As<uint8_t>(), scales_.As<float>()}; }
  uint8_t* codes() { return codes_.data(); }
  float* scales() { return scales_.As<float>(); }

 private:
  Int4Layout layout_;
  AlignedBuffer codes_;   // code_bytes()
  AlignedBuffer scales_;  // scale_count() floats
};

// Quantizes rows [block·16, block·16 + n) given as fp32 `rows` [n, layout.cols] (n ≤ 16) into row block `block` of
// the whole matrix's `codes` (which must hold zero codes, 0x88, where this block's padding is) and `scales`.
// A NaN or infinite weight is an error naming its row and column.
Status QuantizeInt4Block(const float* rows, int64_t n, int64_t block, const Int4Layout& layout, uint8_t* codes,
                         float* scales);

// Quantizes a whole fp32 matrix w [rows, cols].
Result<Int4Matrix> QuantizeInt4(const float* w, int64_t rows, int64_t cols, int64_t group);

// W[r, c] = code · scale for the logical rows and columns: out [rows, cols].
void DequantizeInt4(const Int4MatrixView& matrix, float* out);

}  // namespace glint
