// The BPE trainer on a corpus small enough to follow by hand, and on the tiny model's corpus.
#include "tokenizer/bpe_trainer.h"

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace glint {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<int32_t>;

Ids Encode(const Tokenizer& tokenizer, std::string_view text) {
  auto ids = tokenizer.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : Ids{-1};
}

// Words of "aaab aaab aaab": "aaab" once, " aaab" twice. Step by step (counts over word occurrences):
//  1. (a,a) 6 → "aa" 256                  words: [aa a b], [Ġ aa a b]×2
//  2. (aa,a) 3 and (a,b) 3 tie; the smaller left id wins: (a,b) → "ab" 257
//  3. (aa,ab) 3 → "aaab" 258              words: [aaab], [Ġ aaab]×2
//  4. (Ġ,aaab) 2 → " aaab" 259            then no pair is left.
TEST(BpeTrainer, FollowsTheHandComputedMerges) {
  BpeTrainerOptions options;
  options.vocab_size = 1000;
  options.special_tokens = {{1000, "<|end|>", true}, {1003, "<x>", true}};
  ASSERT_OK_AND_ASSIGN(BpeTrainingResult result, TrainByteLevelBpe("aaab aaab aaab", options));
  EXPECT_EQ(result.num_merges, 4);
  EXPECT_EQ(result.num_tokens, 260);
  const Json json = Json::parse(result.tokenizer_json);
  EXPECT_EQ(json["model"]["merges"], Json::parse(R"([["a","a"],["a","b"],["aa","ab"],["Ġ","aaab"]])"));
  EXPECT_EQ(json["model"]["vocab"]["aa"], 256);
  EXPECT_EQ(json["model"]["vocab"]["Ġaaab"], 259);
  EXPECT_EQ(json["model"]["vocab"]["Ġ"], 32);
  EXPECT_EQ(json["model"]["vocab"].size(), 260u);
  EXPECT_EQ(json["added_tokens"][1]["id"], 1003);
  EXPECT_EQ(json["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], std::string(kGlm4PreTokenizerRegex));

  ASSERT_OK_AND_ASSIGN(Tokenizer tokenizer, Tokenizer::FromJson(result.tokenizer_json, "trained"));
  EXPECT_EQ(tokenizer.vocab_size(), 1004);
  EXPECT_EQ(Encode(tokenizer, "aaab aaab"), (Ids{258, 259}));
  EXPECT_EQ(Encode(tokenizer, "aab"), (Ids{256, 'b'}));  // (a,a) outranks (a,b)
  EXPECT_EQ(Encode(tokenizer, "ab<|end|>"), (Ids{257, 1000}));
  EXPECT_FALSE(tokenizer.HasToken(1001));
}

TEST(BpeTrainer, StopsAtTheVocabSizeOrTheMinimumFrequency) {
  BpeTrainerOptions options;
  options.vocab_size = 258;
  ASSERT_OK_AND_ASSIGN(BpeTrainingResult two, TrainByteLevelBpe("aaab aaab aaab", options));
  EXPECT_EQ(two.num_merges, 2);
  options.vocab_size = 1000;
  options.min_frequency = 3;
  ASSERT_OK_AND_ASSIGN(BpeTrainingResult three, TrainByteLevelBpe("aaab aaab aaab", options));
  EXPECT_EQ(three.num_merges, 3);  // (Ġ,aaab) occurs only twice
  ASSERT_OK_AND_ASSIGN(BpeTrainingResult empty, TrainByteLevelBpe("", options));
  EXPECT_EQ(empty.num_merges, 0);
  EXPECT_OK(Tokenizer::FromJson(empty.tokenizer_json, "empty").status());
}

TEST(BpeTrainer, IsDeterministic) {
  BpeTrainerOptions options;
  options.vocab_size = 400;
  const std::string corpus = "the cat sat on the mat; the cat's hat is flat. 12345 678, 你好 你好";
  ASSERT_OK_AND_ASSIGN(BpeTrainingResult first, TrainByteLevelBpe(corpus, options));
  ASSERT_OK_AND_ASSIGN(BpeTrainingResult second, TrainByteLevelBpe(corpus, options));
  EXPECT_EQ(first.tokenizer_json, second.tokenizer_json);
  ASSERT_OK_AND_ASSIGN(Tokenizer tokenizer, Tokenizer::FromJson(first.tokenizer_json, "trained"));
  ASSERT_OK_AND_ASSIGN(Ids ids, tokenizer.Encode(corpus));
  EXPECT_EQ(tokenizer.Decode(ids), corpus);
  EXPECT_LT(ids.size(), corpus.size() * 2 / 3);  // 41 tokens for 70 bytes
}

TEST(BpeTrainer, RefusesBadOptions) {
  BpeTrainerOptions options;
  options.vocab_size = 100;
  EXPECT_ERROR_CONTAINS(TrainByteLevelBpe("x", options), "vocab_size is 100");
  options.vocab_size = 300;
  options.special_tokens = {{299, "<s>", true}};
  EXPECT_ERROR_CONTAINS(TrainByteLevelBpe("x", options), "special token '<s>' has id 299; expected an id in [300");
  options.special_tokens = {{300, "<s>", true}, {301, "<s>", true}};
  EXPECT_ERROR_CONTAINS(TrainByteLevelBpe("x", options), "appears twice");
  options.special_tokens = {{300, "<s>", true}, {300, "<t>", true}};
  EXPECT_ERROR_CONTAINS(TrainByteLevelBpe("x", options), "two special tokens have id 300");
  options.special_tokens = {};
  options.pre_tokenizer_regex = "(";
  EXPECT_ERROR_CONTAINS(TrainByteLevelBpe("x", options), "cannot compile");
}

}  // namespace
}  // namespace glint
