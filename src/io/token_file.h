// Token-sequence files: a JSON list of lists of token ids, as the golden `tokens.json` (`glint score`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace glint {

// Errors name the file, the sequence and the entry. Ids must be in [0, vocab_size) when vocab_size > 0.
Result<std::vector<std::vector<int32_t>>> ReadTokenSequences(const std::string& path, int64_t vocab_size = 0);
Result<std::vector<std::vector<int32_t>>> ParseTokenSequences(std::string_view json_text, std::string_view source,
                                                              int64_t vocab_size = 0);
// "1,2,3" or "1 2 3" → ids (`glint run --tokens`).
Result<std::vector<int32_t>> ParseTokenList(std::string_view text, int64_t vocab_size = 0);

}  // namespace glint
