#include "tokenizer/image_tokens.h"

#include <string_view>
#include <vector>

namespace glint {
namespace {

// One token: the config's id where it names one, else the tokenizer's spelling; both present must agree.
Result<int32_t> ResolveOne(int64_t config_id, std::string_view key, std::string_view text, const Tokenizer* tokenizer) {
  const std::optional<int32_t> spelled = tokenizer != nullptr ? tokenizer->TokenId(text) : std::nullopt;
  if (config_id >= 0) {
    if (spelled && *spelled != config_id) {
      return InvalidArgument("config.json's ", key, " is ", config_id, " but tokenizer.json's ", text, " is token ",
                             *spelled, ": the two files are not of the same checkpoint");
    }
    return static_cast<int32_t>(config_id);
  }
  return spelled ? *spelled : -1;
}

}  // namespace

Result<ImageTokens> ResolveImageTokens(int64_t config_image, int64_t config_start, int64_t config_end,
                                       const Tokenizer* tokenizer) {
  ImageTokens out;
  GLINT_ASSIGN_OR_RETURN(out.image, ResolveOne(config_image, "image_token_id", "<|image|>", tokenizer));
  GLINT_ASSIGN_OR_RETURN(out.start, ResolveOne(config_start, "image_start_token_id", "<|begin_of_image|>", tokenizer));
  GLINT_ASSIGN_OR_RETURN(out.end, ResolveOne(config_end, "image_end_token_id", "<|end_of_image|>", tokenizer));
  if (out.image < 0) {
    return FailedPrecondition("no image placeholder: config.json has no image_token_id",
                              tokenizer != nullptr ? " and tokenizer.json has no <|image|> token"
                                                   : " and there is no tokenizer.json to look for <|image|> in");
  }
  return out;
}

Result<std::string> ImageMarkerText(const ImageTokens& tokens, const Tokenizer& tokenizer) {
  if (!tokens.has_markers()) {
    return FailedPrecondition(
        "no image markers: config.json has no image_start_token_id / image_end_token_id and "
        "tokenizer.json has no <|begin_of_image|> / <|end_of_image|>");
  }
  std::string text;
  for (const int32_t id : {tokens.start, tokens.image, tokens.end}) {
    if (id >= tokenizer.vocab_size()) {
      return InvalidArgument("image token ", id, " is outside tokenizer.json's vocabulary of ", tokenizer.vocab_size());
    }
    text += tokenizer.TokenText(id);
  }
  // The template's text must come back as exactly these three tokens (they are added tokens of the tokenizer).
  GLINT_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, tokenizer.Encode(text, /*parse_special=*/true));
  if (ids != std::vector<int32_t>{tokens.start, tokens.image, tokens.end}) {
    return FailedPrecondition("tokenizer.json does not encode the image tokens' text (", text, ") as the tokens ",
                              tokens.start, ", ", tokens.image, ", ", tokens.end, " that config.json names");
  }
  return text;
}

}  // namespace glint
