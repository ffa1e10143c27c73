// The token ids that carry an image into the text sequence: the placeholder (the tower's rows replace its
// embeddings, one per merged patch) and the markers written around each image's run of placeholders.
//
// The checkpoint's config.json names them (image_token_id, image_start_token_id, image_end_token_id, as the HF
// model reads them), so they are taken from there: scoring token ids then needs no tokenizer, and a tokenizer that
// spells the tokens differently still works. The tokenizer's <|image|>, <|begin_of_image|> and <|end_of_image|>
// fill in only what the config does not name; where both name a token and they disagree, the two files are not of
// one checkpoint, and that is refused rather than guessed.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace glint {

struct ImageTokens {
  int32_t image = -1;  // the placeholder
  int32_t start = -1;  // before each image's placeholders; -1: unknown (only the placeholder is needed)
  int32_t end = -1;    // after them; -1: unknown
  bool has_markers() const { return start >= 0 && end >= 0; }
};

// Ids as config.json gives them, -1 where it does not (io/config.h ImageTokenIds, passed as plain ids so that the
// tokenizer layer needs no config). `tokenizer` may be null (no tokenizer.json): then the config must name the
// placeholder. Errors say which file lacks what, or which ids disagree.
Result<ImageTokens> ResolveImageTokens(int64_t config_image, int64_t config_start, int64_t config_end,
                                       const Tokenizer* tokenizer);

// The text the chat template should carry for one image part: the three tokens' text in order, so that tokenizing
// it with special tokens allowed gives exactly [start, image, end]. Needs the markers and a tokenizer.
Result<std::string> ImageMarkerText(const ImageTokens& tokens, const Tokenizer& tokenizer);

}  // namespace glint
