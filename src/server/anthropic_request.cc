#include "server/anthropic_request.h"

#include <optional>

#include "server/json_body.h"

namespace glint::server {
namespace {

using Error = std::optional<ApiError>;

ApiError Invalid(const std::string& param, const std::string& message) { return BadRequest(message, param); }

// The block's `type`, or an error naming the block.
Error BlockType(const Json& block, const std::string& param, std::string& type) {
  if (!block.is_object()) return Invalid(param, StrCat("'", param, "' must be a content block object"));
  const Json* value = Field(block, "type");
  if (value == nullptr || !value->is_string()) return Invalid(param, StrCat("'", param, ".type' must be a string"));
  type = value->get<std::string>();
  return std::nullopt;
}

Error StringField(const Json& object, const char* name, const std::string& param, std::string& out,
                  bool required = true) {
  const Json* value = Field(object, name);
  if (value == nullptr) {
    if (!required) return std::nullopt;
    return Invalid(param, StrCat("'", param, ".", name, "' is required"));
  }
  if (!value->is_string()) return Invalid(param, StrCat("'", param, ".", name, "' must be a string"));
  out = value->get<std::string>();
  return std::nullopt;
}

// A list longer than the policy allows is refused before anything in it is read (hostile bodies stay cheap).
Error CheckListSize(const Json& list, const std::string& param, int64_t limit, const char* what) {
  if (static_cast<int64_t>(list.size()) > limit) {
    return Invalid(param, StrCat("'", param, "' has ", list.size(), " ", what, "; at most ", limit, " are accepted"));
  }
  return std::nullopt;
}

Error CheckBlockCount(const Json& blocks, const std::string& param, const RequestPolicy& policy) {
  return CheckListSize(blocks, param, policy.max_content_parts, "content blocks");
}

// System text: a string or text blocks (cache_control ignored: glint caches every prefix).
Error AppendSystemText(const Json& system, const std::string& param, const RequestPolicy& policy, std::string& out) {
  auto append = [&](const std::string& text) {
    const std::string kept = DropBillingHeader(text);
    if (kept.empty()) return;
    if (!out.empty()) out += "\n\n";
    out += kept;
  };
  if (system.is_string()) {
    append(system.get<std::string>());
    return std::nullopt;
  }
  if (!system.is_array()) return Invalid(param, StrCat("'", param, "' must be a string or an array of text blocks"));
  API_RETURN_IF_ERROR(CheckBlockCount(system, param, policy));
  for (size_t i = 0; i < system.size(); ++i) {
    const std::string block_param = StrCat(param, "[", i, "]");
    std::string type, text;
    API_RETURN_IF_ERROR(BlockType(system[i], block_param, type));
    if (type != "text")
      return Invalid(block_param, StrCat("'", block_param, "' must be a text block, got '", type, "'"));
    API_RETURN_IF_ERROR(StringField(system[i], "text", block_param, text));
    append(text);
  }
  return std::nullopt;
}

// An image block → an OpenAI image_url part (the image rules of the chat API then apply: data: URLs and allowed
// local files; http(s) URLs are refused when loaded, with that reason).
Error ReadImageBlock(const Json& block, const std::string& param, Json& part) {
  const Json* source = Field(block, "source");
  if (source == nullptr || !source->is_object()) {
    return Invalid(param, StrCat("'", param, ".source' must be an object"));
  }
  std::string kind, url;
  API_RETURN_IF_ERROR(StringField(*source, "type", param + ".source", kind));
  if (kind == "base64") {
    std::string media_type, data;
    API_RETURN_IF_ERROR(StringField(*source, "media_type", param + ".source", media_type));
    API_RETURN_IF_ERROR(StringField(*source, "data", param + ".source", data));
    url = StrCat("data:", media_type, ";base64,", data);
  } else if (kind == "url") {
    API_RETURN_IF_ERROR(StringField(*source, "url", param + ".source", url));
  } else {
    return Invalid(
        param, StrCat("'", param, ".source.type' must be base64 or url (got '", kind, "'; glint has no Files API)"));
  }
  part = {{"type", "image_url"}, {"image_url", {{"url", std::move(url)}}}};
  return std::nullopt;
}

// A tool_result's content (a string or text and image blocks) → OpenAI content parts.
Error ToolResultContent(const Json& block, const std::string& param, const RequestPolicy& policy, Json& parts) {
  parts = Json::array();
  bool is_error = false;
  if (const Json* flag = Field(block, "is_error")) {
    if (!flag->is_boolean()) return Invalid(param, StrCat("'", param, ".is_error' must be a boolean"));
    is_error = flag->get<bool>();
  }
  // The model sees a failed call as such: GLM's template has no error flag, so the text says it.
  if (is_error) parts.push_back({{"type", "text"}, {"text", "Error:"}});
  const Json* content = Field(block, "content");
  if (content == nullptr) return std::nullopt;
  if (content->is_string()) {
    parts.push_back({{"type", "text"}, {"text", *content}});
    return std::nullopt;
  }
  if (!content->is_array()) return Invalid(param, StrCat("'", param, ".content' must be a string or an array"));
  API_RETURN_IF_ERROR(CheckBlockCount(*content, param + ".content", policy));
  for (size_t i = 0; i < content->size(); ++i) {
    const std::string item_param = StrCat(param, ".content[", i, "]");
    std::string type, text;
    API_RETURN_IF_ERROR(BlockType((*content)[i], item_param, type));
    if (type == "text") {
      API_RETURN_IF_ERROR(StringField((*content)[i], "text", item_param, text));
      parts.push_back({{"type", "text"}, {"text", std::move(text)}});
    } else if (type == "image") {
      Json part;
      API_RETURN_IF_ERROR(ReadImageBlock((*content)[i], item_param, part));
      parts.push_back(std::move(part));
    } else {
      return Invalid(item_param,
                     StrCat("'", item_param, "': a tool_result holds text and image blocks, got '", type, "'"));
    }
  }
  return std::nullopt;
}

// A user turn's blocks → user messages with text and image parts, and a `tool` message per tool_result, in order.
Error UserMessages(const Json& content, const std::string& param, const RequestPolicy& policy, Json& out) {
  if (content.is_string()) {
    out.push_back({{"role", "user"}, {"content", content}});
    return std::nullopt;
  }
  Json pending = Json::array();
  const auto flush = [&] {
    if (!pending.empty()) out.push_back({{"role", "user"}, {"content", std::move(pending)}});
    pending = Json::array();
  };
  bool any_result = false;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string block_param = StrCat(param, "[", i, "]");
    const Json& block = content[i];
    std::string type, text;
    API_RETURN_IF_ERROR(BlockType(block, block_param, type));
    if (type == "text") {
      API_RETURN_IF_ERROR(StringField(block, "text", block_param, text));
      pending.push_back({{"type", "text"}, {"text", std::move(text)}});
    } else if (type == "image") {
      Json part;
      API_RETURN_IF_ERROR(ReadImageBlock(block, block_param, part));
      pending.push_back(std::move(part));
    } else if (type == "tool_result") {
      std::string id;
      API_RETURN_IF_ERROR(StringField(block, "tool_use_id", block_param, id));
      Json parts;
      API_RETURN_IF_ERROR(ToolResultContent(block, block_param, policy, parts));
      flush();
      out.push_back({{"role", "tool"}, {"tool_call_id", std::move(id)}, {"content", std::move(parts)}});
      any_result = true;
    } else {
      return Invalid(block_param, StrCat("'", block_param, "': content block type '", type,
                                         "' is not supported in a user turn (text, image and tool_result are)"));
    }
  }
  if (!any_result && pending.empty()) pending.push_back({{"type", "text"}, {"text", ""}});
  flush();
  return std::nullopt;
}

// An assistant turn's blocks → one assistant message: text as content, thinking as reasoning_content, tool_use
// blocks as tool_calls (their `input` the arguments).
Error AssistantMessage(const Json& content, const std::string& param, Json& out) {
  if (content.is_string()) {
    out.push_back({{"role", "assistant"}, {"content", content}});
    return std::nullopt;
  }
  std::string text, reasoning;
  Json calls = Json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string block_param = StrCat(param, "[", i, "]");
    const Json& block = content[i];
    std::string type, piece;
    API_RETURN_IF_ERROR(BlockType(block, block_param, type));
    if (type == "text") {
      API_RETURN_IF_ERROR(StringField(block, "text", block_param, piece));
      text += piece;
    } else if (type == "thinking") {
      API_RETURN_IF_ERROR(StringField(block, "thinking", block_param, piece));
      reasoning += piece;
    } else if (type == "redacted_thinking") {
      continue;  // encrypted by another server: nothing glint's model can read
    } else if (type == "tool_use") {
      std::string id, name;
      API_RETURN_IF_ERROR(StringField(block, "id", block_param, id));
      API_RETURN_IF_ERROR(StringField(block, "name", block_param, name));
      const Json* input = Field(block, "input");
      if (input != nullptr && !input->is_object()) {
        return Invalid(block_param, StrCat("'", block_param, ".input' must be an object"));
      }
      calls.push_back({{"id", std::move(id)},
                       {"type", "function"},
                       {"function", {{"name", std::move(name)}, {"arguments", input ? *input : Json::object()}}}});
    } else {
      return Invalid(block_param, StrCat("'", block_param, "': content block type '", type,
                                         "' is not supported in an assistant turn (text, thinking, "
                                         "redacted_thinking and tool_use are)"));
    }
  }
  Json message = {{"role", "assistant"}, {"content", text.empty() && !calls.empty() ? Json(nullptr) : Json(text)}};
  if (!reasoning.empty()) message["reasoning_content"] = std::move(reasoning);
  if (!calls.empty()) message["tool_calls"] = std::move(calls);
  out.push_back(std::move(message));
  return std::nullopt;
}

Error Messages(const Json& body, const RequestPolicy& policy, Json& chat) {
  std::string system;
  if (const Json* given = Field(body, "system"))
    API_RETURN_IF_ERROR(AppendSystemText(*given, "system", policy, system));
  const Json* messages = Field(body, "messages");
  if (messages == nullptr) return Invalid("messages", "'messages' is required");
  if (!messages->is_array() || messages->empty()) return Invalid("messages", "'messages' must be a non-empty array");
  API_RETURN_IF_ERROR(CheckListSize(*messages, "messages", policy.max_messages, "messages"));
  Json out = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string param = StrCat("messages[", i, "]");
    const Json& message = (*messages)[i];
    if (!message.is_object()) return Invalid(param, StrCat("'", param, "' must be an object"));
    std::string role;
    API_RETURN_IF_ERROR(StringField(message, "role", param, role));
    const Json* content = Field(message, "content");
    if (content == nullptr) return Invalid(param, StrCat("'", param, ".content' is required"));
    if (!content->is_string() && !content->is_array()) {
      return Invalid(param + ".content", StrCat("'", param, ".content' must be a string or an array of blocks"));
    }
    if (content->is_array()) API_RETURN_IF_ERROR(CheckBlockCount(*content, param + ".content", policy));
    if (role == "system") {  // recent Claude Code sends one: its text joins the leading system text
      API_RETURN_IF_ERROR(AppendSystemText(*content, param + ".content", policy, system));
    } else if (role == "user") {
      API_RETURN_IF_ERROR(UserMessages(*content, param + ".content", policy, out));
    } else if (role == "assistant") {
      API_RETURN_IF_ERROR(AssistantMessage(*content, param + ".content", out));
    } else {
      return Invalid(param + ".role", StrCat("'", param, ".role' must be user or assistant, got '", role, "'"));
    }
  }
  if (!system.empty()) out.insert(out.begin(), Json{{"role", "system"}, {"content", std::move(system)}});
  chat["messages"] = std::move(out);
  return std::nullopt;
}

Error Tools(const Json& body, const RequestPolicy& policy, Json& chat, std::vector<std::string>* skipped) {
  const Json* tools = Field(body, "tools");
  if (tools == nullptr) return std::nullopt;
  if (!tools->is_array()) return Invalid("tools", "'tools' must be an array");
  API_RETURN_IF_ERROR(CheckListSize(*tools, "tools", policy.max_tools, "tools"));
  Json out = Json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string param = StrCat("tools[", i, "]");
    const Json& tool = (*tools)[i];
    if (!tool.is_object()) return Invalid(param, StrCat("'", param, "' must be an object"));
    std::string type = "custom", name, description;
    API_RETURN_IF_ERROR(StringField(tool, "type", param, type, /*required=*/false));
    API_RETURN_IF_ERROR(StringField(tool, "name", param, name));
    if (type != "custom") {  // a server tool (web_search_…, code_execution_…): Anthropic runs those, glint cannot
      if (skipped != nullptr) skipped->push_back(StrCat(name, " (", type, ")"));
      continue;
    }
    API_RETURN_IF_ERROR(StringField(tool, "description", param, description, /*required=*/false));
    const Json* schema = Field(tool, "input_schema");
    if (schema == nullptr || !schema->is_object()) {
      return Invalid(param + ".input_schema", StrCat("'", param, ".input_schema' must be a JSON Schema object"));
    }
    Json function = {{"name", name}, {"description", description}, {"parameters", *schema}};
    if (const Json* strict = Field(tool, "strict")) function["strict"] = *strict;
    out.push_back({{"type", "function"}, {"function", std::move(function)}});
  }
  if (!out.empty()) chat["tools"] = std::move(out);
  return std::nullopt;
}

Error ReadToolChoice(const Json& body, Json& chat) {
  const Json* choice = Field(body, "tool_choice");
  if (choice == nullptr) return std::nullopt;
  if (!choice->is_object()) return Invalid("tool_choice", "'tool_choice' must be an object");
  std::string type, name;
  API_RETURN_IF_ERROR(StringField(*choice, "type", "tool_choice", type));
  if (const Json* flag = Field(*choice, "disable_parallel_tool_use"); flag != nullptr && !flag->is_boolean()) {
    return Invalid("tool_choice.disable_parallel_tool_use",
                   "'tool_choice.disable_parallel_tool_use' must be a boolean");
  }
  if (type == "auto" || type == "none") {
    chat["tool_choice"] = type;
  } else if (type == "any") {
    chat["tool_choice"] = "required";
  } else if (type == "tool") {
    API_RETURN_IF_ERROR(StringField(*choice, "name", "tool_choice", name));
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
  } else {
    return Invalid("tool_choice.type", StrCat("'tool_choice.type' must be auto, any, tool or none, got '", type, "'"));
  }
  return std::nullopt;
}

// thinking and output_config → the template's thinking switch and reasoning level.
Error Reasoning(const Json& body, Json& chat, bool& thinking) {
  thinking = false;  // Anthropic's default: no thinking unless asked
  if (const Json* config = Field(body, "thinking")) {
    if (!config->is_object()) return Invalid("thinking", "'thinking' must be an object");
    std::string type;
    API_RETURN_IF_ERROR(StringField(*config, "type", "thinking", type));
    if (type != "enabled" && type != "adaptive" && type != "disabled") {
      return Invalid("thinking.type",
                     StrCat("'thinking.type' must be enabled, adaptive or disabled, got '", type, "'"));
    }
    if (const Json* budget = Field(*config, "budget_tokens");
        budget != nullptr && (!budget->is_number_integer() || budget->get<int64_t>() < 1)) {
      return Invalid("thinking.budget_tokens", "'thinking.budget_tokens' must be a positive integer");
    }
    thinking = type != "disabled";
  }
  chat["chat_template_kwargs"] = {{"enable_thinking", thinking}};
  const Json* output = Field(body, "output_config");
  if (output == nullptr) return std::nullopt;
  if (!output->is_object()) return Invalid("output_config", "'output_config' must be an object");
  std::string effort;
  API_RETURN_IF_ERROR(StringField(*output, "effort", "output_config", effort, /*required=*/false));
  if (!effort.empty()) {
    if (effort == "low") {
      chat["reasoning_effort"] = "low";
    } else if (effort == "medium" || effort == "high") {
      chat["reasoning_effort"] = "high";
    } else if (effort == "max" || effort == "xhigh") {
      chat["reasoning_effort"] = "max";
    } else {
      return Invalid("output_config.effort",
                     StrCat("'output_config.effort' must be low, medium, high or max, got '", effort, "'"));
    }
  }
  if (const Json* format = Field(*output, "format")) {
    std::string type;
    API_RETURN_IF_ERROR(StringField(*format, "type", "output_config.format", type));
    const Json* schema = Field(*format, "schema");
    if (type != "json_schema" || schema == nullptr) {
      return Invalid("output_config.format",
                     "'output_config.format' must be {\"type\": \"json_schema\", \"schema\": …}");
    }
    chat["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", *schema}}}};
  }
  return std::nullopt;
}

// max_tokens, stream, stop_sequences and the sampling fields, under the chat API's names (its checks apply).
Error Sampling(const Json& body, bool count_tokens, Json& chat) {
  if (!count_tokens) {
    const Json* max_tokens = Field(body, "max_tokens");
    if (max_tokens == nullptr) return Invalid("max_tokens", "'max_tokens' is required");
    if (!max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 1) {
      return Invalid("max_tokens", "'max_tokens' must be an integer ≥ 1");
    }
    chat["max_tokens"] = *max_tokens;
    if (const Json* stream = Field(body, "stream")) chat["stream"] = *stream;
  }
  if (const Json* stops = Field(body, "stop_sequences")) chat["stop"] = *stops;
  for (const char* name : {"model", "temperature", "top_p", "top_k"}) {
    if (const Json* value = Field(body, name)) chat[name] = *value;
  }
  if (const Json* metadata = Field(body, "metadata"); metadata != nullptr && !metadata->is_object()) {
    return Invalid("metadata", "'metadata' must be an object");
  }
  return std::nullopt;
}

}  // namespace

std::string DropBillingHeader(std::string_view text) {
  std::string kept;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    if (line.substr(0, kBillingHeaderPrefix.size()) != kBillingHeaderPrefix) {
      kept.append(text.substr(at, std::min(end + 1, text.size()) - at));
    }
    at = end + 1;
  }
  return kept;
}

ApiOr<Json> MessagesToChatBody(const Json& body, const RequestPolicy& policy, bool count_tokens,
                               std::vector<std::string>* skipped_tools) {
  Json chat = Json::object();
  API_RETURN_IF_ERROR(Sampling(body, count_tokens, chat));
  API_RETURN_IF_ERROR(Messages(body, policy, chat));
  API_RETURN_IF_ERROR(Tools(body, policy, chat, skipped_tools));
  API_RETURN_IF_ERROR(ReadToolChoice(body, chat));
  bool thinking = false;
  API_RETURN_IF_ERROR(Reasoning(body, chat, thinking));
  return chat;
}

ApiOr<MessagesRequest> ParseMessagesRequest(std::string_view body_text, const RequestPolicy& policy,
                                            bool count_tokens) {
  API_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  MessagesRequest request;
  API_ASSIGN_OR_RETURN(Json chat_body, MessagesToChatBody(body, policy, count_tokens, &request.skipped));
  API_ASSIGN_OR_RETURN(request.chat, ParseChatRequestJson(chat_body, policy));
  request.max_tokens = request.chat.fields.max_tokens.value_or(0);
  request.thinking = chat_body["chat_template_kwargs"]["enable_thinking"].get<bool>();
  return request;
}

}  // namespace glint::server
