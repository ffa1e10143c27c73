// The tokenizer files of a tiny checkpoint: tokenizer.json (trained on TinyTokenizerCorpus with GLM's special
// tokens at the release's distance from the end of the vocabulary) and tokenizer_config.json (special tokens and
// a chat template in GLM's format, model doc §11).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace glint {

// A Jinja chat template in GLM-5.3's format (written for glint from the format described in model doc §11, not a
// copy of the official file): `[gMASK]<sop>`, a `<|system|>Reasoning Effort: Max` line (variable
// `reasoning_effort`: Low, High or Max), then each message as `<|system|>`/`<|user|>`/`<|assistant|>` + text with
// no separators; assistant turns as `<think>reasoning</think>answer` (`clear_thinking` drops old reasoning); tool
// schemas in a `<tools>` system block, calls as `<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>
// </tool_call>`, results as `<|observation|><tool_response>…</tool_response>`; with `add_generation_prompt`,
// `<|assistant|><think>` (and `</think>` right away when `enable_thinking` is false).
std::string_view GlmChatTemplate();

struct TinyTokenizerFiles {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
  int64_t num_merges = 0;
};

// `vocab_size`: the model's embedding rows; the BPE tokens take ids below the first special (vocab_size − 60).
Result<TinyTokenizerFiles> MakeTinyTokenizerFiles(int64_t vocab_size);

}  // namespace glint
