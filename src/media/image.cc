#include "media/image.h"

#include <cstring>

namespace glint::media {

std::string_view ImageFormatName(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kGif:
      return "GIF";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

ImageFormat SniffImageFormat(std::span<const uint8_t> bytes) {
  auto starts = [&](std::string_view magic, size_t at = 0) {
    return bytes.size() >= at + magic.size() && std::memcmp(bytes.data() + at, magic.data(), magic.size()) == 0;
  };
  if (starts("\x89PNG\r\n\x1a\n")) return ImageFormat::kPng;
  if (starts("\xff\xd8\xff")) return ImageFormat::kJpeg;
  if (starts("RIFF") && starts("WEBP", 8)) return ImageFormat::kWebp;
  if (starts("GIF87a") || starts("GIF89a")) return ImageFormat::kGif;
  return ImageFormat::kUnknown;
}

Status CheckImageSize(std::string_view format, int64_t width, int64_t height, const DecodeLimits& limits) {
  if (width <= 0 || height <= 0) return InvalidArgument(format, " image has an empty size ", width, "x", height);
  if (width > limits.max_side || height > limits.max_side) {
    return OutOfRange(format, " image is ", width, "x", height, " pixels; the limit is ", limits.max_side,
                      " pixels per side");
  }
  if (width * height > limits.max_pixels) {
    return OutOfRange(format, " image is ", width, "x", height, " = ", width * height, " pixels; the limit is ",
                      limits.max_pixels, " pixels");
  }
  return Status::Ok();
}

namespace {

Status CheckFileSize(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  if (bytes.size() > limits.max_bytes) {
    return OutOfRange("the image file is ", bytes.size(), " bytes; the limit is ", limits.max_bytes, " bytes");
  }
  return Status::Ok();
}

Status NotAnImage(std::span<const uint8_t> bytes) {
  return InvalidArgument(
      "not an image glint decodes: the data starts with none of the PNG, JPEG, WebP or GIF "
      "signatures (",
      bytes.size(), " bytes)");
}

Result<ImageHeader> ReadHeaderOfFormat(std::span<const uint8_t> bytes) {
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kPng:
      return ReadPngHeader(bytes);
    case ImageFormat::kJpeg:
      return ReadJpegHeader(bytes);
    case ImageFormat::kWebp:
      return ReadWebpHeader(bytes);
    case ImageFormat::kGif:
      return ReadGifHeader(bytes);
    case ImageFormat::kUnknown:
      break;
  }
  return NotAnImage(bytes);
}

}  // namespace

Result<ImageHeader> ReadImageHeader(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  GLINT_RETURN_IF_ERROR(CheckFileSize(bytes, limits));
  GLINT_ASSIGN_OR_RETURN(ImageHeader header, ReadHeaderOfFormat(bytes));
  GLINT_RETURN_IF_ERROR(CheckImageSize(ImageFormatName(header.format), header.width, header.height, limits));
  return header;
}

Result<RgbImage> DecodeImage(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  GLINT_RETURN_IF_ERROR(CheckFileSize(bytes, limits));
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kPng:
      return DecodePng(bytes, limits);
    case ImageFormat::kJpeg:
      return DecodeJpeg(bytes, limits);
    case ImageFormat::kWebp:
      return DecodeWebp(bytes, limits);
    case ImageFormat::kGif:
      return DecodeGif(bytes, limits);
    case ImageFormat::kUnknown:
      break;
  }
  return NotAnImage(bytes);
}

namespace {

// A bounds-checked reader of the TIFF structure inside an EXIF blob (byte order from the header).
struct TiffReader {
  std::span<const uint8_t> data;
  bool big_endian = false;

  bool Read16(size_t at, uint32_t& out) const {
    if (at + 2 > data.size()) return false;
    out = big_endian ? (data[at] << 8 | data[at + 1]) : (data[at + 1] << 8 | data[at]);
    return true;
  }
  bool Read32(size_t at, uint32_t& out) const {
    uint32_t high = 0, low = 0;
    if (!Read16(at, big_endian ? high : low) || !Read16(at + 2, big_endian ? low : high)) return false;
    out = high << 16 | low;
    return true;
  }
};

}  // namespace

int ExifOrientation(std::span<const uint8_t> exif) {
  if (exif.size() >= 6 && std::memcmp(exif.data(), "Exif\0\0", 6) == 0) exif = exif.subspan(6);
  if (exif.size() < 8) return 1;
  TiffReader tiff{exif, exif[0] == 'M'};
  if (!((exif[0] == 'I' && exif[1] == 'I') || (exif[0] == 'M' && exif[1] == 'M'))) return 1;
  uint32_t magic = 0, ifd = 0, count = 0;
  if (!tiff.Read16(2, magic) || magic != 42 || !tiff.Read32(4, ifd) || !tiff.Read16(ifd, count)) return 1;
  for (uint32_t i = 0; i < count; ++i) {
    const size_t entry = size_t{ifd} + 2 + size_t{i} * 12;
    uint32_t tag = 0, type = 0, value = 0;
    if (!tiff.Read16(entry, tag) || !tiff.Read16(entry + 2, type)) return 1;
    if (tag != 0x0112) continue;
    // SHORT (type 3): the value sits in the first two bytes of the value field.
    if (type != 3 || !tiff.Read16(entry + 8, value)) return 1;
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

RgbImage ApplyExifOrientation(RgbImage image, int orientation) {
  if (orientation < 2 || orientation > 8) return image;
  const int w = image.width, h = image.height;
  const bool swaps = orientation >= 5;
  RgbImage out;
  out.width = swaps ? h : w;
  out.height = swaps ? w : h;
  out.pixels.resize(image.pixels.size());
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;  // the source pixel of out(x, y), per PIL's transpose methods
      switch (orientation) {
        case 2:
          sx = w - 1 - x;
          break;  // FLIP_LEFT_RIGHT
        case 3:
          sx = w - 1 - x, sy = h - 1 - y;
          break;  // ROTATE_180
        case 4:
          sy = h - 1 - y;
          break;  // FLIP_TOP_BOTTOM
        case 5:
          sx = y, sy = x;
          break;  // TRANSPOSE
        case 6:
          sx = y, sy = h - 1 - x;
          break;  // ROTATE_270 (90° clockwise)
        case 7:
          sx = w - 1 - y, sy = h - 1 - x;
          break;  // TRANSVERSE
        case 8:
          sx = w - 1 - y, sy = x;
          break;  // ROTATE_90 (90° counter-clockwise)
      }
      std::memcpy(&out.pixels[(static_cast<size_t>(y) * out.width + x) * 3],
                  &image.pixels[(static_cast<size_t>(sy) * w + sx) * 3], 3);
    }
  }
  return out;
}

}  // namespace glint::media
