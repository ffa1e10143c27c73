// An Earley recognizer over a Grammar: the independent reference the pushdown matcher (matcher.h) is tested
// against. It re-parses the whole text on every call (its chart grows with the text), so it is for tests only.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace glint::grammar {

struct EarleyResult {
  bool viable = false;    // `text` is a prefix of some sentence of the grammar
  bool complete = false;  // `text` is a sentence
};

EarleyResult EarleyRecognize(const Grammar& grammar, std::string_view text);

}  // namespace glint::grammar
