// JPEG through libjpeg-turbo with the library's defaults, which are PIL's: the accurate integer DCT (JDCT_ISLOW)
// and "fancy" (triangle-filter) chroma upsampling. libjpeg reports errors by longjmp; as in image_png.cc, all it
// may jump over is plain data reached through `state`.
// clang-format off
#include <cstdio>  // before jpeglib.h, which needs FILE and size_t
#include <jerror.h>
#include <jpeglib.h>
// clang-format on

#include <csetjmp>

#include "media/image.h"

namespace glint::media {
namespace {

constexpr int kMaxScans = 1000;  // a progressive file with more scans than this is a decode-time bomb, not a photo

struct JpegState {
  jpeg_error_mgr error_manager;  // first member: libjpeg hands back a pointer to it
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
  std::vector<uint8_t> decoded;
};

JpegState* StateOf(j_common_ptr info) { return reinterpret_cast<JpegState*>(info->err); }

void OnError(j_common_ptr info) {
  (*info->err->format_message)(info, StateOf(info)->message);
  std::longjmp(StateOf(info)->jump, 1);
}

// A warning that means pixels are missing or wrong is an error: libjpeg would fill the rest of the image with gray
// (docs/vision-input.md "Decoding" — truncated files are errors). That covers the end of the file in the middle of
// the image and also scan data that stops early but is followed by a marker (a tiny file claiming 7000 x 7000
// whose scan ends at EOI: JWRN_HIT_MARKER), bad entropy codes and lost restart markers. The warnings that touch
// no pixel pass: stray bytes between segments, an unknown JFIF revision, an Adobe transform code, a bad ICC marker.
bool WarningCorruptsPixels(int code) {
  return code != JWRN_EXTRANEOUS_DATA && code != JWRN_JFIF_MAJOR && code != JWRN_ADOBE_XFORM && code != JWRN_BOGUS_ICC;
}

void OnMessage(j_common_ptr info, int level) {
  if (level < 0 && WarningCorruptsPixels(info->err->msg_code)) OnError(info);
}

void OnProgress(j_common_ptr info) {
  auto* decompress = reinterpret_cast<j_decompress_ptr>(info);
  if (decompress->input_scan_number > kMaxScans) {
    std::snprintf(StateOf(info)->message, JMSG_LENGTH_MAX, "more than %d progressive scans", kMaxScans);
    std::longjmp(StateOf(info)->jump, 1);
  }
}

int OrientationFromMarkers(j_decompress_ptr info) {
  for (jpeg_saved_marker_ptr marker = info->marker_list; marker != nullptr; marker = marker->next) {
    if (marker->marker == JPEG_APP0 + 1 && marker->data_length >= 6) {
      const int orientation = ExifOrientation({marker->data, marker->data_length});
      if (orientation != 1) return orientation;
    }
  }
  return 1;
}

// Returns false with state->message set. Fills width, height, channels (1 or 3) and the EXIF orientation. With
// `limits` null, stops after libjpeg's own parse of the markers up to the first scan and fills width and height
// only (ReadJpegHeader: the size the decoder would decode, stray bytes between markers skipped as it skips them).
bool DecodeWithLibjpeg(JpegState* state, std::span<const uint8_t> bytes, const DecodeLimits* limits, int* width,
                       int* height, int* channels, int* orientation) {
  jpeg_decompress_struct info;
  info.err = jpeg_std_error(&state->error_manager);
  state->error_manager.error_exit = OnError;
  state->error_manager.emit_message = OnMessage;
  if (setjmp(state->jump)) {
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  state->progress.progress_monitor = OnProgress;
  info.progress = &state->progress;
  info.mem->max_memory_to_use = 1L << 30;
  jpeg_mem_src(&info, bytes.data(), bytes.size());
  jpeg_save_markers(&info, JPEG_APP0 + 1, 0xffff);
  jpeg_read_header(&info, TRUE);
  *width = static_cast<int>(info.image_width);
  *height = static_cast<int>(info.image_height);
  if (limits == nullptr) {
    jpeg_destroy_decompress(&info);
    return true;
  }
  if (info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK) {
    std::snprintf(state->message, JMSG_LENGTH_MAX, "CMYK JPEG is not supported");
    jpeg_destroy_decompress(&info);
    return false;
  }
  {  // scoped: the Status must be gone before libjpeg can jump again
    const Status size = CheckImageSize("JPEG", info.image_width, info.image_height, *limits);
    if (!size.ok()) {
      std::snprintf(state->message, JMSG_LENGTH_MAX, "%s", size.message().c_str());
      jpeg_destroy_decompress(&info);
      return false;
    }
  }
  info.out_color_space = info.jpeg_color_space == JCS_GRAYSCALE ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&info);
  *channels = info.output_components;
  const size_t stride = size_t{info.output_width} * info.output_components;
  state->decoded.resize(stride * info.output_height);
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = state->decoded.data() + stride * info.output_scanline;
    jpeg_read_scanlines(&info, &row, 1);
  }
  *orientation = OrientationFromMarkers(&info);
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return true;
}

}  // namespace

Result<ImageHeader> ReadJpegHeader(std::span<const uint8_t> bytes) {
  JpegState state;
  int width = 0, height = 0, channels = 0, orientation = 1;
  if (!DecodeWithLibjpeg(&state, bytes, nullptr, &width, &height, &channels, &orientation)) {
    return InvalidArgument("JPEG image could not be decoded: ", state.message);
  }
  return ImageHeader{ImageFormat::kJpeg, width, height};
}

Result<RgbImage> DecodeJpeg(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  JpegState state;
  int width = 0, height = 0, channels = 0, orientation = 1;
  if (!DecodeWithLibjpeg(&state, bytes, &limits, &width, &height, &channels, &orientation)) {
    return InvalidArgument("JPEG image could not be decoded: ", state.message);
  }
  RgbImage image;
  image.width = width;
  image.height = height;
  if (channels == 3) {
    image.pixels = std::move(state.decoded);
  } else {  // gray, replicated as PIL's L → RGB conversion does
    image.pixels.resize(size_t{3} * width * height);
    for (size_t i = 0; i < static_cast<size_t>(width) * height; ++i) {
      image.pixels[3 * i] = image.pixels[3 * i + 1] = image.pixels[3 * i + 2] = state.decoded[i];
    }
  }
  return ApplyExifOrientation(std::move(image), orientation);
}

}  // namespace glint::media
