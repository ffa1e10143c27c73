#include "quant/requantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "quant/formats.h"

namespace glint {
namespace {

Status CheckRange(const char* what, int64_t rows, int64_t begin, int64_t count) {
  if (begin < 0 || count < 0 || begin + count > rows) {
    return InternalError(what, " source read rows [", begin, ", ", begin + count, ") of ", rows);
  }
  return Status::Ok();
}

}  // namespace

RowSource Fp8BlockSource(const uint8_t* codes, const uint8_t* scale_inv_bytes, int64_t rows, int64_t cols,
                         int64_t block_rows, int64_t block_cols) {
  RowSource source;
  source.rows = rows;
  source.cols = cols;
  const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
  source.read = [=](int64_t begin, int64_t count, float* out) -> Status {
    GLINT_RETURN_IF_ERROR(CheckRange("FP8", rows, begin, count));
    const float* table = Fp8E4m3Table();
    for (int64_t r = begin; r < begin + count; ++r) {
      const uint8_t* row = codes + r * cols;
      const uint8_t* scale_row = scale_inv_bytes + (r / block_rows) * scale_cols * sizeof(float);
      float* dst = out + (r - begin) * cols;
      for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
        float scale;
        std::memcpy(&scale, scale_row + (c0 / block_cols) * sizeof(float), sizeof(float));
        const int64_t c1 = std::min(cols, c0 + block_cols);
        for (int64_t c = c0; c < c1; ++c)
          dst[c] = table[row[c]] * scale;  // one fp32 rounding (2^-24), as the reference path
      }
    }
    return Status::Ok();
  };
  return source;
}

RowSource Bf16Source(const uint8_t* bytes, int64_t rows, int64_t cols) {
  RowSource source;
  source.rows = rows;
  source.cols = cols;
  source.read_bf16 = [=](int64_t begin, int64_t count, uint16_t* out) -> Status {
    GLINT_RETURN_IF_ERROR(CheckRange("BF16", rows, begin, count));
    std::memcpy(out, bytes + begin * cols * 2, static_cast<size_t>(count * cols) * 2);
    return Status::Ok();
  };
  source.read = [=](int64_t begin, int64_t count, float* out) -> Status {
    GLINT_RETURN_IF_ERROR(CheckRange("BF16", rows, begin, count));
    const uint8_t* src = bytes + begin * cols * 2;
    for (int64_t i = 0; i < count * cols; ++i) {
      uint16_t bits;
      std::memcpy(&bits, src + 2 * i, 2);
      out[i] = Bf16ToFloat(bits);
    }
    return Status::Ok();
  };
  return source;
}

RowSource F32Source(const uint8_t* bytes, int64_t rows, int64_t cols) {
  RowSource source;
  source.rows = rows;
  source.cols = cols;
  source.read = [=](int64_t begin, int64_t count, float* out) -> Status {
    GLINT_RETURN_IF_ERROR(CheckRange("F32", rows, begin, count));
    std::memcpy(out, bytes + begin * cols * 4, static_cast<size_t>(count * cols) * 4);
    return Status::Ok();
  };
  return source;
}

RowSource F16Source(const uint8_t* bytes, int64_t rows, int64_t cols) {
  RowSource source;
  source.rows = rows;
  source.cols = cols;
  source.read = [=](int64_t begin, int64_t count, float* out) -> Status {
    GLINT_RETURN_IF_ERROR(CheckRange("F16", rows, begin, count));
    const uint8_t* src = bytes + begin * cols * 2;
    for (int64_t i = 0; i < count * cols; ++i) {
      uint16_t bits;
      std::memcpy(&bits, src + 2 * i, 2);
      out[i] = Fp16ToFloat(bits);
    }
    return Status::Ok();
  };
  return source;
}

Result<RowSource> ConcatRows(std::vector<RowSource> parts) {
  if (parts.empty()) return InvalidArgument("ConcatRows needs at least one part");
  RowSource source;
  source.cols = parts[0].cols;
  std::vector<int64_t> starts;  // [parts + 1] first row of each part
  for (const RowSource& part : parts) {
    if (part.cols != source.cols) {
      return InvalidArgument("stacked matrices need equal column counts, got ", part.cols, " and ", source.cols);
    }
    starts.push_back(source.rows);
    source.rows += part.rows;
  }
  starts.push_back(source.rows);
  const bool all_bf16 =
      std::all_of(parts.begin(), parts.end(), [](const RowSource& p) { return p.read_bf16 != nullptr; });
  // Reads spanning parts are split at part boundaries.
  auto for_each_piece = [parts, starts](int64_t begin, int64_t count, auto&& piece) -> Status {
    for (size_t p = 0; p < parts.size() && count > 0; ++p) {
      if (begin >= starts[p + 1]) continue;
      const int64_t local = begin - starts[p];
      const int64_t n = std::min(count, parts[p].rows - local);
      GLINT_RETURN_IF_ERROR(piece(parts[p], local, n));
      begin += n;
      count -= n;
    }
    return count == 0 ? Status::Ok() : InternalError("ConcatRows read past the last row");
  };
  const int64_t cols = source.cols;
  source.read = [for_each_piece, cols](int64_t begin, int64_t count, float* out) -> Status {
    return for_each_piece(begin, count, [&](const RowSource& part, int64_t local, int64_t n) -> Status {
      GLINT_RETURN_IF_ERROR(part.read(local, n, out));
      out += n * cols;
      return Status::Ok();
    });
  };
  if (all_bf16) {
    source.read_bf16 = [for_each_piece, cols](int64_t begin, int64_t count, uint16_t* out) -> Status {
      return for_each_piece(begin, count, [&](const RowSource& part, int64_t local, int64_t n) -> Status {
        GLINT_RETURN_IF_ERROR(part.read_bf16(local, n, out));
        out += n * cols;
        return Status::Ok();
      });
    };
  }
  return source;
}

Status RequantizeInt8Into(const RowSource& source, const Int8Layout& layout, uint8_t* codes, float* scales) {
  GLINT_RETURN_IF_ERROR(ValidateInt8Layout(layout));
  if (layout.rows != source.rows || layout.cols != source.cols) {
    return InternalError("int8 layout [", layout.rows, ", ", layout.cols, "] does not match its source [", source.rows,
                         ", ", source.cols, "]");
  }
  std::fill_n(codes, layout.code_bytes(), static_cast<uint8_t>(kInt8CodeBias));
  std::fill_n(scales, layout.scale_count(), 0.0f);
  std::vector<float> rows(kInt8RowBlock * layout.cols);  // [16, cols] one row block in fp32
  for (int64_t block = 0; block < layout.row_blocks(); ++block) {
    const int64_t begin = block * kInt8RowBlock, n = std::min(kInt8RowBlock, layout.rows - begin);
    GLINT_RETURN_IF_ERROR(source.read(begin, n, rows.data()));
    GLINT_RETURN_IF_ERROR(QuantizeInt8Block(rows.data(), n, block, layout, codes, scales));
  }
  return Status::Ok();
}

Result<Int8Matrix> RequantizeInt8(const RowSource& source, int64_t group) {
  const Int8Layout layout{source.rows, source.cols, group};
  GLINT_RETURN_IF_ERROR(ValidateInt8Layout(layout));
  Int8Matrix matrix(layout);
  GLINT_RETURN_IF_ERROR(RequantizeInt8Into(source, layout, matrix.codes(), matrix.scales()));
  return matrix;
}

Status RequantizeInt4Into(const RowSource& source, const Int4Layout& layout, uint8_t* codes, float* scales) {
  GLINT_RETURN_IF_ERROR(ValidateInt4Layout(layout));
  if (layout.rows != source.rows || layout.cols != source.cols) {
    return InternalError("int4 layout [", layout.rows, ", ", layout.cols, "] does not match its source [", source.rows,
                         ", ", source.cols, "]");
  }
  std::fill_n(codes, layout.code_bytes(), kInt4ZeroByte);
  std::fill_n(scales, layout.scale_count(), 0.0f);
  std::vector<float> rows(kInt8RowBlock * layout.cols);  // [16, cols] one row block in fp32
  for (int64_t block = 0; block < layout.row_blocks(); ++block) {
    const int64_t begin = block * kInt8RowBlock, n = std::min(kInt8RowBlock, layout.rows - begin);
    GLINT_RETURN_IF_ERROR(source.read(begin, n, rows.data()));
    GLINT_RETURN_IF_ERROR(QuantizeInt4Block(rows.data(), n, block, layout, codes, scales));
  }
  return Status::Ok();
}

Result<Int4Matrix> RequantizeInt4(const RowSource& source, int64_t group) {
  const Int4Layout layout{source.rows, source.cols, group};
  GLINT_RETURN_IF_ERROR(ValidateInt4Layout(layout));
  Int4Matrix matrix(layout);
  GLINT_RETURN_IF_ERROR(RequantizeInt4Into(source, layout, matrix.codes(), matrix.scales()));
  return matrix;
}

Status PackBf16Into(const RowSource& source, const Bf16Layout& layout, uint16_t* values) {
  GLINT_RETURN_IF_ERROR(ValidateBf16Layout(layout));
  if (layout.rows != source.rows || layout.cols != source.cols) {
    return InternalError("bf16 layout [", layout.rows, ", ", layout.cols, "] does not match its source [", source.rows,
                         ", ", source.cols, "]");
  }
  std::fill_n(values, layout.value_count(), uint16_t{0});
  std::vector<uint16_t> bits(kBf16RowBlock * layout.cols);  // [16, cols]
  std::vector<float> floats(source.read_bf16 ? 0 : kBf16RowBlock * layout.cols);
  for (int64_t block = 0; block < layout.row_blocks(); ++block) {
    const int64_t begin = block * kBf16RowBlock, n = std::min(kBf16RowBlock, layout.rows - begin);
    if (source.read_bf16) {
      GLINT_RETURN_IF_ERROR(source.read_bf16(begin, n, bits.data()));
    } else {
      GLINT_RETURN_IF_ERROR(source.read(begin, n, floats.data()));
      for (int64_t i = 0; i < n * layout.cols; ++i) bits[i] = FloatToBf16(floats[i]);
    }
    PackBf16Block(bits.data(), n, block, layout, values);
  }
  return Status::Ok();
}

Result<Bf16Matrix> PackBf16(const RowSource& source) {
  const Bf16Layout layout{source.rows, source.cols};
  GLINT_RETURN_IF_ERROR(ValidateBf16Layout(layout));
  Bf16Matrix matrix(layout);
  GLINT_RETURN_IF_ERROR(PackBf16Into(source, layout, matrix.values()));
  return matrix;
}

}  // namespace glint
