// Random prompts of exact token lengths.
//
// glint bench has no tokenizer of its own (the bench layer is an HTTP client), so it asks the server: POST /tokenize
// and POST /detokenize (vLLM's endpoints; glint serves them too). The tokens come from a pool: the ids of a
// built-in list of common English words as the server encodes them; a prompt draws ids from the pool uniformly.
// Two ways to send a prompt (--prompt-format):
//   token-ids: the ids themselves as `prompt` (a list of ints, which vLLM and glint accept). Exact by construction.
//   text (default): the ids decoded to text, then the cut point adjusted until the server's own /tokenize of the
//     text (with the special tokens it adds to every prompt) counts exactly the requested length. Works with any
//     server that has /tokenize and /detokenize, and with chat.
// Why words rather than uniform ids over the whole vocabulary (what vLLM does with a local tokenizer): the client
// does not know the vocabulary, and ids that decode to partial UTF-8 do not survive the text round trip. The
// engine's cost depends on lengths, not on which ids it sees (except through MoE routing and speculative
// acceptance, which random ids do not model faithfully either).
//
// A local tokenizer (the tokenizer/ layer) can implement the same Tokenizer interface; it is not wired in yet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/http.h"
#include "bench/lengths.h"

namespace glint::bench {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // `add_special_tokens`: include the tokens the server adds to every prompt (BOS, GLM's [gMASK]<sop>).
  virtual Result<std::vector<int32_t>> Encode(const std::string& text, bool add_special_tokens) = 0;
  virtual Result<std::string> Decode(const std::vector<int32_t>& ids) = 0;
};

// The server's tokenizer through POST /tokenize {"model", "prompt", "add_special_tokens"} → {"tokens": [...]}
// and POST /detokenize {"model", "tokens"} → {"prompt": "..."}.
class ServerTokenizer final : public Tokenizer {
 public:
  ServerTokenizer(HttpClient& http, std::string model) : http_(http), model_(std::move(model)) {}
  Result<std::vector<int32_t>> Encode(const std::string& text, bool add_special_tokens) override;
  Result<std::string> Decode(const std::vector<int32_t>& ids) override;

 private:
  HttpClient& http_;
  std::string model_;
};

// The built-in word list the token pool is made from.
const std::vector<std::string>& PromptWords();

class PromptFactory {
 public:
  explicit PromptFactory(Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Draw token-ids prompts uniformly from [begin, end) instead of the word pool: no /tokenize call at all, so a
  // server whose tokenizer encodes nothing useful (a peer's placeholder, a random-weight model) can be measured.
  void UseIdRange(int64_t begin, int64_t end) {
    id_begin_ = begin;
    id_end_ = end;
  }

  // `count` ids drawn uniformly from the id range when one is set, else from the pool (built on first use with one
  // /tokenize call).
  Result<std::vector<int32_t>> RandomTokenIds(int64_t count, Rng& rng);

  // Text whose encoding has exactly `count` tokens, counting the special tokens the server adds when
  // `count_special_tokens` (a completion prompt) and not counting them otherwise (a chat message, whose template
  // adds its own). Searches the cut point of a random id sequence: decode the first k ids, encode, move k by the
  // difference; tries a few sequences, and fails with a message naming the closest length it reached.
  Result<std::string> ExactLengthText(int64_t count, bool count_special_tokens, Rng& rng);

  int64_t tokenizer_calls() const { return tokenizer_calls_; }

 private:
  Status EnsurePool();
  Result<int64_t> SpecialTokenCount();
  Result<int64_t> EncodedLength(const std::string& text, bool add_special_tokens);

  Tokenizer& tokenizer_;
  std::vector<int32_t> pool_;    // distinct ids, ascending (deterministic order for a given tokenizer)
  int64_t special_tokens_ = -1;  // tokens added to an empty prompt; -1 until measured
  int64_t tokenizer_calls_ = 0;
  int64_t id_begin_ = 0, id_end_ = 0;  // UseIdRange; empty when equal
};

}  // namespace glint::bench
