// Image content parts → preprocessed images and the prompt's image tokens (docs/server.md "Images").
//
// Loading: a data: URL (base64, media type image/png, image/jpeg, image/webp or image/gif; the bytes' signature
// decides, a mismatch is refused), or a file:// URL under --allowed-local-media-path (the path, ".." resolved
// lexically, must lie inside the allowed directory; it is opened from the directory's descriptor with O_NOFOLLOW
// at every component, so no symlink is followed; outside, missing and symlinked paths get one message). http(s):// URLs
// are refused: glint fetches nothing from the network. Every error is a 400 naming the part (messages[i].content[j]).
//
// Expansion: the template renders each image part as <|begin_of_image|><|image|><|end_of_image|>; the single
// <|image|> becomes N image tokens, N = the image's merged patches (media/preprocess.h), in image order.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "media/image.h"
#include "media/preprocess.h"
#include "server/api_error.h"
#include "server/backend.h"
#include "server/openai_request.h"

namespace glint::server {

// At most `slots` image decodes at once across the server (--max-image-decodes): each holds up to
// --max-image-pixels of RGB plus its canvas, so this, not the handler-thread count, bounds their memory. Waiters
// are served as slots free up.
class DecodeGate {
 public:
  explicit DecodeGate(int slots) : free_(slots) {}
  // A held slot, released on destruction.
  class Slot {
   public:
    explicit Slot(DecodeGate& gate);
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    DecodeGate& gate_;
  };

 private:
  std::mutex mutex_;
  std::condition_variable freed_;
  int free_;
};

struct ImageInputOptions {
  media::DecodeLimits limits;  // --max-image-bytes, --max-image-pixels
  // Σ width × height of one request's images, from their headers (--max-image-pixels-per-request): bounds the CPU
  // a request's decoding and resizing may take.
  int64_t max_request_pixels = 100'000'000;
  // Image tokens one image may become (0: no limit): the engine's step budget (--max-batch-tokens), since the tower
  // runs a whole image in one step. Checked from the header, before decoding.
  int64_t max_tokens_per_image = 0;
  std::shared_ptr<DecodeGate> decode_gate = std::make_shared<DecodeGate>(2);  // --max-image-decodes
  media::ProcessorConfig processor;      // the checkpoint's processor_config.json, or the release defaults
  std::string allowed_local_media_path;  // empty: file:// URLs are refused
  // Whether the engine has a vision tower; without one a chat request with images is refused (after validation)
  // with `no_images_reason`; /tokenize still expands them.
  bool engine_takes_images = false;
  std::string no_images_reason = "this server has no vision tower";
  // The checkpoint's image placeholder and the template text of one image part (tokenizer/image_tokens.h: from
  // config.json, the tokenizer filling in what it lacks). -1 / empty: the checkpoint names none, and image parts
  // are refused with `no_placeholder_reason`.
  int32_t image_token_id = -1;
  std::string marker_text;
  std::string no_placeholder_reason = "this model names no image placeholder token";
};

struct LoadedImage {
  std::string param;
  uint64_t bytes_hash = 0;  // XXH3-64 of the encoded bytes: what a prefix-cache key of this image would use
  media::PreprocessedImage image;
};

// The bytes an image_url points at. `param` names the part in errors.
ApiOr<std::string> LoadImageBytes(const std::string& url, const std::string& param, const ImageInputOptions& options);

// Loads every image part and reads its header; refuses the request from the headers alone (--max-image-pixels, the
// per-request pixel cap, the per-image token budget) before any pixel is decoded; then decodes and preprocesses
// the images one after another, each holding a slot of the decode gate.
ApiOr<std::vector<LoadedImage>> LoadImages(const std::vector<ImagePart>& parts, const ImageInputOptions& options);

// Replaces the i-th <|image|> token (image_token_id) of `tokens` by images[i].num_tokens() copies of it. The
// count of <|image|> tokens must equal the number of images (a template that drops or repeats an image part, or
// special-token text allowed in content, is a 400). `starts` receives where each image's tokens begin.
ApiOr<std::vector<int32_t>> ExpandImageTokens(const std::vector<int32_t>& tokens, int32_t image_token_id,
                                              const std::vector<LoadedImage>& images, std::vector<size_t>* starts);

// The engine's view of the images (patches moved out of `images`): image i's placeholders start at starts[i].
std::vector<GenerationImage> ToGenerationImages(std::vector<LoadedImage> images, const std::vector<size_t>& starts);

// Strict RFC 4648 base64 (padding optional, no whitespace); nullopt on any other character.
std::optional<std::string> DecodeBase64(std::string_view text);

}  // namespace glint::server
