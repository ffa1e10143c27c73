#include "io/token_file.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace glint {
namespace {

TEST(TokenFile, ParsesTheGoldenTokens) {
  ASSERT_OK_AND_ASSIGN(auto sequences, ReadTokenSequences(testing::TestDataPath("golden/tiny-dense/tokens.json"), 256));
  ASSERT_EQ(sequences.size(), 2u);
  EXPECT_EQ(sequences[0].size(), 12u);
  EXPECT_EQ(sequences[1].size(), 40u);
  EXPECT_EQ(sequences[0][0], 113);
}

TEST(TokenFile, RejectsBadFiles) {
  EXPECT_ERROR_CONTAINS(ParseTokenSequences("[[1,2],[3,\"x\"]]", "f.json"), "sequence 1 entry 1 is \"x\"");
  EXPECT_ERROR_CONTAINS(ParseTokenSequences("[[1,2],[]]", "f.json"), "sequence 1 is not a non-empty list");
  EXPECT_ERROR_CONTAINS(ParseTokenSequences("[]", "f.json"), "non-empty JSON list");
  EXPECT_ERROR_CONTAINS(ParseTokenSequences("{", "f.json"), "not valid JSON");
  EXPECT_ERROR_CONTAINS(ParseTokenSequences("[[1, 300]]", "f.json", 256), "token id 300 is out of range");
  EXPECT_ERROR_CONTAINS(ParseTokenSequences("[[-1]]", "f.json"), "token id -1 is out of range");
}

TEST(TokenFile, ParsesTokenLists) {
  ASSERT_OK_AND_ASSIGN(auto ids, ParseTokenList("1, 2 3,4"));
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_ERROR_CONTAINS(ParseTokenList("1,a"), "expected integers");
  EXPECT_ERROR_CONTAINS(ParseTokenList(" , "), "empty");
  EXPECT_ERROR_CONTAINS(ParseTokenList("5", 4), "out of range");
}

}  // namespace
}  // namespace glint
