// Syntax tree of a parsed Jinja template (jinja_parser.cc builds it, jinja_interpreter.cc runs it).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace glint::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind : uint8_t {
    kLiteral,      // literal
    kName,         // name
    kList,         // operands = items
    kTuple,        // operands = items (a tuple is a list here; both are immutable)
    kDict,         // operands = key0, value0, key1, value1, ...
    kAttribute,    // operands[0] . name
    kSubscript,    // operands[0] [ operands[1] ]
    kSlice,        // operands[0] [ operands[1] : operands[2] : operands[3] ]; absent parts are null
    kCall,         // operands[0] ( operands[1..], keywords )
    kFilter,       // operands[0] | name ( operands[1..], keywords ); operands[0] is null in {% filter %}
    kTest,         // operands[0] is [not] name ( operands[1..], keywords )
    kNegate,       // - operands[0]
    kPlus,         // + operands[0]
    kNot,          // not operands[0]
    kBinary,       // operands[0] name operands[1], name ∈ + - * / // % **
    kCompare,      // operands[0] ops[0] operands[1] ops[1] ... (chained, as in Python)
    kAnd,          // operands[0] and operands[1]
    kOr,           // operands[0] or operands[1]
    kConditional,  // operands[0] if operands[1] else operands[2] (operands[2] null: undefined)
    kConcat,       // operands joined by ~
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> operands;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;  // kCompare: ==, !=, <, >, <=, >=, in, not in
  bool negated = false;          // kTest: `is not`
  int depth = 1;                 // height of this subtree (bounded by the parser: trees are destroyed recursively)
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind : uint8_t {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches (condition, body)...; else_body
    kFor,          // for targets in expr [if condition]: body; else: else_body
    kSet,          // set targets = expr, or set targets[0].attribute = expr
    kSetBlock,     // set targets[0] %} body {% endset
    kMacro,        // macro name(params = defaults) body
    kFilterBlock,  // filter expr %} body {% endfilter; expr is a filter chain whose innermost value is null
    kBreak,
    kContinue,
    kScope,  // a block that only groups its body ({% generation %})
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  ExprPtr expr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attribute;  // kSet on a namespace attribute
  ExprPtr condition;      // kFor filter
  std::string name;       // kMacro
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // [params.size()], null when the parameter has no default
};

}  // namespace glint::jinja
