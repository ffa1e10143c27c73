// libFuzzer target: the Jinja-subset interpreter. Input = template text, a NUL byte, then JSON for the variables
// (ignored when it does not parse; a fixed chat-like context is used then). Parsing and rendering must return a
// result or an error; crashes, sanitizer reports, hangs (the render limits bound loops) or runaway memory fail.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "tokenizer/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string_view source = input.substr(0, split);
  auto parsed = glint::jinja::Template::Parse(source);
  if (!parsed.ok()) return 0;
  nlohmann::ordered_json variables = nlohmann::ordered_json::parse(
      split == std::string_view::npos ? std::string_view() : input.substr(split + 1), nullptr, false);
  if (!variables.is_object()) {
    variables = {
        {"messages",
         {{{"role", "system"}, {"content", "sys"}},
          {{"role", "user"}, {"content", "hi"}},
          {{"role", "assistant"},
           {"content", "ok"},
           {"reasoning_content", "r"},
           {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", {{"a", 1}}}}}}}}},
          {{"role", "tool"}, {"content", "res"}}}},
        {"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}}},
        {"add_generation_prompt", true}};
  }
  glint::jinja::RenderLimits limits;
  limits.max_steps = 200'000;  // keeps each input fast; the limit logic is what is being exercised
  limits.max_output_bytes = 1 << 20;
  limits.max_list_items = 1 << 14;
  const glint::jinja::Value context = glint::jinja::FromJson(variables);
  (void)parsed->Render(context.as_object(), limits);
  return 0;
}
