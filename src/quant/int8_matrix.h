// Packed int8 weights with a scale per output row and K-group: the weight format of the W8A8 kernels
// (kernels/gemm_i8.h). W[r, c] ≈ code[r, c] · scale[r, c / group], code ∈ [−127, 127], symmetric (no zero point),
// scale = amax(|W[r, group]|) / 127, codes rounded to nearest, ties to even.
//
// Why this layout ("16 rows × 4 k"): VNNI `vpdpbusd` multiplies 4 consecutive unsigned bytes by 4 signed bytes and
// adds the sum to one int32 lane. With 16 rows interleaved by 4 k values, one 64-byte load feeds 16 output rows and
// the activation is a 4-byte broadcast, so a row block streams contiguously through memory (K × 16 bytes).
// Codes are stored biased (+128, as uint8 ∈ [1, 255]) because `vpdpbusd` needs one unsigned operand and the
// activations are signed: Σ (w + 128)·x = Σ w·x + 128·Σ x, and 128·Σ x is one integer per token and group,
// computed once when the activations are quantized — no per-row correction is stored.
//
//   codes:  uint8 [row_blocks][padded_cols / 4][16 rows][4 k]   (biased by +128; padding holds 128, i.e. 0)
//   scales: float [row_blocks][groups][16 rows]                 (padding rows have scale 0)
//
// Rows are padded to a multiple of 16 and columns to a multiple of the group. Padded values are zero, so they add
// nothing to any dot product.
#pragma once

#include <cstdint>

#include "base/aligned_buffer.h"
#include "base/status.h"

namespace glint {

inline constexpr int64_t kInt8RowBlock = 16;  // rows per packed block: one AVX-512 register of int32 sums
inline constexpr int64_t kInt8KStep = 4;      // k values per int32 lane of vpdpbusd
inline constexpr int kInt8CodeBias = 128;
inline constexpr int kInt8MaxCode = 127;  // symmetric: −128 is never produced

struct Int8Layout {
  int64_t rows = 0;   // logical output rows
  int64_t cols = 0;   // logical K
  int64_t group = 0;  // K values sharing one scale; a positive multiple of 16

  int64_t row_blocks() const { return (rows + kInt8RowBlock - 1) / kInt8RowBlock; }
  int64_t padded_rows() const { return row_blocks() * kInt8RowBlock; }
  int64_t padded_cols() const { return group > 0 ? (cols + group - 1) / group * group : 0; }
  int64_t groups() const { return group > 0 ? padded_cols() / group : 0; }
  int64_t code_bytes() const { return padded_rows() * padded_cols(); }
  int64_t scale_count() const { return padded_rows() * groups(); }
  int64_t block_code_bytes() const { return kInt8RowBlock * padded_cols(); }  // one row block of codes
  bool operator==(const Int8Layout&) const = default;
};

// Rows, cols ≥ 1 and a group that is a positive multiple of 16.
Status ValidateInt8Layout(const Int8Layout& layout);

// A non-owning view of packed weights (owned by an Int8Matrix or by a mapped container file).
struct Int8MatrixView {
  Int8Layout layout;
  const uint8_t* codes = nullptr;  // [row_blocks][padded_cols/4][16][4], biased
  const float* scales = nullptr;   // [row_blocks][groups][16]

  // Unbiased code of element (r, c), for tests and reference kernels (r < padded_rows, c < padded_cols).
  int Code(int64_t r, int64_t c) const {
    const int64_t block = r / kInt8RowBlock, lane = r % kInt8RowBlock;
    const int64_t offset = (block * (layout.padded_cols() / kInt8KStep) + c / kInt8KStep) * kInt8RowBlock * kInt8KStep +
                           lane * kInt8KStep + c % kInt8KStep;
    return static_cast<int>(codes[offset]) - kInt8CodeBias;
  }
  float Scale(int64_t r, int64_t g) const {
    const int64_t block = r / kInt8RowBlock, lane = r % kInt8RowBlock;
    return scales[(block * layout.groups() + g) * kInt8RowBlock + lane];
  }
  // The codes and scales of row block `block`.
  const uint8_t* BlockCodes(int64_t block) const { return codes + block * layout.block_code_bytes(); }
  const float* BlockScales(int64_t block) const { return scales + block * layout.groups() * kInt8RowBlock; }
};

// Owning packed weights in 64-byte-aligned memory.
class Int8Matrix {
 public:
  Int8Matrix() = default;
  // Zero weights (codes 128, scales 0) of `layout`, which must be valid.
  explicit Int8Matrix(const Int8Layout& layout);

  const Int8Layout& layout() const { return layout_; }
  Int8MatrixView view() const { return {layout_, codes_.As<uint8_t>(), scales_.As<float>()}; }
  uint8_t* codes() { return codes_.data(); }
  float* scales() { return scales_.As<float>(); }

 private:
  Int8Layout layout_;
  AlignedBuffer codes_;   // code_bytes()
  AlignedBuffer scales_;  // scale_count() floats
};

// Quantizes rows [block·16, block·16 + n) of a matrix, given as fp32 `rows` [n, layout.cols] (n ≤ 16; rows of the
// block past n are left as padding), into row block `block` of `codes`/`scales` (the whole matrix's arrays).
// A NaN or infinite weight is an error naming its row and column: no scale can represent it.
Status QuantizeInt8Block(const float* rows, int64_t n, int64_t block, const Int8Layout& layout, uint8_t* codes,
                         float* scales);

// Quantizes a whole fp32 matrix w [rows, cols].
Result<Int8Matrix> QuantizeInt8(const float* w, int64_t rows, int64_t cols, int64_t group);

// W[r, c] = code · scale for the logical rows and columns: out [rows, cols].
void DequantizeInt8(const Int8MatrixView& matrix, float* out);

// Rows [begin, end) of `matrix`, a view of the same memory (row blocks lie one after another, codes and scales
// alike): begin a multiple of kInt8RowBlock, end one too or the matrix's last row.
Int8MatrixView Int8RowRange(const Int8MatrixView& matrix, int64_t begin, int64_t end);

}  // namespace glint
