#include "quant/int8_matrix.h"

#include <algorithm>
#include <cmath>

namespace glint {

Status ValidateInt8Layout(const Int8Layout& layout) {
  if (layout.rows < 1 || layout.cols < 1) {
    return InvalidArgument("an int8 matrix needs at least one row and column, got [", layout.rows, ", ", layout.cols,
                           "]");
  }
  if (layout.group < 16 || layout.group % 16 != 0) {
    return InvalidArgument("int8 group size ", layout.group, " is not a positive multiple of 16");
  }
  return Status::Ok();
}

Int8Matrix::Int8Matrix(const Int8Layout& layout)
    : layout_(layout),
      codes_(static_cast<size_t>(layout.code_bytes())),
      scales_(static_cast<size_t>(layout.scale_count()) * sizeof(float)) {
  GLINT_CHECK(ValidateInt8Layout(layout).ok()) << "invalid int8 layout";
  std::fill_n(codes_.data(), codes_.size(), static_cast<uint8_t>(kInt8CodeBias));
}

Status QuantizeInt8Block(const float* rows, int64_t n, int64_t block, const Int8Layout& layout, uint8_t* codes,
                         float* scales) {
  GLINT_CHECK(n >= 0 && n <= kInt8RowBlock) << "a row block has at most 16 rows, got " << n;
  const int64_t groups = layout.groups();
  uint8_t* block_codes = codes + block * layout.block_code_bytes();
  float* block_scales = scales + block * groups * kInt8RowBlock;
  for (int64_t lane = 0; lane < n; ++lane) {
    const float* row = rows + lane * layout.cols;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * layout.group, end = std::min(layout.cols, begin + layout.group);
      float amax = 0.0f;
      for (int64_t c = begin; c < end; ++c) {
        if (!std::isfinite(row[c])) {
          return InvalidArgument("weight row ", block * kInt8RowBlock + lane, " column ", c, " is ", row[c],
                                 "; int8 quantization needs finite weights");
        }
        amax = std::max(amax, std::fabs(row[c]));
      }
      const float scale = amax / kInt8MaxCode;
      // Multiply by the reciprocal: the code is within half a step either way, and the kernels' activation
      // quantizer uses the same form, so one rule describes both.
      const float inverse = amax > 0.0f ? kInt8MaxCode / amax : 0.0f;
      block_scales[g * kInt8RowBlock + lane] = scale;
      for (int64_t c = begin; c < end; ++c) {
        const float code = std::clamp(std::nearbyint(row[c] * inverse), -127.0f, 127.0f);
        const int64_t offset = (c / kInt8KStep) * kInt8RowBlock * kInt8KStep + lane * kInt8KStep + c % kInt8KStep;
        block_codes[offset] = static_cast<uint8_t>(static_cast<int>(code) + kInt8CodeBias);
      }
    }
  }
  return Status::Ok();
}

Result<Int8Matrix> QuantizeInt8(const float* w, int64_t rows, int64_t cols, int64_t group) {
  const Int8Layout layout{rows, cols, group};
  GLINT_RETURN_IF_ERROR(ValidateInt8Layout(layout));
  Int8Matrix matrix(layout);
  for (int64_t block = 0; block < layout.row_blocks(); ++block) {
    const int64_t n = std::min(kInt8RowBlock, rows - block * kInt8RowBlock);
    GLINT_RETURN_IF_ERROR(
        QuantizeInt8Block(w + block * kInt8RowBlock * cols, n, block, layout, matrix.codes(), matrix.scales()));
  }
  return matrix;
}

void DequantizeInt8(const Int8MatrixView& matrix, float* out) {
  const Int8Layout& layout = matrix.layout;
  for (int64_t r = 0; r < layout.rows; ++r) {
    for (int64_t c = 0; c < layout.cols; ++c) {
      out[r * layout.cols + c] = static_cast<float>(matrix.Code(r, c)) * matrix.Scale(r, c / layout.group);
    }
  }
}

Int8MatrixView Int8RowRange(const Int8MatrixView& matrix, int64_t begin, int64_t end) {
  const Int8Layout& whole = matrix.layout;
  const int64_t first_block = begin / kInt8RowBlock;
  return {{end - begin, whole.cols, whole.group},
          matrix.codes + first_block * whole.block_code_bytes(),
          matrix.scales + first_block * whole.groups() * kInt8RowBlock};
}

}  // namespace glint
