// Global functions of the Jinja-subset interpreter: range, namespace, dict, raise_exception, strftime_now.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <initializer_list>
#include <limits>

#include "tokenizer/jinja_builtin_helpers.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/utf8.h"

namespace glint::jinja {
using namespace detail;  // NOLINT(google-build-using-namespace): the builtins' own helpers

Object MakeGlobals(const ValueLimits& limits) {
  Object globals;
  auto add = [&](std::string name, std::function<Result<Value>(const CallArgs&)> function) {
    auto callable = std::make_shared<Callable>();
    callable->name = name;
    callable->function = std::move(function);
    globals.entries.emplace_back(std::move(name), Value(std::shared_ptr<const Callable>(std::move(callable))));
  };
  add("range", [limits](const CallArgs& args) -> Result<Value> {
    if (!args.keyword.empty()) return InvalidArgument("range() takes no keyword arguments");
    if (args.positional.empty() || args.positional.size() > 3) return InvalidArgument("range() takes 1 to 3 arguments");
    std::vector<int64_t> numbers;
    for (const Value& v : args.positional) {
      if (!v.is_int() && !v.is_bool()) return TypeError("range() needs integers", v);
      numbers.push_back(v.as_int());
    }
    const int64_t start = numbers.size() == 1 ? 0 : numbers[0];
    const int64_t stop = numbers.size() == 1 ? numbers[0] : numbers[1];
    const int64_t step = numbers.size() == 3 ? numbers[2] : 1;
    if (step == 0) return InvalidArgument("range() step cannot be zero");
    Array out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      out.push_back(Value(i));
      GLINT_RETURN_IF_ERROR(CheckList(limits, out.size()));
      if ((step > 0 && i > std::numeric_limits<int64_t>::max() - step) ||
          (step < 0 && i < std::numeric_limits<int64_t>::min() - step)) {
        break;
      }
    }
    return Value(std::move(out));
  });
  add("namespace", [](const CallArgs& args) -> Result<Value> {
    auto object = std::make_shared<Object>();
    object->is_namespace = true;
    for (const Value& v : args.positional) {
      if (!v.is_object()) return TypeError("namespace() takes dicts and keyword arguments", v);
      for (const auto& [key, item] : v.as_object().entries) object->Set(key, item);
    }
    for (const auto& [key, item] : args.keyword) object->Set(key, item);
    return Value(std::move(object));
  });
  add("dict", [](const CallArgs& args) -> Result<Value> {
    Object object;
    for (const Value& v : args.positional) {
      if (!v.is_object()) return TypeError("dict() takes dicts and keyword arguments", v);
      for (const auto& [key, item] : v.as_object().entries) object.Set(key, item);
    }
    for (const auto& [key, item] : args.keyword) object.Set(key, item);
    return Value(std::move(object));
  });
  add("raise_exception", [](const CallArgs& args) -> Result<Value> {
    const std::string message = args.positional.empty() ? std::string("(no message)") : ToText(args.positional[0]);
    return FailedPrecondition("raise_exception: ", message);
  });
  add("strftime_now", [](const CallArgs& args) -> Result<Value> {
    if (args.positional.size() != 1 || !args.positional[0].is_string()) {
      return InvalidArgument("strftime_now() takes one format string");
    }
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buffer[256];
    const size_t length = std::strftime(buffer, sizeof(buffer), args.positional[0].as_string().c_str(), &local);
    return Value(std::string(buffer, length));
  });
  return globals;
}

}  // namespace glint::jinja
