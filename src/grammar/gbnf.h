// GBNF (llama.cpp's grammar format) → Grammar. docs/server.md "Grammars" documents the accepted syntax:
//
//   root   ::= object                  # a rule per `name ::= ...`; `root` is the start (required)
//   object ::= "{" ws pair ("," ws pair)* "}"
//   pair   ::= [a-z]+ ":" ws ("true" | "false" | [0-9]+)
//   ws     ::= [ \t\n]*
//
// Elements: "literal" (escapes \n \r \t \\ \" \xHH \uHHHH), [class] / [^class] (ranges, the same escapes), `.`
// (any character), rule names ([A-Za-z0-9_-]+), ( ... ) groups, alternatives with |, postfix * + ? {n} {n,}
// {n,m}; `#` starts a comment to the end of the line. A rule may span lines; the next `name ::=` starts a new one.
#pragma once

#include <string_view>

#include "base/status.h"
#include "grammar/grammar.h"

namespace glint::grammar {

inline constexpr size_t kMaxGrammarTextBytes = 1 << 20;

Result<Grammar> ParseGbnf(std::string_view text);

}  // namespace glint::grammar
