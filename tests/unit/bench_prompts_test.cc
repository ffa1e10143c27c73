// Exact-length prompts from a tokenizer that does not round-trip decoded text one-to-one.
#include <set>

#include "bench/prompts.h"
#include "test_util.h"

namespace glint::bench {
namespace {

// Characters are tokens (id = byte + 10), except that "th" is one token (id 300), as byte-pair merges do; with
// special tokens every prompt starts with two ids (1, 2), like GLM's [gMASK]<sop>. Random ids from its pool may
// put 't' before 'h', which decode to "th" and re-encode as one token: the prompt builder must correct for that.
class MergingTokenizer final : public Tokenizer {
 public:
  Result<std::vector<int32_t>> Encode(const std::string& text, bool add_special_tokens) override {
    ++encodes;
    std::vector<int32_t> ids;
    if (add_special_tokens) ids = {1, 2};
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.compare(i, 2, "th") == 0) {
        ids.push_back(300);
        ++i;
      } else {
        ids.push_back(static_cast<unsigned char>(text[i]) + 10);
      }
    }
    return ids;
  }
  Result<std::string> Decode(const std::vector<int32_t>& ids) override {
    std::string text;
    for (int32_t id : ids) {
      if (id == 300) {
        text += "th";
      } else if (id >= 10 && id < 266) {
        text.push_back(static_cast<char>(id - 10));
      }
    }
    return text;
  }
  int encodes = 0;
};

// Every character is two tokens, so odd lengths do not exist.
class EvenTokenizer final : public Tokenizer {
 public:
  Result<std::vector<int32_t>> Encode(const std::string& text, bool) override {
    std::vector<int32_t> ids;
    for (char c : text) {
      ids.push_back(static_cast<unsigned char>(c));
      ids.push_back(1000);
    }
    return ids;
  }
  Result<std::string> Decode(const std::vector<int32_t>& ids) override {
    std::string text;
    for (int32_t id : ids) {
      if (id < 256) text.push_back(static_cast<char>(id));
    }
    return text;
  }
};

class FailingTokenizer final : public Tokenizer {
 public:
  Result<std::vector<int32_t>> Encode(const std::string&, bool) override {
    return FailedPrecondition("POST /tokenize returned HTTP 404");
  }
  Result<std::string> Decode(const std::vector<int32_t>&) override { return std::string(); }
};

TEST(BenchPrompts, ExactLengthsDespiteMergesWithAndWithoutSpecialTokens) {
  MergingTokenizer tokenizer;
  PromptFactory prompts(tokenizer);
  Rng rng(3);
  ASSERT_OK(prompts.ExactLengthText(10, true, rng).status());  // builds the pool and counts the special tokens
  int corrections = 0;  // prompts whose first cut did not land on the length (the search had to move it)
  for (int64_t length = 3; length <= 160; ++length) {
    for (bool special : {true, false}) {
      const int64_t calls_before = prompts.tokenizer_calls();
      ASSERT_OK_AND_ASSIGN(std::string text, prompts.ExactLengthText(length, special, rng));
      ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, tokenizer.Encode(text, special));
      EXPECT_EQ(static_cast<int64_t>(ids.size()), length) << "special=" << special << " text='" << text << "'";
      if (prompts.tokenizer_calls() - calls_before > 2) ++corrections;  // a first-cut hit is 1 decode + 1 encode
    }
  }
  EXPECT_GT(corrections, 0) << "the merges never changed a length: the test does not exercise the search";
}

TEST(BenchPrompts, RandomTokenIdsComeFromThePoolAndRepeatWithTheSeed) {
  MergingTokenizer tokenizer;
  PromptFactory prompts(tokenizer);
  Rng first(11), second(11);
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> a, prompts.RandomTokenIds(500, first));
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> b, prompts.RandomTokenIds(500, second));
  EXPECT_EQ(a.size(), 500u);
  EXPECT_EQ(a, b);
  std::set<int32_t> allowed;
  for (const std::string& word : PromptWords()) {
    auto ids = tokenizer.Encode(word + " ", false);
    ASSERT_TRUE(ids.ok());
    allowed.insert(ids->begin(), ids->end());
  }
  for (int32_t id : a) EXPECT_TRUE(allowed.contains(id)) << id;
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 10u);
  const int encodes = tokenizer.encodes;
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> c, prompts.RandomTokenIds(50, first));
  EXPECT_EQ(tokenizer.encodes, encodes);  // the pool is built once
  EXPECT_EQ(c.size(), 50u);
}

TEST(BenchPrompts, UnreachableLengthsAndTinyPromptsAreClearErrors) {
  EvenTokenizer even;
  PromptFactory prompts(even);
  Rng rng(1);
  ASSERT_OK_AND_ASSIGN(std::string eight, prompts.ExactLengthText(8, false, rng));
  EXPECT_EQ(eight.size(), 4u);
  auto seven = prompts.ExactLengthText(7, false, rng);
  EXPECT_ERROR_CONTAINS(seven, "could not build a text prompt of exactly 7 tokens");
  EXPECT_ERROR_CONTAINS(seven, "--prompt-format token-ids");

  MergingTokenizer merging;
  PromptFactory small(merging);
  EXPECT_ERROR_CONTAINS(small.ExactLengthText(2, true, rng), "leaves no room for text after the 2 special tokens");

  FailingTokenizer failing;
  PromptFactory broken(failing);
  EXPECT_ERROR_CONTAINS(broken.RandomTokenIds(4, rng), "HTTP 404");
}

}  // namespace
}  // namespace glint::bench
