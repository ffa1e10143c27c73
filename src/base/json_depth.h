// A nesting-depth check on JSON text, run before any JSON parser sees a file or a request body. nlohmann's parser
// accepts any depth, and code that walks or prints the result (dump(), error messages, template conversion)
// recurses once per level: 300,000 nested brackets would overflow the stack.
#pragma once

#include <string_view>

namespace glint {

// Nesting allowed in the files glint reads (configs, safetensors and container headers, tokenizer files): the
// real ones nest at most 6 levels.
inline constexpr int kMaxJsonFileDepth = 64;

// True when no array or object in `text` is nested more than `max_depth` levels (brackets inside strings do not
// count). One pass, no allocation; ill-formed text is left to the parser.
bool JsonDepthWithin(std::string_view text, int max_depth);

}  // namespace glint
