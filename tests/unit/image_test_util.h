// JPEG files written here with libjpeg's encoder, and the hostile variants made from them: a frame header that
// claims a larger image than the scan data covers (the image bomb of issue 37), scan data cut short before EOI.
#pragma once

// clang-format off
#include <cstdio>  // before jpeglib.h, which needs FILE and size_t
#include <jpeglib.h>
// clang-format on

#include <cstdint>
#include <cstdlib>
#include <vector>

namespace glint::testing {

inline std::vector<uint8_t> WriteJpeg(int width, int height, int components, const std::vector<uint8_t>& pixels,
                                      const std::vector<uint8_t>& app1 = {}) {
  jpeg_compress_struct info;
  jpeg_error_mgr error;
  info.err = jpeg_std_error(&error);
  jpeg_create_compress(&info);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = width;
  info.image_height = height;
  info.input_components = components;
  info.in_color_space = components == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, 95, TRUE);
  jpeg_start_compress(&info, TRUE);
  if (!app1.empty()) jpeg_write_marker(&info, JPEG_APP0 + 1, app1.data(), app1.size());
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(&pixels[size_t{info.next_scanline} * width * components]);
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  std::vector<uint8_t> out(buffer, buffer + size);
  jpeg_destroy_compress(&info);
  std::free(buffer);
  return out;
}

// Where the first marker `code` (0xFF code) starts; the file's size when it has none.
inline size_t FindJpegMarker(const std::vector<uint8_t>& jpeg, uint8_t code) {
  for (size_t i = 2; i + 1 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xFF && jpeg[i + 1] == code) return i;
  }
  return jpeg.size();
}

// The first `scan_fraction` of the scan data, then EOI: libjpeg warns "premature end of data segment" and, left to
// its defaults, fills the rest with gray.
inline std::vector<uint8_t> CutScanBeforeEoi(const std::vector<uint8_t>& jpeg, double scan_fraction) {
  const size_t scan = FindJpegMarker(jpeg, 0xDA);
  const size_t end = FindJpegMarker(jpeg, 0xD9);
  std::vector<uint8_t> out(jpeg.begin(), jpeg.begin() + scan + static_cast<size_t>((end - scan) * scan_fraction));
  out.push_back(0xFF);
  out.push_back(0xD9);
  return out;
}

// A few hundred bytes whose frame header claims `width` x `height`: an 8 x 8 gray image's scan, the SOF0 sizes
// patched. Decoding it costs width x height of pixels; its header alone says so.
inline std::vector<uint8_t> JpegBomb(int width, int height) {
  std::vector<uint8_t> jpeg = WriteJpeg(8, 8, 1, std::vector<uint8_t>(64, 0));
  const size_t sof = FindJpegMarker(jpeg, 0xC0);  // FF C0, length (2), precision (1), height (2), width (2)
  jpeg[sof + 5] = static_cast<uint8_t>(height >> 8), jpeg[sof + 6] = static_cast<uint8_t>(height);
  jpeg[sof + 7] = static_cast<uint8_t>(width >> 8), jpeg[sof + 8] = static_cast<uint8_t>(width);
  return jpeg;
}

}  // namespace glint::testing
