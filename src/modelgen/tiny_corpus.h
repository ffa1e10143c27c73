// The English text the tiny default model's tokenizer is trained on (written for glint; a few KB of plain prose
// with numbers, punctuation, contractions, a little code and a few non-English words, so the trained merges cover
// what tests and demos type).
#pragma once

#include <string_view>

namespace glint {

std::string_view TinyTokenizerCorpus();

}  // namespace glint
