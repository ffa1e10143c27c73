// WebP through libwebp (lossy and lossless, with or without alpha; alpha is dropped as PIL's convert("RGB")
// does). The EXIF chunk, when present, is read through libwebpdemux for the orientation.
#include <webp/decode.h>
#include <webp/demux.h>

#include "media/image.h"

namespace glint::media {
namespace {

int WebpOrientation(std::span<const uint8_t> bytes) {
  WebPData data = {bytes.data(), bytes.size()};
  WebPDemuxer* demux = WebPDemux(&data);
  if (demux == nullptr) return 1;
  int orientation = 1;
  WebPChunkIterator chunk;
  if (WebPDemuxGetChunk(demux, "EXIF", 1, &chunk)) {
    orientation = ExifOrientation({chunk.chunk.bytes, chunk.chunk.size});
    WebPDemuxReleaseChunkIterator(&chunk);
  }
  WebPDemuxDelete(demux);
  return orientation;
}

// libwebp's header parse (no pixel decoded); animations are refused here.
Result<WebPBitstreamFeatures> ReadFeatures(std::span<const uint8_t> bytes) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (status == VP8_STATUS_NOT_ENOUGH_DATA) return InvalidArgument("WebP image could not be decoded: truncated");
  if (status != VP8_STATUS_OK) {
    return InvalidArgument("WebP image could not be decoded: a corrupt header (libwebp status ", int{status}, ")");
  }
  if (features.has_animation) {
    return Unimplemented("animated WebP is not supported (send one frame as a still image)");
  }
  return features;
}

}  // namespace

Result<ImageHeader> ReadWebpHeader(std::span<const uint8_t> bytes) {
  GLINT_ASSIGN_OR_RETURN(const WebPBitstreamFeatures features, ReadFeatures(bytes));
  return ImageHeader{ImageFormat::kWebp, features.width, features.height};
}

Result<RgbImage> DecodeWebp(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  GLINT_ASSIGN_OR_RETURN(const WebPBitstreamFeatures features, ReadFeatures(bytes));
  GLINT_RETURN_IF_ERROR(CheckImageSize("WebP", features.width, features.height, limits));
  RgbImage image;
  image.width = features.width;
  image.height = features.height;
  image.pixels.resize(size_t{3} * image.width * image.height);
  const int stride = 3 * image.width;
  if (WebPDecodeRGBInto(bytes.data(), bytes.size(), image.pixels.data(), image.pixels.size(), stride) == nullptr) {
    return InvalidArgument("WebP image could not be decoded: corrupt or truncated image data");
  }
  return ApplyExifOrientation(std::move(image), WebpOrientation(bytes));
}

}  // namespace glint::media
