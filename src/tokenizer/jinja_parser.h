// Parser of the Jinja subset: tokens (jinja_lexer.h) → syntax tree (jinja_ast.h).
//
// Statements: if/elif/else, for (tuple targets, `if` filter, else, loop.*), set (names, tuples, namespace
// attributes, block form), macro (parameters with defaults), filter blocks, break/continue, generation (a no-op
// scope HF templates use for assistant masks). Expressions follow jinja2's precedence: conditional < or < and <
// not < comparison (chained, in, not in) < + - < ~ < * / // % < ** < unary - + < filters (|), tests (is), calls,
// attributes and subscripts (slices too); literals: strings, ints, floats, true/false/none (any case),
// lists, tuples, dicts. Anything else (include, import, extends, block, call, with, *args) is refused with an error
// that names the construct and the line.
#pragma once

#include <string_view>

#include "base/status.h"
#include "tokenizer/jinja_ast.h"

namespace glint::jinja {

// Nesting deeper than this (statements inside statements, or expressions inside expressions) is an error, so a
// hostile template cannot exhaust the stack.
inline constexpr int kMaxNestingDepth = 128;

Result<Body> Parse(std::string_view source);

}  // namespace glint::jinja
