// A GIF's first frame through giflib, read record by record (an animation's later frames are never decoded).
// Palette indices become the colour-map entry; the transparent index keeps its palette colour, as PIL's
// convert("RGB") of a "P" image does. An index past the colour map is black.
#include <gif_lib.h>

#include <cstring>

#include "media/image.h"

namespace glint::media {
namespace {

struct GifInput {
  std::span<const uint8_t> bytes;
  size_t offset = 0;
};

int ReadFromMemory(GifFileType* gif, GifByteType* out, int length) {
  auto* input = static_cast<GifInput*>(gif->UserData);
  const size_t available = input->bytes.size() - input->offset;
  const size_t n = std::min(available, static_cast<size_t>(std::max(length, 0)));
  std::memcpy(out, input->bytes.data() + input->offset, n);
  input->offset += n;
  return static_cast<int>(n);
}

Status GifError(std::string_view what, int code) {
  const char* text = GifErrorString(code);
  return InvalidArgument("GIF image could not be decoded: ", what, " (", text ? text : "unknown giflib error", ")");
}

// Reads the first image's indices (de-interlaced) into `indices`, width × height.
Status ReadFirstFrame(GifFileType* gif, const DecodeLimits& limits, std::vector<uint8_t>& indices) {
  GLINT_RETURN_IF_ERROR(CheckImageSize("GIF", gif->SWidth, gif->SHeight, limits));
  for (;;) {
    GifRecordType record;
    if (DGifGetRecordType(gif, &record) == GIF_ERROR) return GifError("reading a record", gif->Error);
    if (record == TERMINATE_RECORD_TYPE) return InvalidArgument("GIF image could not be decoded: it has no frame");
    if (record == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* block = nullptr;
      if (DGifGetExtension(gif, &code, &block) == GIF_ERROR) return GifError("reading an extension", gif->Error);
      while (block != nullptr) {
        if (DGifGetExtensionNext(gif, &block) == GIF_ERROR) return GifError("reading an extension", gif->Error);
      }
      continue;
    }
    if (record != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(gif) == GIF_ERROR) return GifError("reading the image descriptor", gif->Error);
    const GifImageDesc& frame = gif->Image;
    if (frame.Left != 0 || frame.Top != 0 || frame.Width != gif->SWidth || frame.Height != gif->SHeight) {
      return Unimplemented("GIF whose first frame (", frame.Width, "x", frame.Height, " at ", frame.Left, ",",
                           frame.Top, ") does not cover its ", gif->SWidth, "x", gif->SHeight,
                           " screen is not supported");
    }
    const int width = frame.Width, height = frame.Height;
    indices.resize(size_t{1} * width * height);
    auto read_row = [&](int y) { return DGifGetLine(gif, &indices[size_t{1} * y * width], width) != GIF_ERROR; };
    if (frame.Interlace) {
      constexpr int kStart[] = {0, 4, 2, 1}, kStep[] = {8, 8, 4, 2};
      for (int pass = 0; pass < 4; ++pass) {
        for (int y = kStart[pass]; y < height; y += kStep[pass]) {
          if (!read_row(y)) return GifError("reading pixels", gif->Error);
        }
      }
    } else {
      for (int y = 0; y < height; ++y) {
        if (!read_row(y)) return GifError("reading pixels", gif->Error);
      }
    }
    return Status::Ok();
  }
}

}  // namespace

Result<ImageHeader> ReadGifHeader(std::span<const uint8_t> bytes) {
  // "GIF89a", then the logical screen's width and height (little-endian): the first frame must cover it.
  if (bytes.size() < 10) return InvalidArgument("GIF image could not be decoded: the header is truncated");
  return ImageHeader{ImageFormat::kGif, bytes[6] | bytes[7] << 8, bytes[8] | bytes[9] << 8};
}

Result<RgbImage> DecodeGif(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  GifInput input{bytes};
  int error = 0;
  GifFileType* gif = DGifOpen(&input, ReadFromMemory, &error);
  if (gif == nullptr) return GifError("reading the header", error);
  std::vector<uint8_t> indices;
  Status read = ReadFirstFrame(gif, limits, indices);
  RgbImage image;
  if (read.ok()) {
    const ColorMapObject* map = gif->Image.ColorMap ? gif->Image.ColorMap : gif->SColorMap;
    if (map == nullptr) {
      read = InvalidArgument("GIF image could not be decoded: it has neither a global nor a local colour map");
    } else {
      image.width = gif->SWidth;
      image.height = gif->SHeight;
      image.pixels.resize(indices.size() * 3);
      for (size_t i = 0; i < indices.size(); ++i) {
        if (indices[i] >= map->ColorCount) continue;  // stays black
        const GifColorType& colour = map->Colors[indices[i]];
        image.pixels[3 * i] = colour.Red, image.pixels[3 * i + 1] = colour.Green, image.pixels[3 * i + 2] = colour.Blue;
      }
    }
  }
  DGifCloseFile(gif, &error);
  if (!read.ok()) return read;
  return image;
}

}  // namespace glint::media
