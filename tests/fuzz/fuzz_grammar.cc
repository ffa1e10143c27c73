// libFuzzer target: the GBNF parser and the regex compiler (src/grammar/gbnf.cc, regex.cc). The first byte picks
// GBNF, a full-match regex or a JSON-string `pattern`; the rest is the text. It must compile or be refused, never
// crash or hang; a compiled grammar is walked with masks checked against the reference (grammar_walk.h).
#include <cstdint>
#include <string_view>

#include "grammar/gbnf.h"
#include "grammar/regex.h"
#include "grammar_walk.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  glint::grammar::Grammar g;
  if (data[0] % 3 == 0) {
    auto parsed = glint::grammar::ParseGbnf(text);
    if (!parsed.ok()) return 0;
    g = std::move(parsed).value();
  } else {
    glint::grammar::RegexOptions options;
    options.full_match = data[0] % 3 == 1;
    options.json_string = data[0] % 3 == 2;
    auto rule = glint::grammar::AddRegex(g, text, options);
    if (!rule.ok()) return 0;
    g.set_root(rule.value());
  }
  auto compiled = glint::grammar::CompiledGrammar::Compile(g);
  if (!compiled.ok()) return 0;
  glint::fuzz::WalkAndCheck(compiled.value(), data[0], 10);
  return 0;
}
