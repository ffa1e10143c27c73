// The decoders on images written here with the same libraries' encoders: every PNG colour type (gray, gray+alpha,
// palette with tRNS, RGB, RGBA, 16-bit RGB, interlaced), lossless WebP, GIF (plain and interlaced), JPEG (colour,
// gray, EXIF orientation); the conversions PIL's convert("RGB") makes; limits refused before allocating;
// truncated and corrupt files refused with a message.
#include <gif_lib.h>
#include <gtest/gtest.h>
#include <png.h>
#include <webp/encode.h>

#include <cstring>
#include <random>

#include "image_test_util.h"
#include "media/image.h"
#include "test_util.h"

namespace glint::media {
namespace {

using Bytes = std::vector<uint8_t>;

// libpng's simplified writer: `format` is a PNG_FORMAT_* value, `pixels` laid out as it says.
Bytes WritePng(int width, int height, uint32_t format, const void* pixels, const void* colormap = nullptr,
               int colormap_entries = 0) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = width;
  image.height = height;
  image.format = format;
  image.colormap_entries = colormap_entries;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&image, nullptr, &size, 0, pixels, 0, colormap));
  Bytes out(size);
  EXPECT_TRUE(png_image_write_to_memory(&image, out.data(), &size, 0, pixels, 0, colormap));
  out.resize(size);
  return out;
}

Bytes Pattern(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes out(n);
  for (auto& v : out) v = static_cast<uint8_t>(rng());
  return out;
}

RgbImage Decode(const Bytes& bytes) {
  auto result = DecodeImage(bytes);
  EXPECT_TRUE(result.ok()) << result.status().message();
  return result.ok() ? std::move(result).value() : RgbImage{};
}

TEST(DecodePng, ColourTypesConvertAsPilDoes) {
  const int w = 5, h = 3;
  const Bytes rgba = Pattern(w * h * 4, 1);
  RgbImage image = Decode(WritePng(w, h, PNG_FORMAT_RGBA, rgba.data()));
  ASSERT_EQ(image.width, w);
  for (int i = 0; i < w * h; ++i) {  // alpha dropped, colour kept (no compositing)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(image.pixels[3 * i + c], rgba[4 * i + c]);
  }
  const Bytes gray_alpha = Pattern(w * h * 2, 2);
  image = Decode(WritePng(w, h, PNG_FORMAT_GA, gray_alpha.data()));
  for (int i = 0; i < w * h; ++i) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(image.pixels[3 * i + c], gray_alpha[2 * i]);
  }
  const Bytes rgb = Pattern(w * h * 3, 3);
  EXPECT_EQ(Decode(WritePng(w, h, PNG_FORMAT_RGB, rgb.data())).pixels, rgb);
}

TEST(DecodePng, PaletteWithTransparencyKeepsThePaletteColour) {
  const uint8_t colormap[] = {10, 20, 30, 0, 200, 100, 50, 255};  // RGBA entries; entry 0 fully transparent
  const uint8_t indices[] = {0, 1, 1, 0};
  const RgbImage image = Decode(WritePng(2, 2, PNG_FORMAT_RGBA_COLORMAP, indices, colormap, 2));
  ASSERT_EQ(image.pixels.size(), 12u);
  EXPECT_EQ((std::vector<uint8_t>(image.pixels.begin(), image.pixels.begin() + 6)),
            (std::vector<uint8_t>{10, 20, 30, 200, 100, 50}));
}

TEST(DecodePng, SixteenBitColourTakesTheHighByteAndSixteenBitGrayIsRefused) {
  const uint16_t rgb16[] = {0x1234, 0xABCD, 0xFF00};
  const RgbImage image = Decode(WritePng(1, 1, PNG_FORMAT_LINEAR_RGB, rgb16));
  // The simplified writer stores linear 16-bit values as written, big-endian; the decoder keeps the high byte.
  EXPECT_EQ(image.pixels, (std::vector<uint8_t>{0x12, 0xAB, 0xFF}));
  const uint16_t gray16[] = {0x1234};
  EXPECT_ERROR_CONTAINS(DecodeImage(WritePng(1, 1, PNG_FORMAT_LINEAR_Y, gray16)), "16-bit grayscale PNG");
}

// The PNG chunk CRC (CRC-32, polynomial 0xEDB88320), bit by bit.
uint32_t Crc32(const uint8_t* data, size_t size) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) {
    crc ^= data[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// A PNG signature, an IHDR declaring width × height and an empty IDAT: the size must be refused from the header.
Bytes PngHeaderOnly(uint32_t width, uint32_t height) {
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
  for (const uint32_t v : {width, height}) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
  }
  for (const uint8_t b : {8, 2, 0, 0, 0}) out.push_back(b);
  const uint32_t crc = Crc32(out.data() + 12, 17);
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(crc >> shift));
  // An empty IDAT: libpng's header read stops at the first IDAT, so the size check runs before any pixel data.
  const size_t idat = out.size() + 4;
  for (const char b : {'\0', '\0', '\0', '\0', 'I', 'D', 'A', 'T'}) out.push_back(static_cast<uint8_t>(b));
  const uint32_t idat_crc = Crc32(out.data() + idat, 4);
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(idat_crc >> shift));
  return out;
}

TEST(DecodeLimitsTest, SizesAreRefusedFromTheHeader) {
  DecodeLimits limits;
  limits.max_pixels = 1000;
  EXPECT_ERROR_CONTAINS(DecodeImage(PngHeaderOnly(100, 100), limits), "10000 pixels; the limit is 1000 pixels");
  EXPECT_ERROR_CONTAINS(DecodeImage(PngHeaderOnly(30000, 30000)), "900000000 pixels; the limit is 50000000");
  limits = {};
  limits.max_bytes = 10;
  EXPECT_ERROR_CONTAINS(DecodeImage(PngHeaderOnly(1, 1), limits), "bytes; the limit is 10 bytes");
  EXPECT_ERROR_CONTAINS(DecodeImage(PngHeaderOnly(4, 4)), "PNG image could not be decoded");  // no IDAT: truncated
}

TEST(DecodeErrors, UnknownTruncatedAndCorruptDataAreRefused) {
  EXPECT_ERROR_CONTAINS(DecodeImage(Bytes{'h', 'e', 'l', 'l', 'o'}), "starts with none of the PNG, JPEG, WebP or GIF");
  const Bytes rgb = Pattern(16 * 16 * 3, 4);
  Bytes png = WritePng(16, 16, PNG_FORMAT_RGB, rgb.data());
  Bytes truncated(png.begin(), png.begin() + png.size() / 2);
  EXPECT_ERROR_CONTAINS(DecodeImage(truncated), "PNG image could not be decoded");
  Bytes corrupt = png;
  for (size_t i = 40; i < corrupt.size() - 12; i += 7) corrupt[i] ^= 0x5a;
  EXPECT_ERROR_CONTAINS(DecodeImage(corrupt), "PNG image could not be decoded");
}

using glint::testing::WriteJpeg;

// "Exif\0\0" + a little-endian TIFF header + one IFD entry: Orientation (0x0112), SHORT, 1 value.
Bytes ExifWithOrientation(int orientation) {
  return {'E', 'x',  'i',  'f', 0,
          0,   'I',  'I',  42,  0,
          8,   0,    0,    0,   1,
          0,   0x12, 0x01, 3,   0,
          1,   0,    0,    0,   static_cast<uint8_t>(orientation),
          0,   0,    0,    0,   0,
          0,   0};
}

TEST(DecodeJpegTest, GrayIsReplicatedAndExifOrientationIsApplied) {
  const int w = 16, h = 8;
  Bytes gray(w * h);
  for (int i = 0; i < w * h; ++i) gray[i] = static_cast<uint8_t>(i % w * 16);
  const RgbImage image = Decode(WriteJpeg(w, h, 1, gray));
  ASSERT_EQ(image.width, w);
  for (int i = 0; i < w * h; ++i) {
    EXPECT_EQ(image.pixels[3 * i], image.pixels[3 * i + 1]);
    EXPECT_EQ(image.pixels[3 * i], image.pixels[3 * i + 2]);
  }
  // Orientation 6 (rotate 90° clockwise): a 16 × 8 image becomes 8 × 16 and out(x, y) = in(y, h − 1 − x).
  const RgbImage rotated = Decode(WriteJpeg(w, h, 1, gray, ExifWithOrientation(6)));
  ASSERT_EQ(rotated.width, h);
  ASSERT_EQ(rotated.height, w);
  for (int y = 0; y < rotated.height; ++y) {
    for (int x = 0; x < rotated.width; ++x) EXPECT_EQ(rotated.at(y, x, 0), image.at(h - 1 - x, y, 0));
  }
}

TEST(DecodeJpegTest, TruncatedJpegIsAnErrorNotGrayFill) {
  const Bytes rgb = Pattern(64 * 64 * 3, 5);
  const Bytes jpeg = WriteJpeg(64, 64, 3, rgb);
  EXPECT_TRUE(DecodeImage(jpeg).ok());
  const Bytes truncated(jpeg.begin(), jpeg.begin() + jpeg.size() * 2 / 3);
  EXPECT_ERROR_CONTAINS(DecodeImage(truncated), "JPEG image could not be decoded");
}

// Issue 37: scan data that stops early but is followed by EOI (libjpeg's "premature end of data segment") used to
// decode with the missing rows filled gray.
TEST(DecodeJpegTest, ScanCutShortBeforeEndOfImageIsAnError) {
  const Bytes jpeg = WriteJpeg(64, 64, 3, Pattern(64 * 64 * 3, 6));
  ASSERT_TRUE(DecodeImage(jpeg).ok());
  EXPECT_ERROR_CONTAINS(DecodeImage(glint::testing::CutScanBeforeEoi(jpeg, 0.5)),
                        "Corrupt JPEG data: premature end of data segment");
  EXPECT_ERROR_CONTAINS(DecodeImage(glint::testing::JpegBomb(7000, 7000)), "premature end of data segment");
}

// Every format's size comes from the header alone, limits checked, nothing decoded (a 7000 x 7000 JPEG bomb of a
// few hundred bytes is read in microseconds).
TEST(ReadImageHeaderTest, SizeOfEveryFormatWithoutDecoding) {
  const Bytes rgb = Pattern(20 * 10 * 3, 7);
  auto png = ReadImageHeader(WritePng(20, 10, PNG_FORMAT_RGB, rgb.data()));
  ASSERT_TRUE(png.ok()) << png.status().message();
  EXPECT_EQ(png->format, ImageFormat::kPng);
  EXPECT_EQ(png->width, 20);
  EXPECT_EQ(png->height, 10);
  auto jpeg = ReadImageHeader(WriteJpeg(20, 10, 3, rgb, ExifWithOrientation(6)));
  ASSERT_TRUE(jpeg.ok()) << jpeg.status().message();
  EXPECT_EQ(jpeg->format, ImageFormat::kJpeg);
  EXPECT_EQ(jpeg->width, 20);
  EXPECT_EQ(jpeg->height, 10);
  uint8_t* encoded = nullptr;
  const size_t size = WebPEncodeLosslessRGB(rgb.data(), 20, 10, 60, &encoded);
  const Bytes webp(encoded, encoded + size);
  WebPFree(encoded);
  auto webp_header = ReadImageHeader(webp);
  ASSERT_TRUE(webp_header.ok()) << webp_header.status().message();
  EXPECT_EQ(webp_header->pixels(), 200);
  auto bomb = ReadImageHeader(glint::testing::JpegBomb(7000, 7000));
  ASSERT_TRUE(bomb.ok()) << bomb.status().message();
  EXPECT_EQ(bomb->pixels(), 49'000'000);
  DecodeLimits limits;
  limits.max_pixels = 1'000'000;
  EXPECT_ERROR_CONTAINS(ReadImageHeader(glint::testing::JpegBomb(7000, 7000), limits),
                        "49000000 pixels; the limit is 1000000 pixels");
  EXPECT_ERROR_CONTAINS(ReadImageHeader(PngHeaderOnly(30000, 30000)), "the limit is 50000000");
  EXPECT_ERROR_CONTAINS(ReadImageHeader(Bytes{0xFF, 0xD8, 0xFF, 0xD9}), "JPEG image could not be decoded");
  EXPECT_ERROR_CONTAINS(ReadImageHeader(Bytes{'G', 'I', 'F', '8', '9', 'a', 1}), "GIF image could not be decoded");
}

TEST(ExifOrientationTest, AllEightOrientationsMatchPilsTransposeMethods) {
  RgbImage image{3, 2, std::vector<uint8_t>(18)};
  for (size_t i = 0; i < 18; ++i) image.pixels[i] = static_cast<uint8_t>(i / 3);
  // Pixel values 0..5 laid out   0 1 2 / 3 4 5; expected first row after each orientation (PIL's results).
  const std::vector<std::vector<uint8_t>> first_rows = {{0, 1, 2}, {2, 1, 0}, {5, 4, 3}, {3, 4, 5},
                                                        {0, 3},    {3, 0},    {5, 2},    {2, 5}};
  for (int orientation = 1; orientation <= 8; ++orientation) {
    const RgbImage out = ApplyExifOrientation(image, orientation);
    std::vector<uint8_t> row;
    for (int x = 0; x < out.width; ++x) row.push_back(out.at(0, x, 0));
    EXPECT_EQ(row, first_rows[orientation - 1]) << "orientation " << orientation;
  }
  EXPECT_EQ(ExifOrientation(ExifWithOrientation(8)), 8);
  EXPECT_EQ(ExifOrientation(Bytes{'I', 'I', 42, 0, 0xff, 0xff, 0, 0}), 1);  // IFD offset past the end
}

TEST(DecodeWebpTest, LosslessRoundTripIsExact) {
  const int w = 7, h = 5;
  const Bytes rgb = Pattern(w * h * 3, 6);
  uint8_t* encoded = nullptr;
  const size_t size = WebPEncodeLosslessRGB(rgb.data(), w, h, w * 3, &encoded);
  ASSERT_GT(size, 0u);
  const Bytes webp(encoded, encoded + size);
  WebPFree(encoded);
  EXPECT_EQ(Decode(webp).pixels, rgb);
  EXPECT_ERROR_CONTAINS(DecodeImage(Bytes(webp.begin(), webp.begin() + 20)), "WebP image could not be decoded");
}

int WriteToVector(GifFileType* gif, const GifByteType* data, int length) {
  auto* out = static_cast<Bytes*>(gif->UserData);
  out->insert(out->end(), data, data + length);
  return length;
}

Bytes WriteGif(int width, int height, const Bytes& indices, bool interlace) {
  Bytes out;
  int error = 0;
  GifFileType* gif = EGifOpen(&out, WriteToVector, &error);
  GifColorType colours[4] = {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}, {10, 20, 30}};
  ColorMapObject* map = GifMakeMapObject(4, colours);
  EGifPutScreenDesc(gif, width, height, 2, 0, map);
  EGifPutImageDesc(gif, 0, 0, width, height, interlace, nullptr);
  // An interlaced GIF stores rows in pass order: 0, 8, …; 4, 12, …; 2, 6, …; 1, 3, ….
  std::vector<int> order;
  if (interlace) {
    for (const auto& [start, step] : {std::pair{0, 8}, {4, 8}, {2, 4}, {1, 2}}) {
      for (int y = start; y < height; y += step) order.push_back(y);
    }
  } else {
    for (int y = 0; y < height; ++y) order.push_back(y);
  }
  for (const int y : order) EGifPutLine(gif, const_cast<GifPixelType*>(&indices[size_t{1} * y * width]), width);
  EGifCloseFile(gif, &error);
  GifFreeMapObject(map);
  return out;
}

TEST(DecodeGifTest, FirstFrameThroughThePaletteInterlacedOrNot) {
  const int w = 6, h = 11;
  Bytes indices(w * h);
  for (int i = 0; i < w * h; ++i) indices[i] = static_cast<uint8_t>((i / w + i) % 4);
  for (const bool interlace : {false, true}) {
    const RgbImage image = Decode(WriteGif(w, h, indices, interlace));
    ASSERT_EQ(image.width, w);
    ASSERT_EQ(image.height, h);
    const uint8_t expected[4][3] = {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}, {10, 20, 30}};
    for (int i = 0; i < w * h; ++i) {
      for (int c = 0; c < 3; ++c) ASSERT_EQ(image.pixels[3 * i + c], expected[indices[i]][c]) << i;
    }
  }
}

}  // namespace
}  // namespace glint::media
