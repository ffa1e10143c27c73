// The image decoders (PNG, JPEG, WebP, GIF) on arbitrary bytes, then the preprocessing of whatever decodes:
// no crash, no leak, no allocation past the limits (small here so the fuzzer stays fast), errors as Status.
#include <cstddef>
#include <cstdint>

#include "media/image.h"
#include "media/preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  glint::media::DecodeLimits limits;
  limits.max_pixels = 1 << 20;
  limits.max_side = 4096;
  auto image = glint::media::DecodeImage({data, size}, limits);
  if (!image.ok()) return 0;
  glint::media::ProcessorConfig config;
  config.min_image_tokens = 1;
  config.max_image_tokens = 16;  // a canvas of at most 16 · 28² · 2 pixels: resize and patchify stay cheap
  auto processed = glint::media::PreprocessImage(image.value(), config);
  if (processed.ok() && processed.value().num_tokens() > config.max_image_tokens) __builtin_trap();
  return 0;
}
