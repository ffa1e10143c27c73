#include "tokenizer/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "tokenizer/jinja_lexer.h"

namespace glint::jinja {
namespace {

bool IsKeywordLiteral(const std::string& name, Value& value) {
  if (name == "true" || name == "True") {
    value = Value(true);
  } else if (name == "false" || name == "False") {
    value = Value(false);
  } else if (name == "none" || name == "None") {
    value = Value::None();
  } else {
    return false;
  }
  return true;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Result<Body> ParseTemplate() {
    std::string end_tag;
    GLINT_ASSIGN_OR_RETURN(Body body, ParseBody({}, end_tag));
    return body;
  }

 private:
  const Token& Peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& Next() {
    const Token& token = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }
  bool IsOperator(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kOperator && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kName && Peek(ahead).text == name;
  }
  bool AcceptOperator(std::string_view op) {
    if (!IsOperator(op)) return false;
    Next();
    return true;
  }
  bool AcceptName(std::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  static std::string Describe(const Token& token) {
    switch (token.kind) {
      case TokenKind::kText:
        return "text";
      case TokenKind::kVariableBegin:
        return "'{{'";
      case TokenKind::kVariableEnd:
        return "'}}'";
      case TokenKind::kBlockBegin:
        return "'{%'";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kName:
        return "'" + token.text + "'";
      case TokenKind::kString:
        return "a string";
      case TokenKind::kInteger:
      case TokenKind::kFloat:
        return "a number";
      case TokenKind::kOperator:
        return "'" + token.text + "'";
      case TokenKind::kEnd:
        return "the end of the template";
    }
    return "?";
  }

  Status ErrorAt(const Token& token, std::string_view what) const {
    return InvalidArgument("template line ", token.line, ": ", what);
  }
  Status Unexpected(std::string_view expected) const {
    return ErrorAt(Peek(), StrCat("expected ", expected, ", found ", Describe(Peek())));
  }
  Status ExpectOperator(std::string_view op) {
    if (AcceptOperator(op)) return Status::Ok();
    return Unexpected(StrCat("'", op, "'"));
  }
  Status ExpectBlockEnd() {
    if (Peek().kind == TokenKind::kBlockEnd) {
      Next();
      return Status::Ok();
    }
    return Unexpected("'%}'");
  }
  Result<std::string> ExpectName(std::string_view what) {
    if (Peek().kind != TokenKind::kName) return Unexpected(what);
    return Next().text;
  }

  // Nesting guard for statements and expressions.
  struct DepthGuard {
    explicit DepthGuard(int& depth) : depth_(depth) { ++depth_; }
    ~DepthGuard() { --depth_; }
    int& depth_;
  };
  Status CheckDepth() const {
    if (depth_ > kMaxNestingDepth) {
      return ErrorAt(Peek(), StrCat("nested more than ", kMaxNestingDepth, " levels deep"));
    }
    return Status::Ok();
  }

  // Parses nodes until a `{% name` with name in `end_tags` (consumed up to and including the name, which is
  // stored in `end_tag`) or the end of the template (an error when end tags were expected).
  Result<Body> ParseBody(std::initializer_list<std::string_view> end_tags, std::string& end_tag) {
    DepthGuard guard(depth_);
    GLINT_RETURN_IF_ERROR(CheckDepth());
    Body body;
    while (true) {
      const Token& token = Peek();
      switch (token.kind) {
        case TokenKind::kText: {
          auto node = std::make_unique<Node>();
          node->kind = Node::Kind::kText;
          node->line = token.line;
          node->text = Next().text;
          body.push_back(std::move(node));
          break;
        }
        case TokenKind::kVariableBegin: {
          auto node = std::make_unique<Node>();
          node->kind = Node::Kind::kOutput;
          node->line = Next().line;
          GLINT_ASSIGN_OR_RETURN(node->expr, ParseTupleOrExpression());
          if (Peek().kind != TokenKind::kVariableEnd) return Unexpected("'}}'");
          Next();
          body.push_back(std::move(node));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& name = Peek(1);
          if (name.kind == TokenKind::kName &&
              std::find(end_tags.begin(), end_tags.end(), name.text) != end_tags.end()) {
            Next();
            end_tag = Next().text;
            return body;
          }
          Next();
          GLINT_ASSIGN_OR_RETURN(NodePtr node, ParseStatement());
          if (node) body.push_back(std::move(node));
          break;
        }
        case TokenKind::kEnd: {
          if (end_tags.size() == 0) return body;
          std::string expected;
          for (std::string_view tag : end_tags) expected += StrCat(expected.empty() ? "" : " or ", "{% ", tag, " %}");
          return ErrorAt(token, StrCat("the template ended where ", expected, " was expected"));
        }
        default:
          return ErrorAt(token, StrCat("unexpected ", Describe(token)));
      }
    }
  }

  Result<NodePtr> ParseStatement() {
    const Token& keyword = Peek();
    if (keyword.kind != TokenKind::kName) return Unexpected("a statement name after '{%'");
    const std::string name = Next().text;
    auto node = std::make_unique<Node>();
    node->line = keyword.line;
    if (name == "if") return ParseIf(std::move(node));
    if (name == "for") return ParseFor(std::move(node));
    if (name == "set") return ParseSet(std::move(node));
    if (name == "macro") return ParseMacro(std::move(node));
    if (name == "filter") return ParseFilterBlock(std::move(node));
    if (name == "generation") {
      node->kind = Node::Kind::kScope;
      GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
      std::string end_tag;
      GLINT_ASSIGN_OR_RETURN(node->body, ParseBody({"endgeneration"}, end_tag));
      GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return ErrorAt(keyword, StrCat("{% ", name, " %} outside a for loop"));
      node->kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
    static constexpr std::string_view kUnsupported[] = {"include", "import", "from",       "extends", "block",
                                                        "call",    "with",   "autoescape", "do",      "trans"};
    if (std::find(std::begin(kUnsupported), std::end(kUnsupported), name) != std::end(kUnsupported)) {
      return ErrorAt(keyword, StrCat("{% ", name, " %} is not supported by glint's chat-template interpreter"));
    }
    return ErrorAt(keyword, StrCat("unknown statement {% ", name, " %}"));
  }

  Result<NodePtr> ParseIf(NodePtr node) {
    node->kind = Node::Kind::kIf;
    while (true) {
      GLINT_ASSIGN_OR_RETURN(ExprPtr condition, ParseTupleOrExpression());
      GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
      std::string end_tag;
      GLINT_ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}, end_tag));
      node->branches.emplace_back(std::move(condition), std::move(body));
      if (end_tag == "elif") continue;
      if (end_tag == "else") {
        GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
        GLINT_ASSIGN_OR_RETURN(node->else_body, ParseBody({"endif"}, end_tag));
      }
      GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
  }

  Result<std::vector<std::string>> ParseTargets() {
    std::vector<std::string> targets;
    const bool parenthesized = AcceptOperator("(");
    while (true) {
      GLINT_ASSIGN_OR_RETURN(std::string target, ExpectName("a variable name"));
      Value ignored;
      if (IsKeywordLiteral(target, ignored)) return ErrorAt(Peek(), StrCat("cannot assign to '", target, "'"));
      targets.push_back(std::move(target));
      if (!AcceptOperator(",")) break;
      if (Peek().kind != TokenKind::kName) break;  // trailing comma
    }
    if (parenthesized) GLINT_RETURN_IF_ERROR(ExpectOperator(")"));
    return targets;
  }

  Result<NodePtr> ParseFor(NodePtr node) {
    node->kind = Node::Kind::kFor;
    GLINT_ASSIGN_OR_RETURN(node->targets, ParseTargets());
    if (!AcceptName("in")) return Unexpected("'in'");
    GLINT_ASSIGN_OR_RETURN(node->expr, ParseTupleOrExpression(/*with_condition=*/false));
    if (AcceptName("if")) {
      GLINT_ASSIGN_OR_RETURN(node->condition, ParseExpression(/*with_condition=*/true));
    }
    if (IsName("recursive")) return ErrorAt(Peek(), "recursive for loops are not supported");
    GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end_tag;
    ++loop_depth_;
    auto body = ParseBody({"else", "endfor"}, end_tag);
    --loop_depth_;
    if (!body.ok()) return body.status();
    node->body = std::move(body).value();
    if (end_tag == "else") {
      GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
      GLINT_ASSIGN_OR_RETURN(node->else_body, ParseBody({"endfor"}, end_tag));
    }
    GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }

  Result<NodePtr> ParseSet(NodePtr node) {
    GLINT_ASSIGN_OR_RETURN(std::string first, ExpectName("a variable name after 'set'"));
    if (AcceptOperator(".")) {
      node->kind = Node::Kind::kSet;
      node->targets.push_back(std::move(first));
      GLINT_ASSIGN_OR_RETURN(node->attribute, ExpectName("an attribute name"));
      GLINT_RETURN_IF_ERROR(ExpectOperator("="));
      GLINT_ASSIGN_OR_RETURN(node->expr, ParseTupleOrExpression());
      GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
    node->targets.push_back(std::move(first));
    while (AcceptOperator(",")) {
      if (Peek().kind != TokenKind::kName) break;
      node->targets.push_back(Next().text);
    }
    if (Peek().kind == TokenKind::kBlockEnd && node->targets.size() == 1) {
      Next();
      node->kind = Node::Kind::kSetBlock;
      std::string end_tag;
      GLINT_ASSIGN_OR_RETURN(node->body, ParseBody({"endset"}, end_tag));
      GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
      return node;
    }
    node->kind = Node::Kind::kSet;
    GLINT_RETURN_IF_ERROR(ExpectOperator("="));
    GLINT_ASSIGN_OR_RETURN(node->expr, ParseTupleOrExpression());
    GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }

  Result<NodePtr> ParseMacro(NodePtr node) {
    node->kind = Node::Kind::kMacro;
    GLINT_ASSIGN_OR_RETURN(node->name, ExpectName("a macro name"));
    GLINT_RETURN_IF_ERROR(ExpectOperator("("));
    while (!AcceptOperator(")")) {
      if (!node->params.empty()) GLINT_RETURN_IF_ERROR(ExpectOperator(","));
      if (AcceptOperator(")")) break;  // trailing comma
      GLINT_ASSIGN_OR_RETURN(std::string param, ExpectName("a parameter name"));
      node->params.push_back(std::move(param));
      ExprPtr default_value;
      if (AcceptOperator("=")) {
        GLINT_ASSIGN_OR_RETURN(default_value, ParseExpression(true));
      }
      node->defaults.push_back(std::move(default_value));
    }
    GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end_tag;
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;  // break/continue do not cross a macro boundary
    auto body = ParseBody({"endmacro"}, end_tag);
    loop_depth_ = saved_loop_depth;
    if (!body.ok()) return body.status();
    node->body = std::move(body).value();
    if (Peek().kind == TokenKind::kName && Peek().text == node->name) Next();  // {% endmacro name %}
    GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }

  Result<NodePtr> ParseFilterBlock(NodePtr node) {
    node->kind = Node::Kind::kFilterBlock;
    ExprPtr chain;  // innermost value: null (the block's output)
    do {
      GLINT_ASSIGN_OR_RETURN(chain, ParseFilter(std::move(chain)));
    } while (AcceptOperator("|"));
    node->expr = std::move(chain);
    GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end_tag;
    GLINT_ASSIGN_OR_RETURN(node->body, ParseBody({"endfilter"}, end_tag));
    GLINT_RETURN_IF_ERROR(ExpectBlockEnd());
    return node;
  }

  // ---- Expressions ----

  // Records the height of `node` from its (already sealed) children and refuses trees taller than the limit:
  // chains like a+b+c+… are built by loops, not recursion, so the depth guard alone would not bound them.
  Status Seal(Expr& node) const {
    for (const auto& child : node.operands) {
      if (child) node.depth = std::max(node.depth, child->depth + 1);
    }
    for (const auto& [key, child] : node.keywords) node.depth = std::max(node.depth, child->depth + 1);
    if (node.depth > 2 * kMaxNestingDepth) {
      return InvalidArgument("template line ", node.line, ": expression nested more than ", 2 * kMaxNestingDepth,
                             " levels deep");
    }
    return Status::Ok();
  }

  ExprPtr MakeExpr(Expr::Kind kind, int line) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->line = line;
    return expr;
  }

  // `a, b` without parentheses is a tuple where jinja2 allows one ({{ }}, if, for ... in, set).
  Result<ExprPtr> ParseTupleOrExpression(bool with_condition = true) {
    const int line = Peek().line;
    GLINT_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(with_condition));
    if (!IsOperator(",")) return first;
    ExprPtr tuple = MakeExpr(Expr::Kind::kTuple, line);
    tuple->operands.push_back(std::move(first));
    while (AcceptOperator(",")) {
      if (!StartsExpression()) break;
      GLINT_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condition));
      tuple->operands.push_back(std::move(item));
    }
    GLINT_RETURN_IF_ERROR(Seal(*tuple));
    return tuple;
  }

  bool StartsExpression() const {
    const Token& token = Peek();
    switch (token.kind) {
      case TokenKind::kName:
        return token.text != "in" && token.text != "if" && token.text != "else";
      case TokenKind::kString:
      case TokenKind::kInteger:
      case TokenKind::kFloat:
        return true;
      case TokenKind::kOperator:
        return token.text == "(" || token.text == "[" || token.text == "{" || token.text == "-" || token.text == "+";
      default:
        return false;
    }
  }

  Result<ExprPtr> ParseExpression(bool with_condition) {
    DepthGuard guard(depth_);
    GLINT_RETURN_IF_ERROR(CheckDepth());
    const int line = Peek().line;
    GLINT_ASSIGN_OR_RETURN(ExprPtr value, ParseOr());
    if (!with_condition) return value;
    while (AcceptName("if")) {
      ExprPtr conditional = MakeExpr(Expr::Kind::kConditional, line);
      GLINT_ASSIGN_OR_RETURN(ExprPtr condition, ParseOr());
      ExprPtr otherwise;
      if (AcceptName("else")) {
        GLINT_ASSIGN_OR_RETURN(otherwise, ParseExpression(true));
      }
      conditional->operands.push_back(std::move(value));
      conditional->operands.push_back(std::move(condition));
      conditional->operands.push_back(std::move(otherwise));
      GLINT_RETURN_IF_ERROR(Seal(*conditional));
      value = std::move(conditional);
    }
    return value;
  }

  Result<ExprPtr> ParseOr() {
    GLINT_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const int line = Next().line;
      GLINT_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      ExprPtr node = MakeExpr(Expr::Kind::kOr, line);
      node->operands.push_back(std::move(left));
      node->operands.push_back(std::move(right));
      GLINT_RETURN_IF_ERROR(Seal(*node));
      left = std::move(node);
    }
    return left;
  }

  Result<ExprPtr> ParseAnd() {
    GLINT_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const int line = Next().line;
      GLINT_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      ExprPtr node = MakeExpr(Expr::Kind::kAnd, line);
      node->operands.push_back(std::move(left));
      node->operands.push_back(std::move(right));
      GLINT_RETURN_IF_ERROR(Seal(*node));
      left = std::move(node);
    }
    return left;
  }

  Result<ExprPtr> ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(depth_);
      GLINT_RETURN_IF_ERROR(CheckDepth());
      const int line = Next().line;
      GLINT_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      ExprPtr node = MakeExpr(Expr::Kind::kNot, line);
      node->operands.push_back(std::move(operand));
      GLINT_RETURN_IF_ERROR(Seal(*node));
      return node;
    }
    return ParseCompare();
  }

  Result<ExprPtr> ParseCompare() {
    const int line = Peek().line;
    GLINT_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr node;
    while (true) {
      std::string op;
      if (Peek().kind == TokenKind::kOperator && (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" ||
                                                  Peek().text == ">" || Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        op = "not in";
      } else {
        break;
      }
      if (!node) {
        node = MakeExpr(Expr::Kind::kCompare, line);
        node->operands.push_back(std::move(first));
      }
      GLINT_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      node->operands.push_back(std::move(operand));
      node->ops.push_back(std::move(op));
    }
    if (!node) return first;
    GLINT_RETURN_IF_ERROR(Seal(*node));
    return node;
  }

  Result<ExprPtr> ParseBinaryLevel(std::initializer_list<std::string_view> ops, Result<ExprPtr> (Parser::*next)()) {
    GLINT_ASSIGN_OR_RETURN(ExprPtr left, (this->*next)());
    while (Peek().kind == TokenKind::kOperator && std::find(ops.begin(), ops.end(), Peek().text) != ops.end()) {
      const Token& op = Next();
      ExprPtr node = MakeExpr(Expr::Kind::kBinary, op.line);
      node->name = op.text;
      GLINT_ASSIGN_OR_RETURN(ExprPtr right, (this->*next)());
      node->operands.push_back(std::move(left));
      node->operands.push_back(std::move(right));
      GLINT_RETURN_IF_ERROR(Seal(*node));
      left = std::move(node);
    }
    return left;
  }

  Result<ExprPtr> ParseMath1() { return ParseBinaryLevel({"+", "-"}, &Parser::ParseConcat); }

  Result<ExprPtr> ParseConcat() {
    const int line = Peek().line;
    GLINT_ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
    if (!IsOperator("~")) return first;
    ExprPtr node = MakeExpr(Expr::Kind::kConcat, line);
    node->operands.push_back(std::move(first));
    while (AcceptOperator("~")) {
      GLINT_ASSIGN_OR_RETURN(ExprPtr part, ParseMath2());
      node->operands.push_back(std::move(part));
    }
    GLINT_RETURN_IF_ERROR(Seal(*node));
    return node;
  }

  Result<ExprPtr> ParseMath2() { return ParseBinaryLevel({"*", "/", "//", "%"}, &Parser::ParsePow); }
  Result<ExprPtr> ParsePow() { return ParseBinaryLevel({"**"}, &Parser::ParseUnaryWithFilters); }
  Result<ExprPtr> ParseUnaryWithFilters() { return ParseUnary(true); }

  Result<ExprPtr> ParseUnary(bool with_filters) {
    DepthGuard guard(depth_);
    GLINT_RETURN_IF_ERROR(CheckDepth());
    ExprPtr node;
    if (IsOperator("-") || IsOperator("+")) {
      const Token& op = Next();
      node = MakeExpr(op.text == "-" ? Expr::Kind::kNegate : Expr::Kind::kPlus, op.line);
      GLINT_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node->operands.push_back(std::move(operand));
      GLINT_RETURN_IF_ERROR(Seal(*node));
    } else {
      GLINT_ASSIGN_OR_RETURN(node, ParsePrimary());
      GLINT_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    }
    if (with_filters) return ParseFilterExpression(std::move(node));
    return node;
  }

  Result<ExprPtr> ParsePrimary() {
    const Token& token = Peek();
    switch (token.kind) {
      case TokenKind::kName: {
        Next();
        ExprPtr node = MakeExpr(Expr::Kind::kLiteral, token.line);
        if (IsKeywordLiteral(token.text, node->literal)) return node;
        node->kind = Expr::Kind::kName;
        node->name = token.text;
        return node;
      }
      case TokenKind::kString: {
        ExprPtr node = MakeExpr(Expr::Kind::kLiteral, token.line);
        std::string text;
        while (Peek().kind == TokenKind::kString) text += Next().text;  // adjacent literals concatenate
        node->literal = Value(std::move(text));
        return node;
      }
      case TokenKind::kInteger: {
        ExprPtr node = MakeExpr(Expr::Kind::kLiteral, token.line);
        node->literal = Value(Next().integer);
        return node;
      }
      case TokenKind::kFloat: {
        ExprPtr node = MakeExpr(Expr::Kind::kLiteral, token.line);
        node->literal = Value(Next().number);
        return node;
      }
      case TokenKind::kOperator:
        if (token.text == "(") return ParseParenthesized();
        if (token.text == "[") return ParseList();
        if (token.text == "{") return ParseDict();
        break;
      default:
        break;
    }
    return Unexpected("an expression");
  }

  Result<ExprPtr> ParseParenthesized() {
    const int line = Next().line;  // (
    if (AcceptOperator(")")) return MakeExpr(Expr::Kind::kTuple, line);
    GLINT_ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(true));
    if (AcceptOperator(")")) return first;
    ExprPtr tuple = MakeExpr(Expr::Kind::kTuple, line);
    tuple->operands.push_back(std::move(first));
    while (AcceptOperator(",")) {
      if (IsOperator(")")) break;
      GLINT_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
      tuple->operands.push_back(std::move(item));
    }
    GLINT_RETURN_IF_ERROR(ExpectOperator(")"));
    GLINT_RETURN_IF_ERROR(Seal(*tuple));
    return tuple;
  }

  Result<ExprPtr> ParseList() {
    ExprPtr node = MakeExpr(Expr::Kind::kList, Next().line);  // [
    while (!AcceptOperator("]")) {
      if (!node->operands.empty()) {
        GLINT_RETURN_IF_ERROR(ExpectOperator(","));
        if (AcceptOperator("]")) break;
      }
      GLINT_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
      node->operands.push_back(std::move(item));
    }
    GLINT_RETURN_IF_ERROR(Seal(*node));
    return node;
  }

  Result<ExprPtr> ParseDict() {
    ExprPtr node = MakeExpr(Expr::Kind::kDict, Next().line);  // {
    while (!AcceptOperator("}")) {
      if (!node->operands.empty()) {
        GLINT_RETURN_IF_ERROR(ExpectOperator(","));
        if (AcceptOperator("}")) break;
      }
      GLINT_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
      GLINT_RETURN_IF_ERROR(ExpectOperator(":"));
      GLINT_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
      node->operands.push_back(std::move(key));
      node->operands.push_back(std::move(value));
    }
    GLINT_RETURN_IF_ERROR(Seal(*node));
    return node;
  }

  Result<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOperator(".")) {
        const int line = Next().line;
        if (Peek().kind == TokenKind::kName) {
          ExprPtr attribute = MakeExpr(Expr::Kind::kAttribute, line);
          attribute->name = Next().text;
          attribute->operands.push_back(std::move(node));
          GLINT_RETURN_IF_ERROR(Seal(*attribute));
          node = std::move(attribute);
        } else if (Peek().kind == TokenKind::kInteger) {  // foo.0 is foo[0]
          ExprPtr subscript = MakeExpr(Expr::Kind::kSubscript, line);
          ExprPtr index = MakeExpr(Expr::Kind::kLiteral, line);
          index->literal = Value(Next().integer);
          subscript->operands.push_back(std::move(node));
          subscript->operands.push_back(std::move(index));
          GLINT_RETURN_IF_ERROR(Seal(*subscript));
          node = std::move(subscript);
        } else {
          return Unexpected("an attribute name after '.'");
        }
      } else if (IsOperator("[")) {
        GLINT_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOperator("(")) {
        GLINT_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> ParseSubscript(ExprPtr object) {
    const int line = Next().line;  // [
    std::vector<ExprPtr> parts(3);
    int colons = 0;
    while (!IsOperator("]")) {
      if (IsOperator(":")) {
        Next();
        if (++colons > 2) return ErrorAt(Peek(), "a slice has at most two ':'");
        continue;
      }
      if (parts[static_cast<size_t>(colons)]) return Unexpected("':' or ']'");
      GLINT_ASSIGN_OR_RETURN(parts[static_cast<size_t>(colons)], ParseExpression(true));
    }
    Next();  // ]
    if (colons == 0) {
      if (!parts[0]) return ErrorAt(Peek(), "empty subscript []");
      ExprPtr node = MakeExpr(Expr::Kind::kSubscript, line);
      node->operands.push_back(std::move(object));
      node->operands.push_back(std::move(parts[0]));
      GLINT_RETURN_IF_ERROR(Seal(*node));
      return node;
    }
    ExprPtr node = MakeExpr(Expr::Kind::kSlice, line);
    node->operands.push_back(std::move(object));
    for (auto& part : parts) node->operands.push_back(std::move(part));
    GLINT_RETURN_IF_ERROR(Seal(*node));
    return node;
  }

  // Arguments after '(' up to and including ')': positional first, then name=value.
  Status ParseArguments(Expr& node) {
    GLINT_RETURN_IF_ERROR(ExpectOperator("("));
    bool first = true;
    while (!AcceptOperator(")")) {
      if (!first) {
        GLINT_RETURN_IF_ERROR(ExpectOperator(","));
        if (AcceptOperator(")")) break;
      }
      first = false;
      if (IsOperator("*") || IsOperator("**")) return ErrorAt(Peek(), "*args and **kwargs are not supported");
      if (Peek().kind == TokenKind::kName && IsOperator("=", 1)) {
        std::string key = Next().text;
        Next();  // =
        GLINT_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        node.keywords.emplace_back(std::move(key), std::move(value));
      } else {
        if (!node.keywords.empty()) return ErrorAt(Peek(), "a positional argument follows a keyword argument");
        GLINT_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        node.operands.push_back(std::move(value));
      }
    }
    return Status::Ok();
  }

  Result<ExprPtr> ParseCall(ExprPtr callee) {
    ExprPtr node = MakeExpr(Expr::Kind::kCall, Peek().line);
    node->operands.push_back(std::move(callee));
    GLINT_RETURN_IF_ERROR(ParseArguments(*node));
    GLINT_RETURN_IF_ERROR(Seal(*node));
    return node;
  }

  Result<ExprPtr> ParseFilter(ExprPtr value) {
    const int line = Peek().line;
    GLINT_ASSIGN_OR_RETURN(std::string name, ExpectName("a filter name"));
    while (AcceptOperator(".")) {
      GLINT_ASSIGN_OR_RETURN(std::string part, ExpectName("a filter name"));
      name += "." + part;
    }
    ExprPtr node = MakeExpr(Expr::Kind::kFilter, line);
    node->name = std::move(name);
    node->operands.push_back(std::move(value));
    if (IsOperator("(")) GLINT_RETURN_IF_ERROR(ParseArguments(*node));
    GLINT_RETURN_IF_ERROR(Seal(*node));
    return node;
  }

  Result<ExprPtr> ParseFilterExpression(ExprPtr node) {
    while (true) {
      if (AcceptOperator("|")) {
        GLINT_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
      } else if (IsName("is")) {
        const int line = Next().line;
        ExprPtr test = MakeExpr(Expr::Kind::kTest, line);
        test->negated = AcceptName("not");
        GLINT_ASSIGN_OR_RETURN(test->name, ExpectName("a test name after 'is'"));
        while (AcceptOperator(".")) {
          GLINT_ASSIGN_OR_RETURN(std::string part, ExpectName("a test name"));
          test->name += "." + part;
        }
        test->operands.push_back(std::move(node));
        if (IsOperator("(")) {
          GLINT_RETURN_IF_ERROR(ParseArguments(*test));
        } else if ((Peek().kind == TokenKind::kName || Peek().kind == TokenKind::kString ||
                    Peek().kind == TokenKind::kInteger || Peek().kind == TokenKind::kFloat || IsOperator("[") ||
                    IsOperator("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and") && !IsName("if") && !IsName("in") &&
                   !IsName("is") && !IsName("not")) {
          // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses.
          GLINT_ASSIGN_OR_RETURN(ExprPtr argument, ParsePrimary());
          GLINT_ASSIGN_OR_RETURN(argument, ParsePostfix(std::move(argument)));
          test->operands.push_back(std::move(argument));
        }
        GLINT_RETURN_IF_ERROR(Seal(*test));
        node = std::move(test);
      } else if (IsOperator("(")) {
        GLINT_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<Body> Parse(std::string_view source) {
  GLINT_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lex(source));
  return Parser(std::move(tokens)).ParseTemplate();
}

}  // namespace glint::jinja
