// PNG through libpng's progressive-free "read whole image" API. libpng reports errors by longjmp: everything it
// may jump over is plain data reached through `state` (set before setjmp), so no C++ object is skipped.
#include <png.h>

#include <csetjmp>
#include <cstring>

#include "media/image.h"

namespace glint::media {
namespace {

struct PngState {
  std::span<const uint8_t> input;
  size_t offset = 0;
  std::string error;
  std::vector<uint8_t> decoded;  // width × height × channels, as libpng delivers it
  std::vector<png_bytep> rows;
};

void OnError(png_structp png, png_const_charp message) {
  static_cast<PngState*>(png_get_error_ptr(png))->error = message;
  png_longjmp(png, 1);
}
void OnWarning(png_structp, png_const_charp) {}  // warnings (bad CRC of an ancillary chunk, …) do not fail a decode

void ReadFromMemory(png_structp png, png_bytep out, png_size_t length) {
  auto* state = static_cast<PngState*>(png_get_io_ptr(png));
  if (length > state->input.size() - state->offset) png_error(png, "the file is truncated");
  std::memcpy(out, state->input.data() + state->offset, length);
  state->offset += length;
}

// Sets up libpng's transformations so that rows come out as 8-bit gray, gray+alpha, RGB or RGBA (1–4 channels).
// Returns false (with state->error) for a variant glint refuses.
bool ChooseTransforms(png_structp png, png_infop info, PngState* state) {
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  if (bit_depth == 16 && (color_type == PNG_COLOR_TYPE_GRAY)) {
    // PIL opens it as mode "I;16", and its conversion to RGB is not a plain high-byte or scaled mapping; glint
    // refuses it rather than guess (docs/vision-input.md "Decoding").
    state->error = "16-bit grayscale PNG is not supported";
    return false;
  }
  if (bit_depth == 16) png_set_strip_16(png);  // the high byte of each sample, as PIL's "RGB;16B" unpacking does
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  return true;
}

// The decode itself: no C++ object lives in this frame, so a longjmp out of libpng skips no destructor.
bool DecodeWithLibpng(PngState* state, const DecodeLimits* limits, png_uint_32* width, png_uint_32* height,
                      int* channels, int* orientation) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, state, OnError, OnWarning);
  if (png == nullptr) {
    state->error = "libpng could not start";
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    return false;
  }
  png_set_read_fn(png, state, ReadFromMemory);
  png_set_user_limits(png, limits->max_side, limits->max_side);
  png_set_chunk_malloc_max(png, png_alloc_size_t{8} << 20);  // an ancillary chunk (text, ICC, EXIF) ≤ 8 MB
  png_read_info(png, info);
  *width = png_get_image_width(png, info);
  *height = png_get_image_height(png, info);
  {  // scoped: the Status must be gone before libpng can jump again
    const Status size = CheckImageSize("PNG", *width, *height, *limits);
    if (!size.ok()) {
      state->error = size.message();
      png_destroy_read_struct(&png, &info, nullptr);
      return false;
    }
  }
  if (!ChooseTransforms(png, info, state)) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  *channels = png_get_channels(png, info);
  const size_t stride = png_get_rowbytes(png, info);
  state->decoded.resize(stride * *height);
  state->rows.resize(*height);
  for (png_uint_32 y = 0; y < *height; ++y) state->rows[y] = state->decoded.data() + y * stride;
  png_read_image(png, state->rows.data());
  png_read_end(png, info);  // to IEND: a truncated file is an error, as it is for PIL; eXIf may follow IDAT
  png_uint_32 exif_length = 0;
  png_bytep exif = nullptr;
  *orientation = png_get_eXIf_1(png, info, &exif_length, &exif) ? ExifOrientation({exif, exif_length}) : 1;
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

}  // namespace

Result<ImageHeader> ReadPngHeader(std::span<const uint8_t> bytes) {
  // The signature (8 bytes), then IHDR first, as the format requires: length 13, "IHDR", width, height (big-endian).
  if (bytes.size() < 24 || std::memcmp(bytes.data() + 12, "IHDR", 4) != 0) {
    return InvalidArgument("PNG image could not be decoded: no IHDR chunk after the signature");
  }
  auto be32 = [&](size_t at) {
    return int64_t{bytes[at]} << 24 | int64_t{bytes[at + 1]} << 16 | int64_t{bytes[at + 2]} << 8 | bytes[at + 3];
  };
  return ImageHeader{ImageFormat::kPng, be32(16), be32(20)};
}

Result<RgbImage> DecodePng(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  PngState state;
  state.input = bytes;
  png_uint_32 width = 0, height = 0;
  int channels = 0, orientation = 1;
  if (!DecodeWithLibpng(&state, &limits, &width, &height, &channels, &orientation)) {
    return InvalidArgument("PNG image could not be decoded: ", state.error);
  }
  // PIL's convert("RGB"): gray is replicated, alpha is dropped (not composited).
  RgbImage image;
  image.width = static_cast<int>(width);
  image.height = static_cast<int>(height);
  image.pixels.resize(size_t{width} * height * 3);
  const size_t pixels = size_t{width} * height;
  for (size_t i = 0; i < pixels; ++i) {
    const uint8_t* in = &state.decoded[i * channels];
    uint8_t* out = &image.pixels[i * 3];
    if (channels <= 2) {
      out[0] = out[1] = out[2] = in[0];
    } else {
      out[0] = in[0], out[1] = in[1], out[2] = in[2];
    }
  }
  return ApplyExifOrientation(std::move(image), orientation);
}

}  // namespace glint::media
