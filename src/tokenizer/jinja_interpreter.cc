// Evaluates the syntax tree of jinja_ast.h (see jinja.h for what is supported and why it follows Python).
#include <algorithm>

#include "tokenizer/jinja.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_parser.h"

namespace glint::jinja {

struct Template::Parsed {
  Body body;
};

namespace {

// Prefixes "template line N: " unless the message already names a line (an error from inside a macro keeps the
// line where it happened).
Status AtLine(const Status& status, int line) {
  if (status.ok() || status.message().rfind("template line ", 0) == 0) return status;
  return Status(status.code(), StrCat("template line ", line, ": ", status.message()));
}

class Interpreter {
 public:
  Interpreter(const Object& variables, const RenderLimits& limits)
      : variables_(variables), limits_(limits), globals_(MakeGlobals(ValueLimitsOf(limits))) {
    frames_.push_back(std::make_shared<Frame>());  // the template's top level
  }

  Status Run(const Body& body, std::string& out) {
    GLINT_ASSIGN_OR_RETURN(Flow flow, Exec(body, out));
    (void)flow;  // break/continue outside loops are rejected by the parser
    return Status::Ok();
  }

 private:
  using Frame = std::vector<std::pair<std::string, Value>>;
  enum class Flow { kNormal, kBreak, kContinue };

  static ValueLimits ValueLimitsOf(const RenderLimits& limits) {
    ValueLimits value_limits;
    value_limits.max_string_bytes = limits.max_output_bytes;
    value_limits.max_list_items = limits.max_list_items;
    return value_limits;
  }

  Status Step() {
    if (++steps_ > limits_.max_steps) {
      return ResourceExhausted("the template took more than ", limits_.max_steps, " steps (a loop too long?)");
    }
    return Status::Ok();
  }

  Status Emit(std::string& out, std::string_view text) {
    if (out.size() + text.size() > limits_.max_output_bytes) {
      return ResourceExhausted("the rendered template exceeds ", limits_.max_output_bytes, " bytes");
    }
    out.append(text);
    return Status::Ok();
  }

  Value Lookup(const std::string& name) const {
    for (auto frame = frames_.rbegin(); frame != frames_.rend(); ++frame) {
      for (const auto& [key, value] : **frame) {
        if (key == name) return value;
      }
    }
    if (const Value* value = variables_.Find(name)) return *value;
    if (const Value* value = globals_.Find(name)) return *value;
    return Value::Undefined(name);
  }

  void Assign(const std::string& name, Value value) {
    Frame& frame = *frames_.back();
    for (auto& [key, existing] : frame) {
      if (key == name) {
        existing = std::move(value);
        return;
      }
    }
    frame.emplace_back(name, std::move(value));
  }

  // Tuple unpacking for `for a, b in ...` and `set a, b = ...`.
  Status AssignTargets(const std::vector<std::string>& targets, const Value& value) {
    if (targets.size() == 1) {
      Assign(targets[0], value);
      return Status::Ok();
    }
    if (!value.is_array()) {
      return InvalidArgument("cannot unpack a ", value.TypeName(), " into ", targets.size(), " names");
    }
    const Array& items = value.as_array();
    if (items.size() != targets.size()) {
      return InvalidArgument("cannot unpack ", items.size(), " values into ", targets.size(), " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) Assign(targets[i], items[i]);
    return Status::Ok();
  }

  Result<Flow> Exec(const Body& body, std::string& out) {
    for (const NodePtr& node : body) {
      auto flow = ExecNode(*node, out);
      if (!flow.ok()) return AtLine(flow.status(), node->line);
      if (*flow != Flow::kNormal) return *flow;
    }
    return Flow::kNormal;
  }

  // Bounds the C++ recursion of Eval/ExecNode (expressions in statements in macros in expressions...), so a
  // template cannot overflow the stack of the thread that renders it.
  static constexpr int kMaxRecursion = 768;
  struct RecursionGuard {
    explicit RecursionGuard(int& depth) : depth(depth) { ++depth; }
    ~RecursionGuard() { --depth; }
    int& depth;
  };
  Status CheckRecursion() const {
    if (recursion_ > kMaxRecursion) {
      return ResourceExhausted("the template nests statements, expressions and macro calls too deeply");
    }
    return Status::Ok();
  }

  Result<Flow> ExecNode(const Node& node, std::string& out) {
    RecursionGuard guard(recursion_);
    GLINT_RETURN_IF_ERROR(CheckRecursion());
    GLINT_RETURN_IF_ERROR(Step());
    switch (node.kind) {
      case Node::Kind::kText:
        GLINT_RETURN_IF_ERROR(Emit(out, node.text));
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        GLINT_ASSIGN_OR_RETURN(Value value, Eval(*node.expr));
        GLINT_RETURN_IF_ERROR(Emit(out, ToText(value)));
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (const auto& [condition, body] : node.branches) {
          GLINT_ASSIGN_OR_RETURN(Value test, Eval(*condition));
          if (test.Truthy()) return Exec(body, out);
        }
        return Exec(node.else_body, out);
      case Node::Kind::kFor:
        return ExecFor(node, out);
      case Node::Kind::kSet: {
        GLINT_ASSIGN_OR_RETURN(Value value, Eval(*node.expr));
        if (node.attribute.empty()) {
          GLINT_RETURN_IF_ERROR(AssignTargets(node.targets, value));
          return Flow::kNormal;
        }
        const Value target = Lookup(node.targets[0]);
        if (!target.is_object() || !target.as_object().is_namespace) {
          return InvalidArgument("cannot set '", node.targets[0], ".", node.attribute, "': '", node.targets[0],
                                 "' is not a namespace()");
        }
        target.object_ptr()->Set(node.attribute, std::move(value));
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        std::string captured;
        GLINT_RETURN_IF_ERROR(Exec(node.body, captured).status());
        Assign(node.targets[0], Value(std::move(captured)));
        return Flow::kNormal;
      }
      case Node::Kind::kMacro:
        Assign(node.name, MakeMacro(node));
        return Flow::kNormal;
      case Node::Kind::kFilterBlock: {
        std::string captured;
        GLINT_RETURN_IF_ERROR(Exec(node.body, captured).status());
        GLINT_ASSIGN_OR_RETURN(Value value, EvalFilterChain(*node.expr, Value(std::move(captured))));
        GLINT_RETURN_IF_ERROR(Emit(out, ToText(value)));
        return Flow::kNormal;
      }
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kScope:
        return Exec(node.body, out);
    }
    return Flow::kNormal;
  }

  Result<Flow> ExecFor(const Node& node, std::string& out) {
    GLINT_ASSIGN_OR_RETURN(Value iterable, Eval(*node.expr));
    GLINT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(iterable));
    frames_.push_back(std::make_shared<Frame>());
    struct PopFrame {
      std::vector<std::shared_ptr<Frame>>& frames;
      ~PopFrame() { frames.pop_back(); }
    } pop{frames_};
    if (node.condition) {  // `for x in xs if cond`: filtered first, so loop.* counts the kept items
      std::vector<Value> kept;
      for (Value& item : items) {
        GLINT_RETURN_IF_ERROR(Step());
        GLINT_RETURN_IF_ERROR(AssignTargets(node.targets, item));
        GLINT_ASSIGN_OR_RETURN(Value keep, Eval(*node.condition));
        if (keep.Truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      GLINT_RETURN_IF_ERROR(Step());
      GLINT_RETURN_IF_ERROR(AssignTargets(node.targets, items[static_cast<size_t>(i)]));
      Assign("loop", MakeLoop(items, i));
      GLINT_ASSIGN_OR_RETURN(Flow flow, Exec(node.body, out));
      if (flow == Flow::kBreak) break;
    }
    if (length == 0) return Exec(node.else_body, out);
    return Flow::kNormal;
  }

  static Value MakeLoop(const std::vector<Value>& items, int64_t index) {
    const int64_t length = static_cast<int64_t>(items.size());
    Object loop;
    loop.entries.reserve(12);
    loop.entries.emplace_back("index", Value(index + 1));
    loop.entries.emplace_back("index0", Value(index));
    loop.entries.emplace_back("revindex", Value(length - index));
    loop.entries.emplace_back("revindex0", Value(length - index - 1));
    loop.entries.emplace_back("first", Value(index == 0));
    loop.entries.emplace_back("last", Value(index == length - 1));
    loop.entries.emplace_back("length", Value(length));
    loop.entries.emplace_back("depth", Value(int64_t{1}));
    loop.entries.emplace_back("depth0", Value(int64_t{0}));
    loop.entries.emplace_back("previtem",
                              index > 0 ? items[static_cast<size_t>(index - 1)] : Value::Undefined("previtem"));
    loop.entries.emplace_back(
        "nextitem", index + 1 < length ? items[static_cast<size_t>(index + 1)] : Value::Undefined("nextitem"));
    auto cycle = std::make_shared<Callable>();
    cycle->name = "loop.cycle";
    cycle->function = [index](const CallArgs& args) -> Result<Value> {
      if (args.positional.empty()) return InvalidArgument("loop.cycle() needs at least one value");
      return args.positional[static_cast<size_t>(index) % args.positional.size()];
    };
    loop.entries.emplace_back("cycle", Value(std::shared_ptr<const Callable>(std::move(cycle))));
    return Value(std::move(loop));
  }

  Value MakeMacro(const Node& node) {
    auto callable = std::make_shared<Callable>();
    callable->name = node.name;
    const Node* macro = &node;
    callable->function = [this, macro](const CallArgs& args) { return CallMacro(*macro, args); };
    return Value(std::shared_ptr<const Callable>(std::move(callable)));
  }

  Result<Value> CallMacro(const Node& macro, const CallArgs& args) {
    if (call_depth_ >= limits_.max_call_depth) {
      return ResourceExhausted("macro calls nested deeper than ", limits_.max_call_depth, " (recursion?)");
    }
    if (args.positional.size() > macro.params.size()) {
      return InvalidArgument("macro '", macro.name, "' takes ", macro.params.size(), " arguments, got ",
                             args.positional.size());
    }
    // A macro sees its parameters, then the template's top level and the render variables (not the caller's
    // loop variables), as in jinja2.
    std::vector<std::shared_ptr<Frame>> saved = {frames_[0]};
    std::swap(saved, frames_);
    frames_.push_back(std::make_shared<Frame>());
    ++call_depth_;
    struct Restore {
      Interpreter& self;
      std::vector<std::shared_ptr<Frame>>& saved;
      ~Restore() {
        std::swap(saved, self.frames_);
        --self.call_depth_;
      }
    } restore{*this, saved};
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const Value* given = i < args.positional.size() ? &args.positional[i] : nullptr;
      for (const auto& [key, value] : args.keyword) {
        if (key == macro.params[i]) given = &value;
      }
      if (given != nullptr) {
        Assign(macro.params[i], *given);
      } else if (macro.defaults[i]) {
        GLINT_ASSIGN_OR_RETURN(Value fallback, Eval(*macro.defaults[i]));
        Assign(macro.params[i], std::move(fallback));
      } else {
        Assign(macro.params[i], Value::Undefined(macro.params[i]));
      }
    }
    for (const auto& [key, value] : args.keyword) {
      if (std::find(macro.params.begin(), macro.params.end(), key) == macro.params.end()) {
        return InvalidArgument("macro '", macro.name, "' has no parameter '", key, "'");
      }
    }
    std::string out;
    GLINT_RETURN_IF_ERROR(Exec(macro.body, out).status());
    return Value(std::move(out));
  }

  Result<CallArgs> EvalArgs(const Expr& expr, size_t first_positional) {
    CallArgs args;
    for (size_t i = first_positional; i < expr.operands.size(); ++i) {
      GLINT_ASSIGN_OR_RETURN(Value value, Eval(*expr.operands[i]));
      args.positional.push_back(std::move(value));
    }
    for (const auto& [key, operand] : expr.keywords) {
      GLINT_ASSIGN_OR_RETURN(Value value, Eval(*operand));
      args.keyword.emplace_back(key, std::move(value));
    }
    return args;
  }

  // A {% filter %} chain: the innermost filter's operand is null and stands for `input`.
  Result<Value> EvalFilterChain(const Expr& expr, Value input) {
    Value value = std::move(input);
    if (expr.operands[0]) {
      GLINT_ASSIGN_OR_RETURN(value, EvalFilterChain(*expr.operands[0], std::move(value)));
    }
    GLINT_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, 1));
    return ApplyFilter(expr.name, value, args, ValueLimitsOf(limits_));
  }

  Result<Value> Eval(const Expr& expr) {
    RecursionGuard guard(recursion_);
    GLINT_RETURN_IF_ERROR(CheckRecursion());
    auto value = EvalInner(expr);
    if (!value.ok()) return AtLine(value.status(), expr.line);
    return value;
  }

  Result<Value> EvalInner(const Expr& expr) {
    using Kind = Expr::Kind;
    switch (expr.kind) {
      case Kind::kLiteral:
        return expr.literal;
      case Kind::kName:
        return Lookup(expr.name);
      case Kind::kList:
      case Kind::kTuple:
      case Kind::kDict:
        return EvalDisplay(expr);
      case Kind::kAttribute:
      case Kind::kSubscript:
      case Kind::kSlice:
        return EvalAccess(expr);
      case Kind::kCall:
        return EvalCall(expr);
      case Kind::kFilter: {
        GLINT_ASSIGN_OR_RETURN(Value value, Eval(*expr.operands[0]));
        GLINT_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, 1));
        return ApplyFilter(expr.name, value, args, ValueLimitsOf(limits_));
      }
      case Kind::kTest: {
        GLINT_ASSIGN_OR_RETURN(Value value, Eval(*expr.operands[0]));
        GLINT_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, 1));
        GLINT_ASSIGN_OR_RETURN(bool result, ApplyTest(expr.name, value, args));
        return Value(result != expr.negated);
      }
      case Kind::kNegate:
      case Kind::kPlus:
      case Kind::kNot:
        return EvalUnary(expr);
      case Kind::kBinary: {
        GLINT_ASSIGN_OR_RETURN(Value left, Eval(*expr.operands[0]));
        GLINT_ASSIGN_OR_RETURN(Value right, Eval(*expr.operands[1]));
        return BinaryOperation(expr.name, left, right, ValueLimitsOf(limits_));
      }
      case Kind::kCompare:
      case Kind::kAnd:
      case Kind::kOr:
      case Kind::kConditional:
        return EvalLogic(expr);
      case Kind::kConcat:
        return EvalConcat(expr);
    }
    return InternalError("unknown expression kind");
  }

  // [a, b], (a, b), {k: v}.
  Result<Value> EvalDisplay(const Expr& expr) {
    if (expr.kind == Expr::Kind::kDict) {
      Object object;
      for (size_t i = 0; i + 1 < expr.operands.size(); i += 2) {
        GLINT_ASSIGN_OR_RETURN(Value key, Eval(*expr.operands[i]));
        if (!key.is_string()) return InvalidArgument("dict keys must be strings (got ", key.TypeName(), ")");
        GLINT_ASSIGN_OR_RETURN(Value value, Eval(*expr.operands[i + 1]));
        object.Set(key.as_string(), std::move(value));
      }
      return Value(std::move(object));
    }
    Array items;
    for (const auto& operand : expr.operands) {
      GLINT_ASSIGN_OR_RETURN(Value item, Eval(*operand));
      items.push_back(std::move(item));
    }
    return expr.kind == Expr::Kind::kTuple ? Value::Tuple(std::move(items)) : Value(std::move(items));
  }

  // object.name, object[key], object[start:stop:step].
  Result<Value> EvalAccess(const Expr& expr) {
    GLINT_ASSIGN_OR_RETURN(Value object, Eval(*expr.operands[0]));
    if (expr.kind == Expr::Kind::kAttribute) {
      if (HasMethod(object, expr.name)) {
        return InvalidArgument("'", expr.name, "' of a ", object.TypeName(), " is a method: call it with ()");
      }
      return GetAttribute(object, expr.name);
    }
    if (expr.kind == Expr::Kind::kSubscript) {
      GLINT_ASSIGN_OR_RETURN(Value key, Eval(*expr.operands[1]));
      return GetItem(object, key);
    }
    Value parts[3];
    for (int i = 0; i < 3; ++i) {
      if (expr.operands[static_cast<size_t>(i) + 1]) {
        GLINT_ASSIGN_OR_RETURN(parts[i], Eval(*expr.operands[static_cast<size_t>(i) + 1]));
      }
    }
    return GetSlice(object, parts[0], parts[1], parts[2], ValueLimitsOf(limits_));
  }

  // -x, +x, not x.
  Result<Value> EvalUnary(const Expr& expr) {
    GLINT_ASSIGN_OR_RETURN(Value value, Eval(*expr.operands[0]));
    switch (expr.kind) {
      case Expr::Kind::kNegate:
        return Negate(value);
      case Expr::Kind::kPlus:
        if (!value.is_number()) return InvalidArgument("bad operand for unary + (got ", value.TypeName(), ")");
        return value;
      default:
        return Value(!value.Truthy());
    }
  }

  // Comparison chains, and, or, and the conditional expression: each evaluates only the operands it needs.
  Result<Value> EvalLogic(const Expr& expr) {
    switch (expr.kind) {
      case Expr::Kind::kCompare: {
        GLINT_ASSIGN_OR_RETURN(Value left, Eval(*expr.operands[0]));
        for (size_t i = 0; i < expr.ops.size(); ++i) {  // a < b < c means a < b and b < c
          GLINT_ASSIGN_OR_RETURN(Value right, Eval(*expr.operands[i + 1]));
          GLINT_ASSIGN_OR_RETURN(bool holds, Compare(expr.ops[i], left, right));
          if (!holds) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::kAnd:
      case Expr::Kind::kOr: {  // Python returns the deciding operand, not a bool
        GLINT_ASSIGN_OR_RETURN(Value left, Eval(*expr.operands[0]));
        if (left.Truthy() == (expr.kind == Expr::Kind::kOr)) return left;
        return Eval(*expr.operands[1]);
      }
      default: {  // kConditional: operands (then, condition, else or null)
        GLINT_ASSIGN_OR_RETURN(Value condition, Eval(*expr.operands[1]));
        if (condition.Truthy()) return Eval(*expr.operands[0]);
        if (expr.operands[2]) return Eval(*expr.operands[2]);
        return Value::Undefined("");
      }
    }
  }

  // a ~ b ~ c, within the output limit.
  Result<Value> EvalConcat(const Expr& expr) {
    std::string text;
    for (const auto& operand : expr.operands) {
      GLINT_ASSIGN_OR_RETURN(Value part, Eval(*operand));
      text += ToText(part);
      if (text.size() > limits_.max_output_bytes) {
        return ResourceExhausted("a string exceeds ", limits_.max_output_bytes, " bytes");
      }
    }
    return Value(std::move(text));
  }

  Result<Value> EvalCall(const Expr& expr) {
    GLINT_RETURN_IF_ERROR(Step());
    const Expr& callee = *expr.operands[0];
    if (callee.kind == Expr::Kind::kAttribute) {  // a method call: "text".strip(), d.items()
      GLINT_ASSIGN_OR_RETURN(Value object, Eval(*callee.operands[0]));
      if (HasMethod(object, callee.name)) {
        GLINT_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, 1));
        return CallMethod(object, callee.name, args, ValueLimitsOf(limits_));
      }
      GLINT_ASSIGN_OR_RETURN(Value function, GetAttribute(object, callee.name));
      if (!function.is_callable()) {
        return InvalidArgument("'", callee.name, "' of a ", object.TypeName(), " is not a method glint supports");
      }
      GLINT_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, 1));
      return function.as_callable().function(args);
    }
    GLINT_ASSIGN_OR_RETURN(Value function, Eval(callee));
    if (!function.is_callable()) {
      if (function.is_undefined() && !function.undefined_name().empty()) {
        return InvalidArgument("'", function.undefined_name(), "' is undefined (not a known function)");
      }
      return InvalidArgument("a ", function.TypeName(), " is not callable");
    }
    GLINT_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(expr, 1));
    return function.as_callable().function(args);
  }

  const Object& variables_;
  RenderLimits limits_;
  Object globals_;
  std::vector<std::shared_ptr<Frame>> frames_;  // [0] = top level; innermost last
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int recursion_ = 0;
};

}  // namespace

Result<Template> Template::Parse(std::string_view source) {
  GLINT_ASSIGN_OR_RETURN(Body body, jinja::Parse(source));
  auto parsed = std::make_shared<Parsed>();
  parsed->body = std::move(body);
  Template result;
  result.parsed_ = std::move(parsed);
  return result;
}

Result<std::string> Template::Render(const Object& variables, const RenderLimits& limits) const {
  if (!parsed_) return FailedPrecondition("rendering a template that was not parsed");
  Interpreter interpreter(variables, limits);
  std::string out;
  GLINT_RETURN_IF_ERROR(interpreter.Run(parsed_->body, out));
  return out;
}

}  // namespace glint::jinja
