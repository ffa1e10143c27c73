#include "tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/json_depth.h"

namespace glint {
namespace {

constexpr size_t kMaxTemplateBytes = size_t{1} << 20;          // a chat template is a few KB
constexpr size_t kMaxTokenizerConfigBytes = size_t{64} << 20;  // holds added_tokens_decoder: can be a few MB

constexpr const char* kSpecialTokenNames[] = {"bos_token", "eos_token", "pad_token", "unk_token",
                                              "sep_token", "cls_token", "mask_token"};

Result<std::string> TemplateFromConfig(const nlohmann::json& config, const std::string& path) {
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) {
    return NotFound(path, " has no \"chat_template\" (and there is no chat_template.jinja beside it)");
  }
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    return InvalidArgument(path, ": \"chat_template\" is a list without an entry named \"default\"");
  }
  return InvalidArgument(path, ": \"chat_template\" must be a string or a list of {name, template}");
}

}  // namespace

Result<ChatTemplate> ChatTemplate::FromSource(std::string_view source, std::string origin) {
  if (source.size() > kMaxTemplateBytes) {
    return InvalidArgument("chat template ", origin, " is ", source.size(), " bytes; at most ", kMaxTemplateBytes,
                           " are accepted");
  }
  auto parsed = jinja::Template::Parse(source);
  if (!parsed.ok()) return parsed.status().WithContext(StrCat("chat template ", origin));
  ChatTemplate result;
  result.template_ = std::move(parsed).value();
  result.origin_ = std::move(origin);
  result.source_ = std::string(source);
  return result;
}

Result<ChatTemplate> ChatTemplate::Load(const std::string& model_dir) {
  const std::string jinja_path = JoinPath(model_dir, "chat_template.jinja");
  const std::string config_path = JoinPath(model_dir, "tokenizer_config.json");
  nlohmann::json config = nlohmann::json::object();
  if (PathExists(config_path)) {
    GLINT_ASSIGN_OR_RETURN(std::string text, ReadFile(config_path, kMaxTokenizerConfigBytes));
    if (!JsonDepthWithin(text, kMaxJsonFileDepth)) {
      return InvalidArgument(config_path, ": JSON nested more than ", kMaxJsonFileDepth, " levels deep");
    }
    config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return InvalidArgument(config_path, " is not a JSON object");
    }
  }
  std::string source;
  std::string origin;
  if (PathExists(jinja_path)) {
    GLINT_ASSIGN_OR_RETURN(source, ReadFile(jinja_path, kMaxTemplateBytes + 1));
    origin = jinja_path;
  } else if (PathExists(config_path)) {
    GLINT_ASSIGN_OR_RETURN(source, TemplateFromConfig(config, config_path));
    origin = config_path;
  } else {
    return NotFound("no chat template in ", model_dir, " (looked for chat_template.jinja and tokenizer_config.json)");
  }
  GLINT_ASSIGN_OR_RETURN(ChatTemplate result, FromSource(source, origin));
  for (const char* name : kSpecialTokenNames) {
    const auto it = config.find(name);
    if (it == config.end()) continue;
    if (it->is_string()) {
      result.special_tokens_.emplace_back(name, it->get<std::string>());
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      result.special_tokens_.emplace_back(name, (*it)["content"].get<std::string>());
    }
  }
  return result;
}

Result<std::string> ChatTemplate::Render(const jinja::Object& variables, const jinja::RenderLimits& limits) const {
  const jinja::Object* context = &variables;
  jinja::Object with_tokens;
  if (!special_tokens_.empty()) {
    with_tokens = variables;
    for (const auto& [name, text] : special_tokens_) {
      if (with_tokens.Find(name) == nullptr) with_tokens.entries.emplace_back(name, jinja::Value(text));
    }
    context = &with_tokens;
  }
  auto rendered = template_.Render(*context, limits);
  if (!rendered.ok()) return rendered.status().WithContext(StrCat("chat template ", origin_));
  return rendered;
}

}  // namespace glint
