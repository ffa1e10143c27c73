// The chat template that ships with a checkpoint, rendered by glint's Jinja-subset interpreter (jinja.h), so a
// changed template needs no rebuild. See docs/chat-template.md.
//
// Where it comes from (the first that exists, as HF transformers looks):
//   1. DIR/chat_template.jinja
//   2. "chat_template" in DIR/tokenizer_config.json: a string, or a list of {"name", "template"} of which the one
//      named "default" is used.
// The special tokens of tokenizer_config.json (bos_token, eos_token, pad_token, unk_token, sep_token, cls_token,
// mask_token; strings or {"content": ...}) are template variables too, as in HF.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tokenizer/jinja.h"

namespace glint {

class ChatTemplate {
 public:
  // Errors: no template in the directory, a malformed tokenizer_config.json, a template that does not parse.
  static Result<ChatTemplate> Load(const std::string& model_dir);
  // `origin` names the template in errors (a path, or "request").
  static Result<ChatTemplate> FromSource(std::string_view source, std::string origin);

  // `variables` are the template's inputs: messages, tools, add_generation_prompt and any extra keyword arguments
  // (reasoning_effort, chat_template_kwargs...). The checkpoint's special tokens are added where `variables` does
  // not set them. Errors (including the template's raise_exception) are InvalidArgument or FailedPrecondition and
  // say "chat template <origin>: ...".
  Result<std::string> Render(const jinja::Object& variables, const jinja::RenderLimits& limits = {}) const;

  const std::string& origin() const { return origin_; }
  const std::string& source() const { return source_; }
  const std::vector<std::pair<std::string, std::string>>& special_tokens() const { return special_tokens_; }

 private:
  ChatTemplate() = default;

  jinja::Template template_;
  std::string origin_;
  std::string source_;
  std::vector<std::pair<std::string, std::string>> special_tokens_;  // name → text, e.g. eos_token → <|endoftext|>
};

}  // namespace glint
