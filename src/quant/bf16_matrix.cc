#include "quant/bf16_matrix.h"

#include <algorithm>
#include <vector>

#include "quant/formats.h"

namespace glint {

Status ValidateBf16Layout(const Bf16Layout& layout) {
  if (layout.rows < 1 || layout.cols < 1) {
    return InvalidArgument("a bf16 matrix needs at least one row and column, got [", layout.rows, ", ", layout.cols,
                           "]");
  }
  return Status::Ok();
}

Bf16Matrix::Bf16Matrix(const Bf16Layout& layout)
    : layout_(layout), values_(static_cast<size_t>(layout.value_count()) * sizeof(uint16_t)) {
  GLINT_CHECK(ValidateBf16Layout(layout).ok()) << "invalid bf16 layout";
}

void PackBf16Block(const uint16_t* rows, int64_t n, int64_t block, const Bf16Layout& layout, uint16_t* values) {
  GLINT_CHECK(n >= 0 && n <= kBf16RowBlock) << "a row block has at most 16 rows, got " << n;
  uint16_t* out = values + block * layout.block_values();
  for (int64_t lane = 0; lane < n; ++lane) {
    for (int64_t c = 0; c < layout.cols; ++c) {
      out[(c / 2) * kBf16RowBlock * 2 + lane * 2 + c % 2] = rows[lane * layout.cols + c];
    }
  }
}

Result<Bf16Matrix> PackBf16FromFloat(const float* w, int64_t rows, int64_t cols) {
  const Bf16Layout layout{rows, cols};
  GLINT_RETURN_IF_ERROR(ValidateBf16Layout(layout));
  Bf16Matrix matrix(layout);
  std::vector<uint16_t> bits(kBf16RowBlock * cols);  // [16, cols]
  for (int64_t block = 0; block < layout.row_blocks(); ++block) {
    const int64_t n = std::min(kBf16RowBlock, rows - block * kBf16RowBlock);
    for (int64_t i = 0; i < n * cols; ++i) bits[i] = FloatToBf16(w[block * kBf16RowBlock * cols + i]);
    PackBf16Block(bits.data(), n, block, layout, matrix.values());
  }
  return matrix;
}

void UnpackBf16(const Bf16MatrixView& matrix, float* out) {
  for (int64_t r = 0; r < matrix.layout.rows; ++r) {
    for (int64_t c = 0; c < matrix.layout.cols; ++c) out[r * matrix.layout.cols + c] = Bf16ToFloat(matrix.Bits(r, c));
  }
}

}  // namespace glint
