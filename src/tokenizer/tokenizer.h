// Byte-level BPE tokenizer loaded from a HF `tokenizer.json` (the format GLM-5.3-Flash ships; model doc §11).
//
// What is implemented (anything else in the file is refused with an error naming the file and the field):
// - model: `BPE` with `vocab` (token → id) and `merges` ("a b" strings or [a, b] pairs; rank = position), optional
//   `ignore_merges`; no dropout, no subword prefix/suffix, no byte fallback.
// - pre_tokenizer: a `Split` with a `Regex` (or `String`) pattern and behaviour `Isolated` or `Removed`, and/or
//   a `ByteLevel` step (last), possibly inside a `Sequence`. `ByteLevel` with `use_regex: true` also splits with
//   GPT-2's regex, as HF does.
// - normalizer: none. decoder: `ByteLevel` or none. `post_processor` is ignored on purpose: glint never adds
//   tokens (no automatic BOS); the chat template writes `[gMASK]<sop>` itself.
// - added_tokens: split out of the text before pre-tokenization (leftmost, then longest match) when
//   `parse_special` is on; with it off they are ordinary text. `lstrip`/`rstrip`/`single_word` are refused.
//
// Tokens are byte strings: TokenText, TokenId and Decode work on raw bytes (" the", not "Ġthe"). Encode accepts
// any bytes, including ill-formed UTF-8 (which pre-tokenizes into pieces of their own and encodes byte by byte),
// so Decode(Encode(x)) == x for every x when parse_special is off. See docs/tokenizer.md.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"

namespace glint {

// Ids must be below this; real vocabularies are ≤ 262k. Bounds the per-id tables a malformed file can make us build.
inline constexpr int64_t kMaxTokenizerVocabSize = int64_t{1} << 21;

struct AddedToken {
  int32_t id = 0;
  std::string content;  // raw bytes, as matched in text
  bool special = false;
};

class Tokenizer {
 public:
  // `dir_or_file`: a model directory (reads DIR/tokenizer.json) or a tokenizer.json path.
  static Result<Tokenizer> Load(const std::string& dir_or_file);
  // Parses tokenizer.json text; `source` names it in error messages.
  static Result<Tokenizer> FromJson(std::string_view json_text, std::string_view source = "tokenizer.json");

  Tokenizer(Tokenizer&&) = default;
  Tokenizer& operator=(Tokenizer&&) = default;
  Tokenizer(const Tokenizer&) = delete;  // large tables: share by reference or pointer
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text` (any bytes). With `parse_special`, added tokens in the text (e.g. "<|user|>") become their
  // ids; without, they are encoded as text. Nothing is added at the start or end. Fails only when the regex
  // engine gives up (a pathological pattern from the file).
  Result<std::vector<int32_t>> Encode(std::string_view text, bool parse_special = true) const;
  // Encode with parse_special, except that an added token starting at one of `literal_positions` (ascending byte
  // offsets) is encoded as text: the server marks where client text had added-token strings, so a user's
  // "<|assistant|>" stays text while the template's own tokens are parsed (docs/server.md "Special tokens").
  Result<std::vector<int32_t>> EncodeWithLiterals(std::string_view text,
                                                  std::span<const size_t> literal_positions) const;
  // The byte length of the added token that Encode would match at `text[position]` (leftmost-longest), or 0.
  size_t AddedTokenLengthAt(std::string_view text, size_t position) const;
  // The longest token's byte length: a text of B bytes has at least ceil(B / max_token_bytes()) tokens, which
  // bounds a prompt's length before it is tokenized.
  size_t max_token_bytes() const { return max_token_bytes_; }

  // Concatenated raw bytes of the tokens (may be ill-formed UTF-8 when cut mid-character; use SanitizeUtf8 or
  // StreamingDecoder for display). Ids without a token (gaps, padding rows of the embedding, out of range)
  // contribute nothing, as in HF. `skip_special` drops special added tokens.
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The id of a token given by its raw bytes: added tokens first, then the BPE vocabulary.
  std::optional<int32_t> TokenId(std::string_view token) const;
  // Raw bytes of a token; empty for an id without a token.
  std::string_view TokenText(int32_t id) const;
  bool HasToken(int32_t id) const { return Flags(id) & kHasToken; }
  bool IsAdded(int32_t id) const { return Flags(id) & kAdded; }
  bool IsSpecial(int32_t id) const { return Flags(id) & kSpecial; }
  // One past the largest id of the file (BPE vocabulary and added tokens).
  int64_t vocab_size() const { return static_cast<int64_t>(id_bytes_.size()); }
  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }
  size_t num_merges() const { return merger_.num_merges(); }
  // The regexes applied in order (the file's Split patterns, then GPT-2's when ByteLevel has use_regex).
  std::vector<std::string> pre_tokenizer_patterns() const;
  const std::string& source() const { return source_; }
  // True when Decode(Encode(x, false)) == x for every byte string x: no pre-tokenizer step removes text.
  bool IsLossless() const { return lossless_; }

 private:
  friend class TokenizerLoader;
  Tokenizer() = default;

  enum : uint8_t { kHasToken = 1, kAdded = 2, kSpecial = 4 };
  uint8_t Flags(int32_t id) const {
    return (id >= 0 && id < static_cast<int32_t>(id_flags_.size())) ? id_flags_[id] : 0;
  }
  const AddedToken* AddedTokenAt(std::string_view text, size_t position) const;
  // Appends the ids of text that contains no added token.
  Status EncodePlain(std::string_view text, std::vector<int32_t>& out) const;

  struct PreTokenizerStep {
    SplitRegex regex;
    SplitBehavior behavior;
  };

  std::string source_;
  std::vector<std::string> id_bytes_;                   // [vocab_size] raw bytes of each id ("" for gaps)
  std::vector<uint8_t> id_flags_;                       // [vocab_size] kHasToken | kAdded | kSpecial
  std::unordered_map<std::string, int32_t> vocab_ids_;  // raw bytes → id, BPE vocabulary
  std::unordered_map<std::string, int32_t> added_ids_;  // raw bytes → id, added tokens
  std::vector<AddedToken> added_tokens_;                // in file order
  // For each first byte, indices into added_tokens_ of the tokens starting with it, longest first.
  std::array<std::vector<int32_t>, 256> added_by_first_byte_;
  std::vector<PreTokenizerStep> pre_tokenizer_;
  BpeMerger merger_;
  bool ignore_merges_ = false;  // a pre-token that is itself in the vocabulary is emitted whole (HF option)
  bool lossless_ = true;        // no pre-tokenizer step drops text (see IsLossless)
  size_t max_token_bytes_ = 1;  // the longest token (BPE or added), in bytes
};

// Turns a stream of token ids into text that is always valid UTF-8: a character split across tokens is held back
// until its last byte arrives; bytes that can no longer become a valid character are emitted as U+FFFD (one per
// maximal ill-formed subpart). Flush() ends the stream, replacing a held incomplete character by U+FFFD.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}

  // The text that `id` completes (possibly empty).
  std::string Push(int32_t id);
  std::string Flush();
  // Bytes held back (an incomplete character), for tests and diagnostics.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace glint
