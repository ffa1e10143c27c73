#include "grammar/synthetic_vocabulary.h"

#include <algorithm>
#include <array>
#include <random>
#include <unordered_set>

#include "grammar/grammar.h"

namespace glint::grammar {
namespace {

// Collects distinct non-empty byte strings up to a capacity.
class Pieces {
 public:
  explicit Pieces(size_t capacity) : capacity_(capacity) {}
  bool full() const { return list_.size() >= capacity_; }
  void Add(const std::string& piece) {
    if (!piece.empty() && !full() && seen_.insert(piece).second) list_.push_back(piece);
  }
  std::vector<std::string> Take() { return std::move(list_); }

 private:
  size_t capacity_;
  std::unordered_set<std::string> seen_;
  std::vector<std::string> list_;
};

// Raw mt19937 draws (distributions are implementation-defined; these are the same everywhere).
uint32_t Pick(std::mt19937& random, uint32_t n) { return static_cast<uint32_t>(random() % n); }

std::string PseudoWord(std::mt19937& random) {
  static const std::array<const char*, 31> kOnsets = {"",   "b",  "c",  "d",  "f",  "g",  "h",  "j",  "k", "l",  "m",
                                                      "n",  "p",  "r",  "s",  "t",  "v",  "w",  "y",  "z", "ch", "sh",
                                                      "th", "st", "tr", "pr", "br", "cl", "gr", "pl", "qu"};
  static const std::array<const char*, 10> kVowels = {"a", "e", "i", "o", "u", "ai", "ea", "ou", "io", "ee"};
  static const std::array<const char*, 11> kCodas = {"", "n", "r", "s", "t", "l", "m", "nd", "ng", "st", "ck"};
  std::string word;
  const uint32_t syllables = 1 + Pick(random, 4);
  for (uint32_t s = 0; s < syllables; ++s) {
    word += kOnsets[Pick(random, kOnsets.size())];
    word += kVowels[Pick(random, kVowels.size())];
    word += kCodas[Pick(random, kCodas.size())];
  }
  return word.substr(0, 14);
}

std::string Cased(std::string word, uint32_t casing) {
  if (casing == 1 && !word.empty()) word[0] = static_cast<char>(word[0] - 'a' + 'A');
  if (casing == 2) std::transform(word.begin(), word.end(), word.begin(), [](char c) { return c - 'a' + 'A'; });
  return word;
}

std::string CodePoints(std::mt19937& random, uint32_t lo, uint32_t hi, int count) {
  std::string text;
  for (int i = 0; i < count; ++i) text += EncodeUtf8(lo + Pick(random, hi - lo + 1));
  return text;
}

void AddPunctuation(Pieces& pieces) {
  for (const char* piece :
       {"{\"",       "\"}",   "\":",      "\": \"",  "\", \"", "\",",     "\",\"",   "\":\"",    "},",       "}]",
        "]}",        "[{",    "[]",       "{}",      "\":{\"", "\":[",    "\"]",     "\"],",     "\n",       "\n\n",
        "  ",        "    ",  "        ", "\t",      "\t\t",   "\n  ",    "\n    ",  "\n  \"",   "\n    \"", "\"\n",
        "},\n",      "}\n",   "]\n",      "://",     "...",    "--",      "==",      "->",       "=>",       "</",
        "/>",        "\\n",   "\\\"",     "\\u",     "\\\\",   "0.",      ".0",      "e-",       "e+",       "null",
        "true",      "false", " null",    " true",   " false", "\":null", "\":true", "\":false", "\": null", "\": true",
        "\": false", "\": [", "\": {",    "\": {\"", ", ",     ",\n",     ";",       "();",      "()",       "[\"",
        "\"]}",      "\"}]",  "\"},",     "\"},{\"", "}}",     "]]",      "]],",     "}},",      " {",       " [",
        " \"",       " -",    " (",       " )",      "'s",     "n't",     "'re",     "'ll",      "?\"",      "!\"",
        ".\"",       ".\n",   ",\"",      " =",      " +",     " *",      " /",      " <",       " >"}) {
    pieces.Add(piece);
  }
  for (int n = 0; n < 1000; ++n) pieces.Add(std::to_string(n));
  for (int n = 0; n < 100; ++n) {
    pieces.Add(" " + std::to_string(n));
    pieces.Add((n < 10 ? "0" : "") + std::to_string(n));
    pieces.Add("-" + std::to_string(n));
    pieces.Add("." + std::to_string(n));
  }
}

void AddUnicode(Pieces& pieces, std::mt19937& random) {
  for (int i = 0; i < 6000; ++i) pieces.Add(CodePoints(random, 0x4E00, 0x9FFF, 1));  // CJK characters
  for (int i = 0; i < 4000; ++i) pieces.Add(CodePoints(random, 0x4E00, 0x9FFF, 2));  // and pairs
  for (int i = 0; i < 800; ++i) pieces.Add(CodePoints(random, 0x3041, 0x30FF, 1 + static_cast<int>(Pick(random, 3))));
  for (int i = 0; i < 3000; ++i) {  // Cyrillic words, mostly space-prefixed
    pieces.Add((Pick(random, 4) != 0 ? " " : "") +
               CodePoints(random, 0x0430, 0x044F, 2 + static_cast<int>(Pick(random, 6))));
  }
  static const std::array<uint32_t, 12> kAccents = {0xE9, 0xE8, 0xEA, 0xE0, 0xE2, 0xF4,
                                                    0xFC, 0xF6, 0xE4, 0xF1, 0xE7, 0xDF};
  for (int i = 0; i < 2000; ++i) {  // Latin words with an accented letter
    std::string word = PseudoWord(random);
    word.insert(Pick(random, static_cast<uint32_t>(word.size()) + 1),
                EncodeUtf8(kAccents[Pick(random, kAccents.size())]));
    pieces.Add((Pick(random, 2) != 0 ? " " : "") + word);
  }
  for (uint32_t emoji = 0x1F600; emoji <= 0x1F64F; ++emoji) {
    pieces.Add(EncodeUtf8(emoji));
    pieces.Add(" " + EncodeUtf8(emoji));
  }
  // Pieces of characters, as byte-level BPE learns them: a lead byte with some of its continuation bytes, and runs of
  // continuation bytes.
  for (int i = 0; i < 1500; ++i) {
    const std::string character = CodePoints(random, 0x0800, 0xFFFF, 1);
    if (character.size() == 3 && !(static_cast<uint8_t>(character[0]) == 0xED)) pieces.Add(character.substr(0, 2));
    const std::string wide = CodePoints(random, 0x10000, 0x1FFFF, 1);
    pieces.Add(wide.substr(0, 2 + Pick(random, 2)));
    pieces.Add(character.substr(1));
  }
}

void AddWords(Pieces& pieces, std::mt19937& random, size_t until) {
  static const std::array<const char*, 8> kPrefixes = {" ", " ", " ", "", "", "\"", "_", "."};
  while (pieces.full() == false && until > 0) {
    const std::string word = Cased(PseudoWord(random), Pick(random, 10) < 7 ? 0 : (Pick(random, 4) != 0 ? 1 : 2));
    pieces.Add(kPrefixes[Pick(random, kPrefixes.size())] + word);
    --until;
  }
}

}  // namespace

SyntheticVocabulary MakeSyntheticVocabulary(int64_t size) {
  static const std::array<const char*, 16> kSpecial = {"<|endoftext|>", "[MASK]",          "[gMASK]",    "[sMASK]",
                                                       "<sop>",         "<eop>",           "<|system|>", "<|user|>",
                                                       "<|assistant|>", "<|observation|>", "<think>",    "</think>",
                                                       "<tool_call>",   "</tool_call>",    "<arg_key>",  "</arg_key>"};
  const size_t text_tokens = static_cast<size_t>(std::max<int64_t>(size, 512)) - kSpecial.size();
  std::mt19937 random(20260);
  Pieces pieces(text_tokens);
  for (int b = 0; b < 256; ++b) pieces.Add(std::string(1, static_cast<char>(b)));
  AddPunctuation(pieces);
  AddWords(pieces, random, text_tokens / 4);  // common words before the long tail of characters
  AddUnicode(pieces, random);
  AddWords(pieces, random, SIZE_MAX);
  SyntheticVocabulary vocabulary;
  vocabulary.token_bytes = pieces.Take();
  vocabulary.special.assign(vocabulary.token_bytes.size(), false);
  for (const char* special : kSpecial) {
    const std::string text = special;
    if (text == "<|endoftext|>" || text == "<|user|>" || text == "<|observation|>") {
      vocabulary.end_ids.push_back(static_cast<int32_t>(vocabulary.token_bytes.size()));
    }
    vocabulary.token_bytes.push_back(text);
    vocabulary.special.push_back(true);
  }
  return vocabulary;
}

}  // namespace glint::grammar
