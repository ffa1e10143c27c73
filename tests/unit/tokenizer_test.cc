// Tokenizer tests on hand-written tokenizer.json fixtures: ids are byte values for the 256 byte tokens, so every
// expected id below can be checked by hand (the byte, or a merge listed in MakeFixture).
#include "tokenizer/tokenizer.h"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "test_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace glint {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<int32_t>;

// Vocabulary: byte b has id b (spelled with the byte-level alphabet), then the merges below (ids 256..), then
// added tokens 300.. . Merge ranks are their order here.
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"t", "h"},    // 256 "th"      rank 0
    {"th", "e"},   // 257 "the"     rank 1
    {"Ġ", "c"},    // 258 " c"      rank 2
    {"a", "t"},    // 259 "at"      rank 3
    {"Ġc", "at"},  // 260 " cat"    rank 4
    {"a", "a"},    // 261 "aa"      rank 5
    {"b", "c"},    // 262 "bc"      rank 6
    {"a", "b"},    // 263 "ab"      rank 7 (lower priority than "b c")
    {"3", "4"},    // 264 "34"      rank 8
    {"'", "s"},    // 265 "'s"      rank 9
    {"Ċ", "Ċ"},    // 266 "\n\n"    rank 10
    {"ä", "½"},    // 267 E4 BD     rank 11
    {"ä½", "ł"},   // 268 E4 BD A0 = "你"  rank 12
    {"Ġ", "Ġ"},    // 269 "  "      rank 13
};

Json FixtureJson(Json pre_tokenizer, bool merges_as_pairs = false) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[std::string(ByteLevelCharOf(static_cast<uint8_t>(b)))] = b;
  Json merges = Json::array();
  int next_id = 256;
  for (const auto& [left, right] : kMerges) {
    vocab[left + right] = next_id++;
    if (merges_as_pairs) {
      merges.push_back(Json::array({left, right}));
    } else {
      merges.push_back(left + " " + right);
    }
  }
  Json added = Json::array();
  auto add = [&](int id, const char* content, bool special) {
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", special}});
  };
  add(300, "<|user|>", true);
  add(301, "<|assistant|>", true);
  add(302, "<think>", false);
  add(303, "<a>", true);
  add(304, "<a><b>", true);
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_tokenizer},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

// GLM's layout: Split(GLM regex, Isolated) then ByteLevel without its own regex.
Json GlmPreTokenizer() {
  return {{"type", "Sequence"},
          {"pretokenizers",
           Json::array(
               {{{"type", "Split"},
                 {"pattern", {{"Regex", std::string(kGlm4PreTokenizerRegex)}}},
                 {"behavior", "Isolated"},
                 {"invert", false}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}})}};
}

Tokenizer MakeTokenizer(const Json& json) {
  auto tokenizer = Tokenizer::FromJson(json.dump(), "fixture.json");
  GLINT_CHECK(tokenizer.ok()) << tokenizer.status().ToString();
  return std::move(tokenizer).value();
}

const Tokenizer& Glm() {
  static const Tokenizer* tokenizer = new Tokenizer(MakeTokenizer(FixtureJson(GlmPreTokenizer())));
  return *tokenizer;
}

Ids Encode(const Tokenizer& tokenizer, std::string_view text, bool parse_special = true) {
  auto ids = tokenizer.Encode(text, parse_special);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : Ids{-1};
}

std::vector<std::string> Pieces(std::string_view text) {
  auto regex = SplitRegex::Compile(kGlm4PreTokenizerRegex);
  GLINT_CHECK(regex.ok()) << regex.status().ToString();
  std::vector<std::string_view> views;
  EXPECT_OK(regex->Split(text, SplitBehavior::kIsolated, views));
  return {views.begin(), views.end()};
}

Ids BytesOf(std::string_view text) {
  Ids ids;
  for (char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

// Deterministic bytes for round-trip tests (splitmix64).
std::string RandomBytes(uint64_t seed, size_t length) {
  std::string out(length, '\0');
  for (auto& c : out) {
    seed += 0x9e3779b97f4a7c15ull;
    uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    c = static_cast<char>((z ^ (z >> 31)) & 0xff);
  }
  return out;
}

TEST(ByteLevel, AlphabetMatchesGpt2) {
  EXPECT_EQ(ByteLevelCharOf(' '), "Ġ");       // U+0120: 0x20 is the 33rd remapped byte
  EXPECT_EQ(ByteLevelCharOf('\n'), "Ċ");      // U+010A
  EXPECT_EQ(ByteLevelCharOf(0), "\xC4\x80");  // U+0100
  EXPECT_EQ(ByteLevelCharOf(0x7F), "ġ");      // U+0121: first of 127..160
  EXPECT_EQ(ByteLevelCharOf(0xA0), "ł");      // U+0142
  EXPECT_EQ(ByteLevelCharOf(0xAD), "Ń");      // U+0143: the soft hyphen, last remapped byte
  EXPECT_EQ(ByteLevelCharOf('!'), "!");
  EXPECT_EQ(ByteLevelCharOf(0xE4), "ä");
  EXPECT_EQ(ByteLevelCharOf(0xFF), "ÿ");
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(ByteLevelDecode(ByteLevelEncode(all)), all);
  EXPECT_EQ(ByteLevelEncode("你"), "ä½ł");
  EXPECT_EQ(ByteLevelDecode("中"), std::nullopt);    // outside the alphabet
  EXPECT_EQ(ByteLevelDecode("a b"), std::nullopt);   // a raw space is not in the alphabet
  EXPECT_EQ(ByteLevelDecode("\xC4"), std::nullopt);  // ill-formed
}

TEST(Utf8, ScanClassifiesSequences) {
  EXPECT_EQ(ScanUtf8("a").kind, Utf8Scan::kComplete);
  EXPECT_EQ(ScanUtf8("\xE4\xBD\xA0").length, 3u);
  EXPECT_EQ(ScanUtf8("\xE4\xBD").kind, Utf8Scan::kIncomplete);
  EXPECT_EQ(ScanUtf8("\xF0\x9F\x98").kind, Utf8Scan::kIncomplete);
  EXPECT_EQ(ScanUtf8("\x80").kind, Utf8Scan::kInvalid);
  EXPECT_EQ(ScanUtf8("\xC0\xAF").kind, Utf8Scan::kInvalid);  // overlong lead
  EXPECT_EQ(ScanUtf8("\xE4"
                     "a")
                .kind,
            Utf8Scan::kInvalid);
  EXPECT_EQ(ScanUtf8("\xE4"
                     "a")
                .length,
            1u);
  EXPECT_EQ(ScanUtf8("\xED\xA0\x80").kind, Utf8Scan::kInvalid);      // surrogate
  EXPECT_EQ(ScanUtf8("\xF4\x90\x80\x80").kind, Utf8Scan::kInvalid);  // > U+10FFFF
  EXPECT_TRUE(IsValidUtf8("héllo 你好 😀"));
  EXPECT_FALSE(IsValidUtf8("\xFF"));
}

TEST(Utf8, SanitizeReplacesMaximalSubparts) {
  const std::string r(kReplacementCharacter);
  EXPECT_EQ(SanitizeUtf8("ok 你"), "ok 你");
  EXPECT_EQ(SanitizeUtf8("a\xE4\xBD"
                         "b"),
            "a" + r + "b");                            // one maximal subpart E4 BD
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), r + r);          // C0 can never start a character
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), r + r + r);  // ED A0 is not a prefix of anything valid
  EXPECT_EQ(SanitizeUtf8("a\xF0\x9F\x98"), "a" + r);   // cut at the end
}

TEST(PreTokenizer, Glm4RegexSplitsAsSpecified) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Pieces("12345 1234567"), (V{"123", "45", " ", "123", "456", "7"}));  // digits in groups of <= 3
  EXPECT_EQ(Pieces("I'm here's"), (V{"I", "'m", " here", "'s"}));
  EXPECT_EQ(Pieces("DON'T we'LL"), (V{"DON", "'T", " we", "'LL"}));  // contractions in any case
  EXPECT_EQ(Pieces("a  b"), (V{"a", " ", " b"}));  // whitespace run: all but the last space, then " b"
  EXPECT_EQ(Pieces("a\n\nb"), (V{"a", "\n\n", "b"}));
  EXPECT_EQ(Pieces("x  \n y"), (V{"x", "  \n", " y"}));          // newlines take their leading whitespace
  EXPECT_EQ(Pieces("Hi!!\n\nok"), (V{"Hi", "!!\n\n", "ok"}));    // punctuation keeps trailing newlines
  EXPECT_EQ(Pieces("a   "), (V{"a", "   "}));                    // trailing whitespace stays one piece
  EXPECT_EQ(Pieces("你好世界，A股"), (V{"你好世界", "，A股"}));  // no separate Han rule
  EXPECT_EQ(Pieces("😀😀 ok"), (V{"😀😀", " ok"}));
  EXPECT_EQ(Pieces("$100"), (V{"$", "100"}));
  EXPECT_EQ(Pieces("\tx"), (V{"\tx"}));  // one non-letter may lead a letter run
}

TEST(PreTokenizer, IllFormedUtf8BecomesPiecesOfItsOwn) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Pieces("ab\xFF"
                   "cd"),
            (V{"ab", "\xFF", "cd"}));
  EXPECT_EQ(Pieces("\xE4\xBD"
                   "x"),
            (V{"\xE4\xBD", "x"}));  // a cut character does not join the letters
  std::string random = RandomBytes(7, 4096);
  std::string joined;
  for (const auto& piece : Pieces(random)) joined += piece;
  EXPECT_EQ(joined, random);
}

TEST(Tokenizer, LoadsFixture) {
  const Tokenizer& t = Glm();
  EXPECT_EQ(t.vocab_size(), 305);
  EXPECT_EQ(t.num_merges(), kMerges.size());
  EXPECT_EQ(t.TokenId(" cat"), 260);
  EXPECT_EQ(t.TokenId("你"), 268);
  EXPECT_EQ(t.TokenId("<|user|>"), 300);
  EXPECT_EQ(t.TokenId("Ġcat"), std::nullopt);  // lookups take raw bytes, not the file's spelling
  EXPECT_EQ(t.TokenText(260), " cat");
  EXPECT_EQ(t.TokenText(299), "");  // a gap
  EXPECT_EQ(t.TokenText(-1), "");
  EXPECT_EQ(t.TokenText(100000), "");
  EXPECT_TRUE(t.IsSpecial(300));
  EXPECT_FALSE(t.IsSpecial(302));  // added but not special
  EXPECT_TRUE(t.IsAdded(302));
  EXPECT_FALSE(t.IsSpecial(97));
  EXPECT_FALSE(t.HasToken(299));
  EXPECT_EQ(t.pre_tokenizer_patterns(), std::vector<std::string>{std::string(kGlm4PreTokenizerRegex)});
}

TEST(Tokenizer, EncodesAscii) {
  const Tokenizer& t = Glm();
  EXPECT_EQ(Encode(t, "the cat"), (Ids{257, 260}));
  EXPECT_EQ(Encode(t, "The cat"), (Ids{'T', 'h', 'e', 260}));  // no "Th" merge
  EXPECT_EQ(Encode(t, ""), Ids{});
  EXPECT_EQ(Encode(t, "x"), Ids{'x'});
}

TEST(Tokenizer, MergesByRankThenLeftmost) {
  const Tokenizer& t = Glm();
  EXPECT_EQ(Encode(t, "aaa"), (Ids{261, 'a'}));  // equal ranks: the leftmost pair first
  EXPECT_EQ(Encode(t, "aaaa"), (Ids{261, 261}));
  EXPECT_EQ(Encode(t, "abc"), (Ids{'a', 262}));  // "b c" (rank 6) beats "a b" (rank 7)
  EXPECT_EQ(Encode(t, "ab"), (Ids{263}));
}

TEST(Tokenizer, DigitsAreGroupedByThree) {
  const Tokenizer& t = Glm();
  EXPECT_EQ(Encode(t, "34"), (Ids{264}));
  EXPECT_EQ(Encode(t, "12345"), (Ids{'1', '2', '3', '4', '5'}));  // "123" | "45": 3 and 4 are in different words
  EXPECT_EQ(Encode(t, "1234"), (Ids{'1', '2', '3', '4'}));
  EXPECT_EQ(Encode(t, "9934"), (Ids{'9', '9', '3', '4'}));  // "993" | "4"
  EXPECT_EQ(Encode(t, "0034"), (Ids{'0', '0', '3', '4'}));
  EXPECT_EQ(Encode(t, "034"), (Ids{'0', 264}));
}

TEST(Tokenizer, EncodesContractionsWhitespaceAndNewlines) {
  const Tokenizer& t = Glm();
  EXPECT_EQ(Encode(t, "it's"), (Ids{'i', 't', 265}));
  EXPECT_EQ(Encode(t, "IT'S"), (Ids{'I', 'T', '\'', 'S'}));
  EXPECT_EQ(Encode(t, "a\n\nb"), (Ids{'a', 266, 'b'}));
  EXPECT_EQ(Encode(t, "a\n\n\nb"), (Ids{'a', 266, '\n', 'b'}));
  EXPECT_EQ(Encode(t, "a   cat"), (Ids{'a', 269, 260}));  // "  " | " cat"
  EXPECT_EQ(Encode(t, "  "), (Ids{269}));
  EXPECT_EQ(Encode(t, "\t\r\n"), (Ids{'\t', '\r', '\n'}));
}

TEST(Tokenizer, EncodesCjkAndEmoji) {
  const Tokenizer& t = Glm();
  EXPECT_EQ(Encode(t, "你"), (Ids{268}));
  EXPECT_EQ(Encode(t, "你好"), (Ids{268, 0xE5, 0xA5, 0xBD}));
  EXPECT_EQ(Encode(t, "😀"), (Ids{0xF0, 0x9F, 0x98, 0x80}));
  EXPECT_EQ(t.Decode(Encode(t, "你好 😀 the cat")), "你好 😀 the cat");
}

TEST(Tokenizer, SplitsAddedTokensWhenParsingSpecials) {
  const Tokenizer& t = Glm();
  EXPECT_EQ(Encode(t, "<|user|>the cat<|assistant|>"), (Ids{300, 257, 260, 301}));
  EXPECT_EQ(Encode(t, "x<|user|>"), (Ids{'x', 300}));
  EXPECT_EQ(Encode(t, "<think>aa"), (Ids{302, 261}));
  EXPECT_EQ(Encode(t, "<a><b>"), (Ids{304}));  // longest match at one position
  EXPECT_EQ(Encode(t, "<a><a>"), (Ids{303, 303}));
  EXPECT_EQ(Encode(t, "<|user"), BytesOf("<|user"));  // a prefix is just text
  // Text on either side is pre-tokenized on its own: " cat" before a special keeps its space.
  EXPECT_EQ(Encode(t, " cat<|user|> cat"), (Ids{260, 300, 260}));
}

TEST(Tokenizer, AddedTokensAreTextWithoutSpecialParsing) {
  const Tokenizer& t = Glm();
  EXPECT_EQ(Encode(t, "<|user|>", /*parse_special=*/false), BytesOf("<|user|>"));
  EXPECT_EQ(Encode(t, "<think>", false), (Ids{'<', 256, 'i', 'n', 'k', '>'}));  // "th" merges as text
  const std::string text = "a<|user|>b<a><b>";
  EXPECT_EQ(t.Decode(Encode(t, text, false)), text);
}

TEST(Tokenizer, IllFormedUtf8IsEncodedByteByByte) {
  const Tokenizer& t = Glm();
  EXPECT_EQ(Encode(t,
                   "a\xFF"
                   "b"),
            (Ids{'a', 0xFF, 'b'}));
  EXPECT_EQ(Encode(t, "\xE4\xBD"), (Ids{267}));  // the cut character still merges within its piece
  EXPECT_EQ(Encode(t, "\xC0\x80 cat"), (Ids{0xC0, 0x80, 260}));
}

TEST(Tokenizer, ArbitraryBytesRoundTrip) {
  const Tokenizer& t = Glm();
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const std::string bytes = RandomBytes(seed, 64 + 97 * seed);
    EXPECT_EQ(t.Decode(Encode(t, bytes, false)), bytes) << "seed " << seed;
    // With special parsing the text has no added token in it (random bytes), so the ids agree.
    EXPECT_EQ(Encode(t, bytes, true), Encode(t, bytes, false));
  }
}

TEST(Tokenizer, DecodeSkipsSpecialsAndUnknownIds) {
  const Tokenizer& t = Glm();
  const Ids ids = {300, 257, 302, 299, -5, 1 << 20, 301};
  EXPECT_EQ(t.Decode(ids), "<|user|>the<think><|assistant|>");
  EXPECT_EQ(t.Decode(ids, /*skip_special=*/true), "the<think>");
}

TEST(Tokenizer, MergesMayBePairs) {
  Tokenizer t = MakeTokenizer(FixtureJson(GlmPreTokenizer(), /*merges_as_pairs=*/true));
  EXPECT_EQ(Encode(t, "the cat"), (Ids{257, 260}));
}

TEST(Tokenizer, ByteLevelWithRegexSplitsLikeGpt2) {
  Json json = FixtureJson({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}});
  Tokenizer t = MakeTokenizer(json);
  EXPECT_EQ(t.pre_tokenizer_patterns(), std::vector<std::string>{std::string(kGpt2PreTokenizerRegex)});
  // GPT-2 keeps a digit run together, so "3 4" can merge across what GLM would split.
  EXPECT_EQ(Encode(t, "12345"), (Ids{'1', '2', 264, '5'}));
  EXPECT_EQ(Encode(t, "the cat"), (Ids{257, 260}));
}

TEST(Tokenizer, IgnoreMergesEmitsWholeVocabularyWords) {
  Json json = FixtureJson(GlmPreTokenizer());
  // "abc" is in the vocabulary but no merge path builds it ("b c" goes first, and there is no "a bc").
  json["model"]["vocab"]["abc"] = 290;
  Tokenizer plain = MakeTokenizer(json);
  EXPECT_EQ(Encode(plain, "abc"), (Ids{'a', 262}));
  json["model"]["ignore_merges"] = true;
  Tokenizer ignoring = MakeTokenizer(json);
  EXPECT_EQ(Encode(ignoring, "abc"), (Ids{290}));
}

TEST(Tokenizer, LoadsFromDirectoryOrFile) {
  const std::string dir = testing::MakeTempDir("tokenizer");
  ASSERT_OK(WriteFileAtomic(JoinPath(dir, "tokenizer.json"), FixtureJson(GlmPreTokenizer()).dump()));
  ASSERT_OK_AND_ASSIGN(Tokenizer from_dir, Tokenizer::Load(dir));
  EXPECT_EQ(from_dir.vocab_size(), 305);
  ASSERT_OK_AND_ASSIGN(Tokenizer from_file, Tokenizer::Load(JoinPath(dir, "tokenizer.json")));
  EXPECT_EQ(from_file.source(), JoinPath(dir, "tokenizer.json"));
  EXPECT_ERROR_CONTAINS(Tokenizer::Load(JoinPath(dir, "missing")), "missing");
}

// Each malformed file gives an error naming the file and the offending entry.
TEST(Tokenizer, RefusesMalformedFiles) {
  auto load = [](const Json& json) { return Tokenizer::FromJson(json.dump(), "bad.json"); };
  const Json good = FixtureJson(GlmPreTokenizer());

  EXPECT_ERROR_CONTAINS(Tokenizer::FromJson("{\"model\": ", "bad.json"), "bad.json: not valid JSON");
  EXPECT_ERROR_CONTAINS(Tokenizer::FromJson("[1, 2]", "bad.json"), "expected a JSON object");
  Json j = good;
  j["model"]["type"] = "WordPiece";
  EXPECT_ERROR_CONTAINS(load(j), "bad.json: model.type is \"WordPiece\"");
  j = good;
  j["model"].erase("type");
  EXPECT_ERROR_CONTAINS(load(j), "model.type is missing");
  j = good;
  j["model"]["merges"].push_back("Ġ zz");
  EXPECT_ERROR_CONTAINS(load(j), "model.merges[14] \"Ġ zz\" refers to \"zz\", which is not in model.vocab");
  j = good;
  j["model"]["merges"].push_back("c a");
  EXPECT_ERROR_CONTAINS(load(j), "makes \"ca\", which is not in model.vocab");
  j = good;
  j["model"]["merges"].push_back("t h");
  EXPECT_ERROR_CONTAINS(load(j), "model.merges[14] \"t h\" repeats an earlier merge");
  j = good;
  j["model"]["merges"].push_back("a b c");
  EXPECT_ERROR_CONTAINS(load(j), "expected \"left right\" with one space");
  j = good;
  j["model"]["merges"].push_back(7);
  EXPECT_ERROR_CONTAINS(load(j), "model.merges[14] is 7");
  j = good;
  j["model"]["vocab"]["zz"] = 97;
  EXPECT_ERROR_CONTAINS(load(j), "to id 97; ids must be unique");
  j = good;
  j["model"]["vocab"]["zz"] = kMaxTokenizerVocabSize;
  EXPECT_ERROR_CONTAINS(load(j), "model.vocab[\"zz\"] is 2097152; expected an id in [0, 2097152)");
  j = good;
  j["model"]["vocab"]["zz"] = -1;
  EXPECT_ERROR_CONTAINS(load(j), "model.vocab[\"zz\"] is -1");
  j = good;
  j["model"]["vocab"]["zz"] = "1";
  EXPECT_ERROR_CONTAINS(load(j), "model.vocab[\"zz\"] is \"1\"");
  j = good;
  j["model"]["vocab"].erase("Ġ");
  EXPECT_ERROR_CONTAINS(load(j), "lacks the token for byte 0x20");
  j = good;
  j["model"]["dropout"] = 0.1;
  EXPECT_ERROR_CONTAINS(load(j), "BPE dropout is not implemented");
  j = good;
  j["model"]["byte_fallback"] = true;
  EXPECT_ERROR_CONTAINS(load(j), "byte_fallback");
  j = good;
  j["added_tokens"].push_back({{"id", 97}, {"content", "<x>"}, {"special", true}});
  EXPECT_ERROR_CONTAINS(load(j), "added_tokens[5] \"<x>\" has id 97, which model.vocab gives to \"a\"");
  j = good;
  j["added_tokens"].push_back({{"id", 310}, {"content", "<|user|>"}, {"special", true}});
  EXPECT_ERROR_CONTAINS(load(j), "added_tokens[5] \"<|user|>\" appears twice");
  j = good;
  j["added_tokens"].push_back({{"id", 300}, {"content", "<y>"}, {"special", true}});
  EXPECT_ERROR_CONTAINS(load(j), "reuses id 300");
  j = good;
  j["added_tokens"].push_back({{"id", 310}, {"content", ""}});
  EXPECT_ERROR_CONTAINS(load(j), "added_tokens[5].content is \"\"");
  j = good;
  j["added_tokens"][0]["lstrip"] = true;
  EXPECT_ERROR_CONTAINS(load(j), "added_tokens[0] (\"<|user|>\") has lstrip: true");
  j = good;
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_ERROR_CONTAINS(load(j), "normalizer {\"type\":\"NFC\"} is not implemented");
  j = good;
  j["decoder"] = {{"type", "Metaspace"}};
  EXPECT_ERROR_CONTAINS(load(j), "decoder");
  j = good;
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_ERROR_CONTAINS(load(j), "pre_tokenizer step 0 (Whitespace) is not implemented");
  j = good;
  j["pre_tokenizer"] = nullptr;
  EXPECT_ERROR_CONTAINS(load(j), "pre_tokenizer is missing");
  j = good;
  j["pre_tokenizer"] = j["pre_tokenizer"]["pretokenizers"][0];
  EXPECT_ERROR_CONTAINS(load(j), "no ByteLevel step");
  j = good;
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithPrevious";
  EXPECT_ERROR_CONTAINS(load(j), "behavior \"MergedWithPrevious\"");
  j = good;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  EXPECT_ERROR_CONTAINS(load(j), "bad.json: pre_tokenizer step 0 (Split): cannot compile the pre-tokenizer regex");
  j = good;
  std::swap(j["pre_tokenizer"]["pretokenizers"][0], j["pre_tokenizer"]["pretokenizers"][1]);
  EXPECT_ERROR_CONTAINS(load(j), "comes after ByteLevel");
  j = good;
  j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true;
  EXPECT_ERROR_CONTAINS(load(j), "add_prefix_space");
}

TEST(StreamingDecoder, HoldsBackASplitCharacter) {
  const Tokenizer& t = Glm();
  StreamingDecoder decoder(t);
  EXPECT_EQ(decoder.Push(257), "the");
  EXPECT_EQ(decoder.Push(0xE4), "");  // "你" = E4 BD A0 arrives one byte per token
  EXPECT_EQ(decoder.pending_bytes(), 1u);
  EXPECT_EQ(decoder.Push(0xBD), "");
  EXPECT_EQ(decoder.Push(0xA0), "你");
  EXPECT_EQ(decoder.pending_bytes(), 0u);
  EXPECT_EQ(decoder.Push(267), "");  // E4 BD as one token, then A0
  EXPECT_EQ(decoder.Push(0xA0), "你");
  EXPECT_EQ(decoder.Push(0xF0), "");  // 😀 = F0 9F 98 80
  EXPECT_EQ(decoder.Push(0x9F), "");
  EXPECT_EQ(decoder.Push(0x98), "");
  EXPECT_EQ(decoder.Push(0x80), "😀");
  EXPECT_EQ(decoder.Flush(), "");
}

TEST(StreamingDecoder, ReplacesBytesOnceTheyCannotComplete) {
  const Tokenizer& t = Glm();
  const std::string r(kReplacementCharacter);
  StreamingDecoder decoder(t);
  EXPECT_EQ(decoder.Push(0xFF), r);       // can never start a character
  EXPECT_EQ(decoder.Push(0xE4), "");      // might still complete
  EXPECT_EQ(decoder.Push('a'), r + "a");  // now it cannot
  EXPECT_EQ(decoder.Push(0xE4), "");
  EXPECT_EQ(decoder.Push(300), r + "<|user|>");
  EXPECT_EQ(decoder.Push(0xF0), "");
  EXPECT_EQ(decoder.Flush(), r);  // the stream ended mid-character
  EXPECT_EQ(decoder.pending_bytes(), 0u);
  StreamingDecoder skipping(t, /*skip_special=*/true);
  EXPECT_EQ(skipping.Push(300), "");
  EXPECT_EQ(skipping.Push(257), "the");
}

TEST(StreamingDecoder, MatchesWholeDecodeOnValidText) {
  const Tokenizer& t = Glm();
  const std::string text = "the cat 你好 😀 it's\n\n12345 <|user|>";
  const Ids ids = Encode(t, text);
  StreamingDecoder decoder(t);
  std::string streamed;
  for (int32_t id : ids) {
    std::string part = decoder.Push(id);
    EXPECT_TRUE(IsValidUtf8(part));
    streamed += part;
  }
  streamed += decoder.Flush();
  EXPECT_EQ(streamed, text);
}

// Long inputs must stay near-linear (a heap per word, no quadratic rescans). Prints the rate; the bound only
// catches a quadratic blow-up, which would take minutes.
TEST(Tokenizer, LongInputsEncodeQuickly) {
  const Tokenizer& t = Glm();
  std::string prose;
  while (prose.size() < 100000) prose += "the cat sat on the mat, 12345 times; it's 你好 😀\n\n  ";
  const std::vector<std::string> inputs = {prose, std::string(100000, ' '), std::string(100000, 'a'),
                                           std::string(100000, '7'), RandomBytes(3, 100000)};
  for (const auto& input : inputs) {
    auto start = std::chrono::steady_clock::now();
    Ids ids = Encode(t, input, false);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("encoded %zu bytes into %zu tokens in %.1f ms\n", input.size(), ids.size(), seconds * 1e3);
    EXPECT_EQ(t.Decode(ids), input);
    EXPECT_LT(seconds, 5.0);
  }
}

}  // namespace
}  // namespace glint
