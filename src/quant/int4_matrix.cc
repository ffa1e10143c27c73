#include "quant/int4_matrix.h"

#include <algorithm>
#include <cmath>

namespace glint {

Status ValidateInt4Layout(const Int4Layout& layout) {
  if (layout.rows < 1 || layout.cols < 1) {
    return InvalidArgument("an int4 matrix needs at least one row and column, got [", layout.rows, ", ", layout.cols,
                           "]");
  }
  if (layout.group < 16 || layout.group % 16 != 0) {
    return InvalidArgument("int4 group size ", layout.group, " is not a positive multiple of 16");
  }
  return Status::Ok();
}

void SetInt4Code(const Int4Layout& layout, uint8_t* codes, int64_t r, int64_t c, int code) {
  GLINT_CHECK(code >= kInt4MinCode && code <= kInt4MaxCode) << "int4 code " << code << " out of [-8, 7]";
  uint8_t& byte = codes[(r / kInt8RowBlock) * layout.block_code_bytes() + Int4ByteOffset(r % kInt8RowBlock, c)];
  const int shift = Int4NibbleShift(c);
  byte = static_cast<uint8_t>((byte & ~(0x0f << shift)) | ((code + kInt4CodeBias) << shift));
}

Int4Matrix::Int4Matrix(const Int4Layout& layout)
    : layout_(layout),
      codes_(static_cast<size_t>(layout.code_bytes())),
      scales_(static_cast<size_t>(layout.scale_count()) * sizeof(float)) {
  GLINT_CHECK(ValidateInt4Layout(layout).ok()) << "invalid int4 layout";
  std::fill_n(codes_.data(), codes_.size(), kInt4ZeroByte);
}

Status QuantizeInt4Block(const float* rows, int64_t n, int64_t block, const Int4Layout& layout, uint8_t* codes,
                         float* scales) {
  GLINT_CHECK(n >= 0 && n <= kInt8RowBlock) << "a row block has at most 16 rows, got " << n;
  const int64_t groups = layout.groups();
  float* block_scales = scales + block * groups * kInt8RowBlock;
  for (int64_t lane = 0; lane < n; ++lane) {
    const float* row = rows + lane * layout.cols;
    const int64_t r = block * kInt8RowBlock + lane;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * layout.group, end = std::min(layout.cols, begin + layout.group);
      float amax = 0.0f;
      for (int64_t c = begin; c < end; ++c) {
        if (!std::isfinite(row[c])) {
          return InvalidArgument("weight row ", r, " column ", c, " is ", row[c],
                                 "; int4 quantization needs finite weights");
        }
        amax = std::max(amax, std::fabs(row[c]));
      }
      // Same rounding rule as int8 (int8_matrix.cc): multiply by the reciprocal, nearest even.
      const float inverse = amax > 0.0f ? kInt4MaxCode / amax : 0.0f;
      block_scales[g * kInt8RowBlock + lane] = amax / kInt4MaxCode;
      for (int64_t c = begin; c < end; ++c) {
        const float code = std::clamp(std::nearbyint(row[c] * inverse), -7.0f, 7.0f);
        SetInt4Code(layout, codes, r, c, static_cast<int>(code));
      }
    }
  }
  return Status::Ok();
}

Result<Int4Matrix> QuantizeInt4(const float* w, int64_t rows, int64_t cols, int64_t group) {
  const Int4Layout layout{rows, cols, group};
  GLINT_RETURN_IF_ERROR(ValidateInt4Layout(layout));
  Int4Matrix matrix(layout);
  for (int64_t block = 0; block < layout.row_blocks(); ++block) {
    const int64_t n = std::min(kInt8RowBlock, rows - block * kInt8RowBlock);
    GLINT_RETURN_IF_ERROR(
        QuantizeInt4Block(w + block * kInt8RowBlock * cols, n, block, layout, matrix.codes(), matrix.scales()));
  }
  return matrix;
}

void DequantizeInt4(const Int4MatrixView& matrix, float* out) {
  const Int4Layout& layout = matrix.layout;
  for (int64_t r = 0; r < layout.rows; ++r) {
    for (int64_t c = 0; c < layout.cols; ++c) {
      out[r * layout.cols + c] = static_cast<float>(matrix.Code(r, c)) * matrix.Scale(r, c / layout.group);
    }
  }
}

}  // namespace glint
