#include "tokenizer/bpe_trainer.h"

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "tokenizer/byte_level.h"

namespace glint {
namespace {

using OrderedJson = nlohmann::ordered_json;

struct Word {
  std::vector<int32_t> symbols;  // token ids
  int64_t count;                 // occurrences in the corpus
};

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

Status CheckOptions(const BpeTrainerOptions& options) {
  if (options.vocab_size < 256 || options.vocab_size > kMaxTokenizerVocabSize) {
    return InvalidArgument("BPE vocab_size is ", options.vocab_size, "; expected 256 (the bytes) to ",
                           kMaxTokenizerVocabSize);
  }
  if (options.min_frequency < 1) return InvalidArgument("min_frequency must be at least 1");
  std::set<int32_t> ids;
  std::set<std::string> contents;
  for (const auto& token : options.special_tokens) {
    if (token.id < options.vocab_size || token.id >= kMaxTokenizerVocabSize) {
      return InvalidArgument("special token '", token.content, "' has id ", token.id, "; expected an id in [",
                             options.vocab_size, ", ", kMaxTokenizerVocabSize, ") above the BPE tokens");
    }
    if (token.content.empty()) return InvalidArgument("special token ", token.id, " has empty content");
    if (!ids.insert(token.id).second) return InvalidArgument("two special tokens have id ", token.id);
    if (!contents.insert(token.content).second) {
      return InvalidArgument("special token '", token.content, "' appears twice");
    }
  }
  return Status::Ok();
}

// The corpus's distinct pre-tokenized words as byte ids, with their counts, in byte order (deterministic ties).
Result<std::vector<Word>> CountWords(std::string_view corpus, const std::string& pre_tokenizer_regex) {
  GLINT_ASSIGN_OR_RETURN(SplitRegex regex, SplitRegex::Compile(pre_tokenizer_regex));
  std::vector<std::string_view> pieces;
  GLINT_RETURN_IF_ERROR(regex.Split(corpus, SplitBehavior::kIsolated, pieces));
  std::map<std::string_view, int64_t> word_counts;  // ordered: the word list, and so every tie, is deterministic
  for (std::string_view piece : pieces) ++word_counts[piece];
  std::vector<Word> words;
  words.reserve(word_counts.size());
  for (const auto& [text, count] : word_counts) {
    Word word{{}, count};
    for (char c : text) word.symbols.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(word));
  }
  return words;
}

// The most frequent adjacent pair (its key and count); ties go to the smallest key (left id, then right id),
// whatever the map's order. Count 0 when no word has two symbols.
std::pair<uint64_t, int64_t> MostFrequentPair(const std::vector<Word>& words,
                                              std::unordered_map<uint64_t, int64_t>& pair_counts) {
  pair_counts.clear();
  for (const Word& word : words) {
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      pair_counts[PairKey(word.symbols[i], word.symbols[i + 1])] += word.count;
    }
  }
  uint64_t best_key = 0;
  int64_t best_count = 0;
  for (const auto& [key, count] : pair_counts) {
    if (count > best_count || (count == best_count && key < best_key)) {
      best_key = key;
      best_count = count;
    }
  }
  return {best_key, best_count};
}

// Replaces every (left, right) in the words, left to right without overlap, by `merged`.
void ApplyMerge(int32_t left, int32_t right, int32_t merged, std::vector<Word>& words) {
  for (Word& word : words) {
    std::vector<int32_t>& s = word.symbols;
    size_t out = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
        s[out++] = merged;
        ++i;
      } else {
        s[out++] = s[i];
      }
    }
    s.resize(out);
  }
}

// The learnt vocabulary: each token's raw bytes by id, and the merges in rank order.
struct LearntBpe {
  std::vector<std::string> token_bytes;
  std::vector<std::pair<int32_t, int32_t>> merges;
};

LearntBpe LearnMerges(std::vector<Word> words, const BpeTrainerOptions& options) {
  LearntBpe bpe;
  std::vector<std::string>& token_bytes = bpe.token_bytes;
  std::unordered_map<std::string, int32_t> id_of_bytes;
  for (int b = 0; b < 256; ++b) {
    token_bytes.emplace_back(1, static_cast<char>(b));
    id_of_bytes.emplace(token_bytes.back(), b);
  }
  std::set<uint64_t> merged_pairs;
  std::unordered_map<uint64_t, int64_t> pair_counts;
  while (static_cast<int64_t>(token_bytes.size()) < options.vocab_size) {
    const auto [best_key, best_count] = MostFrequentPair(words, pair_counts);
    if (best_count < options.min_frequency) break;
    const int32_t left = static_cast<int32_t>(best_key >> 32);
    const int32_t right = static_cast<int32_t>(best_key & 0xffffffffu);
    const std::string merged_bytes = token_bytes[left] + token_bytes[right];
    int32_t merged;
    if (auto it = id_of_bytes.find(merged_bytes); it != id_of_bytes.end()) {
      merged = it->second;
    } else {
      merged = static_cast<int32_t>(token_bytes.size());
      token_bytes.push_back(merged_bytes);
      id_of_bytes.emplace(merged_bytes, merged);
    }
    // A pair can reappear after its merge when a later merge reuses an id (("ab","c") and ("a","bc") both make
    // "abc"). It is applied again, as Encode would (its earlier rank still holds), but not listed twice.
    if (merged_pairs.insert(best_key).second) bpe.merges.emplace_back(left, right);
    ApplyMerge(left, right, merged, words);
  }
  return bpe;
}

// tokenizer.json in Hugging Face's format: byte-level BPE behind the Split pre-tokenizer.
OrderedJson TokenizerJson(const LearntBpe& bpe, const BpeTrainerOptions& options) {
  OrderedJson vocab = OrderedJson::object();
  for (size_t id = 0; id < bpe.token_bytes.size(); ++id) vocab[ByteLevelEncode(bpe.token_bytes[id])] = id;
  OrderedJson merge_list = OrderedJson::array();
  for (const auto& [left, right] : bpe.merges) {
    merge_list.push_back({ByteLevelEncode(bpe.token_bytes[left]), ByteLevelEncode(bpe.token_bytes[right])});
  }
  OrderedJson added = OrderedJson::array();
  for (const auto& token : options.special_tokens) {
    added.push_back({{"id", token.id},
                     {"content", token.content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", token.special}});
  }
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         OrderedJson::array(
             {{{"type", "Split"},
               {"pattern", {{"Regex", options.pre_tokenizer_regex}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}})}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
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
        {"merges", merge_list}}}};
}

}  // namespace

Result<BpeTrainingResult> TrainByteLevelBpe(std::string_view corpus, const BpeTrainerOptions& options) {
  GLINT_RETURN_IF_ERROR(CheckOptions(options));
  GLINT_ASSIGN_OR_RETURN(std::vector<Word> words, CountWords(corpus, options.pre_tokenizer_regex));
  const LearntBpe bpe = LearnMerges(std::move(words), options);
  BpeTrainingResult result;
  result.tokenizer_json = TokenizerJson(bpe, options).dump(1) + "\n";
  result.num_merges = static_cast<int64_t>(bpe.merges.size());
  result.num_tokens = static_cast<int64_t>(bpe.token_bytes.size());
  return result;
}

}  // namespace glint
