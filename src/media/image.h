// Decoded images and the decoders (PNG, JPEG, WebP, a GIF's first frame), each from Debian's library for the
// format. The result is always 8-bit RGB, converted the way the HF processor's loader gets there: PIL opens the
// file and `convert("RGB")` drops alpha (no compositing onto a background), expands gray and palettes, and
// `PIL.ImageOps.exif_transpose` applies the EXIF orientation first (docs/vision-input.md "Decoding").
//
// Limits are checked from the header, before any pixel buffer is allocated: a 1 GB "image" in a 100-byte file is
// an error, not an allocation. Corrupt or truncated data is an error naming the format and what was wrong.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace glint::media {

// Row-major, interleaved R, G, B bytes: pixels[(y * width + x) * 3 + c].
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;

  uint8_t at(int y, int x, int c) const { return pixels[(static_cast<size_t>(y) * width + x) * 3 + c]; }
};

struct DecodeLimits {
  size_t max_bytes = size_t{20} << 20;  // the encoded file
  int64_t max_pixels = 50'000'000;      // width × height of the decoded image (≈ 150 MB of RGB)
  int max_side = 32768;                 // either side
};

enum class ImageFormat { kUnknown, kPng, kJpeg, kWebp, kGif };
std::string_view ImageFormatName(ImageFormat format);

// From the first bytes (magic numbers), not from a file name or a declared media type.
ImageFormat SniffImageFormat(std::span<const uint8_t> bytes);

// What the header alone says, read without decoding a pixel: the format and the stored width and height (before
// any EXIF orientation, which may swap them). The size limits are checked here, so a caller can refuse an image
// bomb — or count its image tokens (media/preprocess.h) — before any decoder runs. Errors: unknown format, the
// file or the size over a limit, a header too short or malformed to give a size, animated WebP.
struct ImageHeader {
  ImageFormat format = ImageFormat::kUnknown;
  int64_t width = 0;
  int64_t height = 0;

  int64_t pixels() const { return width * height; }
};
Result<ImageHeader> ReadImageHeader(std::span<const uint8_t> bytes, const DecodeLimits& limits = {});

// Decodes any supported format. Errors: unknown format, a limit exceeded (the message gives the size and the
// limit), corrupt or truncated data, a variant glint does not decode (16-bit gray PNG, CMYK JPEG, animated WebP).
Result<RgbImage> DecodeImage(std::span<const uint8_t> bytes, const DecodeLimits& limits = {});

// The per-format decoders (image_png.cc, image_jpeg.cc, image_webp.cc, image_gif.cc). Each checks `limits`
// against the header before it allocates.
Result<RgbImage> DecodePng(std::span<const uint8_t> bytes, const DecodeLimits& limits);
Result<RgbImage> DecodeJpeg(std::span<const uint8_t> bytes, const DecodeLimits& limits);
Result<RgbImage> DecodeWebp(std::span<const uint8_t> bytes, const DecodeLimits& limits);
Result<RgbImage> DecodeGif(std::span<const uint8_t> bytes, const DecodeLimits& limits);

// The per-format header readers behind ReadImageHeader (in the decoders' files): width and height only.
Result<ImageHeader> ReadPngHeader(std::span<const uint8_t> bytes);
Result<ImageHeader> ReadJpegHeader(std::span<const uint8_t> bytes);
Result<ImageHeader> ReadWebpHeader(std::span<const uint8_t> bytes);
Result<ImageHeader> ReadGifHeader(std::span<const uint8_t> bytes);

// Shared by the decoders: the size check every one runs on the header's width and height.
Status CheckImageSize(std::string_view format, int64_t width, int64_t height, const DecodeLimits& limits);

// EXIF orientation (TIFF tag 0x0112, values 1–8) from an EXIF blob as the containers carry it: a TIFF header
// ("II*\0" / "MM\0*"), optionally after the "Exif\0\0" prefix of a JPEG APP1 segment. 1 when absent or unreadable
// (PIL's exif_transpose also leaves such images as they are).
int ExifOrientation(std::span<const uint8_t> exif);

// Applies an orientation as PIL.ImageOps.exif_transpose does: 2 flip left-right, 3 rotate 180, 4 flip top-bottom,
// 5 transpose, 6 rotate 270 (clockwise 90), 7 transverse, 8 rotate 90 (counter-clockwise). 1 and unknown values
// leave the image as it is.
RgbImage ApplyExifOrientation(RgbImage image, int orientation);

}  // namespace glint::media
