// The image placeholder and its markers come from config.json, the tokenizer filling in (tokenizer/image_tokens.h).
#include "tokenizer/image_tokens.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "io/config.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace glint {
namespace {

std::string TinyDir() { return testing::TestDataPath("../../models/glint-tiny"); }

struct Tiny {
  Tokenizer tokenizer;
  ModelConfig config;
};
Tiny LoadTiny() { return {Tokenizer::Load(TinyDir()).value(), LoadModelConfig(TinyDir()).value()}; }

TEST(ImageTokens, ConfigIdsAreTheTokenizersSpelledTokens) {
  const Tiny tiny = LoadTiny();
  const ImageTokenIds& ids = tiny.config.image_tokens;
  ASSERT_GE(ids.image, 0);  // glint-tiny's config.json names all three
  ASSERT_OK_AND_ASSIGN(ImageTokens tokens, ResolveImageTokens(ids.image, ids.start, ids.end, &tiny.tokenizer));
  EXPECT_EQ(tokens.image, ids.image);
  EXPECT_EQ(tokens.image, *tiny.tokenizer.TokenId("<|image|>"));
  EXPECT_EQ(tokens.start, *tiny.tokenizer.TokenId("<|begin_of_image|>"));
  EXPECT_EQ(tokens.end, *tiny.tokenizer.TokenId("<|end_of_image|>"));
  ASSERT_OK_AND_ASSIGN(std::string marker, ImageMarkerText(tokens, tiny.tokenizer));
  EXPECT_EQ(marker, "<|begin_of_image|><|image|><|end_of_image|>");
}

TEST(ImageTokens, ConfigAloneNeedsNoTokenizer) {
  ASSERT_OK_AND_ASSIGN(ImageTokens tokens, ResolveImageTokens(7, 8, 9, nullptr));
  EXPECT_EQ(tokens.image, 7);
  EXPECT_EQ(tokens.start, 8);
  EXPECT_EQ(tokens.end, 9);
  EXPECT_ERROR_CONTAINS(ResolveImageTokens(-1, 8, 9, nullptr),
                        "config.json has no image_token_id and there is no tokenizer.json");
}

TEST(ImageTokens, TokenizerFillsWhatTheConfigLacks) {
  const Tiny tiny = LoadTiny();
  ASSERT_OK_AND_ASSIGN(ImageTokens tokens, ResolveImageTokens(-1, -1, -1, &tiny.tokenizer));
  EXPECT_EQ(tokens.image, *tiny.tokenizer.TokenId("<|image|>"));
  EXPECT_TRUE(tokens.has_markers());
}

TEST(ImageTokens, DisagreementIsRefusedNamingBoth) {
  const Tiny tiny = LoadTiny();
  const ImageTokenIds& ids = tiny.config.image_tokens;
  EXPECT_ERROR_CONTAINS(ResolveImageTokens(ids.image + 1, ids.start, ids.end, &tiny.tokenizer),
                        "config.json's image_token_id is " + std::to_string(ids.image + 1) +
                            " but tokenizer.json's <|image|> is token " + std::to_string(ids.image));
  EXPECT_ERROR_CONTAINS(ResolveImageTokens(ids.image, ids.end, ids.end, &tiny.tokenizer), "image_start_token_id");
}

// A tokenizer that spells the tokens otherwise: the config's ids, and the marker text is those ids' own text.
TEST(ImageTokens, MarkerTextFollowsTheIdsNotTheNames) {
  const Tiny tiny = LoadTiny();
  const int32_t a = *tiny.tokenizer.TokenId("<|user|>"), b = *tiny.tokenizer.TokenId("<|assistant|>");
  const int32_t c = *tiny.tokenizer.TokenId("<|system|>");
  ImageTokens tokens{.image = b, .start = a, .end = c};
  ASSERT_OK_AND_ASSIGN(std::string marker, ImageMarkerText(tokens, tiny.tokenizer));
  EXPECT_EQ(marker, "<|user|><|assistant|><|system|>");
  tokens.start = -1;
  EXPECT_ERROR_CONTAINS(ImageMarkerText(tokens, tiny.tokenizer), "no image markers");
  // An id past the tokenizer's vocabulary (config.json of another checkpoint) has no text.
  tokens = {.image = static_cast<int32_t>(tiny.tokenizer.vocab_size()) + 5, .start = a, .end = c};
  EXPECT_ERROR_CONTAINS(ImageMarkerText(tokens, tiny.tokenizer), "outside tokenizer.json's vocabulary");
}

TEST(ImageTokens, ConfigRefusesAnIdOutsideTheVocabulary) {
  auto root = nlohmann::json::parse(ReadFile(TinyDir() + "/config.json").value());
  root["image_token_id"] = 1 << 30;
  EXPECT_ERROR_CONTAINS(ParseModelConfig(root.dump()), "image_token_id");
  root.erase("image_token_id");
  ASSERT_OK_AND_ASSIGN(ModelConfig config, ParseModelConfig(root.dump()));
  EXPECT_EQ(config.image_tokens.image, -1);
}

}  // namespace
}  // namespace glint
