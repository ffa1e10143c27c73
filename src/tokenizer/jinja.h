// A Jinja-subset interpreter for chat templates: what GLM's and most HF chat templates use, rendered the way HF's
// transformers renders them (jinja2 with trim_blocks and lstrip_blocks, loopcontrols, no autoescape), so a
// template that ships with a checkpoint renders byte for byte as it does in Python, and a changed template needs no
// rebuild.
//
// Supported: text, {{ }}, {# #}, whitespace control (- and +), raw; if/elif/else, for (tuple targets, `if` filter,
// else, loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem/cycle, break, continue), set
// (names, tuple unpacking, namespace attributes, {% set x %}…{% endset %}), macro (defaults), filter blocks,
// generation blocks; the operators and literals of jinja_parser.h; filters, tests and str/dict methods listed in
// docs/chat-template.md; globals range, namespace, dict, raise_exception, strftime_now.
// Not supported (an error names the construct): include/import/extends/block, call blocks, recursive loops,
// *args/**kwargs, the `%` string operator, and the filters docs/chat-template.md lists as unsupported.
//
// Rendering is bounded (RenderLimits), so a hostile template or input cannot hang or exhaust memory: it fails with
// an error instead. Errors carry the template line.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tokenizer/jinja_value.h"

namespace glint::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;  // the rendered text, and any one string or list built on the way
  int64_t max_steps = 10'000'000;              // statements executed + loop iterations + calls
  size_t max_list_items = size_t{1} << 17;     // any one list (range(), +, *); chat templates need a few hundred
  int max_call_depth = 64;                     // macro calls inside macro calls
};

struct Node;

class Template {
 public:
  // Parses `source`; syntax errors name the line and what was expected.
  static Result<Template> Parse(std::string_view source);

  // Renders with the entries of `variables` as the template's variables (e.g. messages, tools,
  // add_generation_prompt). raise_exception("msg") in the template fails with "msg" in the error.
  Result<std::string> Render(const Object& variables, const RenderLimits& limits = {}) const;

 private:
  struct Parsed;
  std::shared_ptr<const Parsed> parsed_;
};

}  // namespace glint::jinja
