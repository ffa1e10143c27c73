#include "server/responses_request.h"

#include <algorithm>
#include <unordered_set>

#include "base/status.h"

namespace glint::server {
namespace {

using Error = std::optional<ApiError>;

bool Contains(const std::vector<std::string>& list, const std::string& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

void AddOnce(std::vector<std::string>& list, const std::string& value) {
  if (!Contains(list, value)) list.push_back(value);
}

// A string field that must be present.
Error RequireString(const Json& object, const char* name, const std::string& param, std::string& out) {
  const Json* value = Field(object, name);
  if (value == nullptr) return BadRequest(StrCat("'", param, ".", name, "' is required"), StrCat(param, ".", name));
  if (!value->is_string()) return WrongType(StrCat(param, ".", name), "a string", *value);
  out = value->get<std::string>();
  return std::nullopt;
}

// ---- tools ----

// A custom tool as the model sees it: a function whose one string argument `input` is the free-form text.
Json CustomToolAsFunction(const Json& tool, const std::string& param, const std::string& name, Error& error) {
  std::string description;
  if (const Json* given = Field(tool, "description")) {
    if (!given->is_string()) {
      error = WrongType(param + ".description", "a string", *given);
      return nullptr;
    }
    description = given->get<std::string>();
  }
  if (const Json* format = Field(tool, "format")) {
    if (!format->is_object()) {
      error = WrongType(param + ".format", "an object", *format);
      return nullptr;
    }
    const Json* syntax = Field(*format, "syntax");
    const Json* definition = Field(*format, "definition");
    if (definition != nullptr && definition->is_string()) {
      description += StrCat(description.empty() ? "" : "\n\n", "The input follows this ",
                            syntax != nullptr && syntax->is_string() ? syntax->get<std::string>() : "", " grammar:\n",
                            definition->get<std::string>());
    }
  }
  Json function = {{"name", name}};
  function["description"] = StrCat(description, description.empty() ? "" : "\n\n",
                                   "Put the whole free-form input, as raw text (not JSON), in the argument `input`.");
  function["parameters"] = {
      {"type", "object"}, {"properties", {{"input", {{"type", "string"}}}}}, {"required", Json::array({"input"})}};
  return {{"type", "function"}, {"function", std::move(function)}};
}

// tools → chat tools. Function and custom tools translate; any other type is a tool glint cannot run (web_search,
// mcp, image_generation, local_shell, namespace, ...): skipped and reported, so that Codex's requests work.
Error ReadResponsesTools(const Json& body, const RequestPolicy& policy, ResponsesRequest& request) {
  const Json* tools = Field(body, "tools");
  if (tools == nullptr) return std::nullopt;
  if (!tools->is_array()) return WrongType("tools", "an array", *tools);
  if (static_cast<int64_t>(tools->size()) > policy.max_tools) {
    return BadRequest(StrCat("'tools' has ", tools->size(), " tools; at most ", policy.max_tools, " are accepted"),
                      "tools");
  }
  Json chat_tools = Json::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string param = StrCat("tools[", i, "]");
    const Json& tool = (*tools)[i];
    if (!tool.is_object()) return WrongType(param, "an object", tool);
    const Json* type = Field(tool, "type");
    if (type == nullptr || !type->is_string()) return BadRequest(StrCat("'", param, ".type' must be a string"), param);
    const std::string kind = type->get<std::string>();
    if (kind != "function" && kind != "custom") {
      AddOnce(request.skipped_tools, kind.substr(0, 64));
      continue;
    }
    std::string name;
    API_RETURN_IF_ERROR(RequireString(tool, "name", param, name));
    if (kind == "custom") {
      Error error;
      Json function = CustomToolAsFunction(tool, param, name, error);
      if (error) return error;
      request.custom_tools.insert(name);
      chat_tools.push_back(std::move(function));
    } else {
      Json function = {{"name", name}};
      for (const char* key : {"description", "parameters", "strict"}) {
        if (const Json* value = Field(tool, key)) function[key] = *value;
      }
      chat_tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    request.tool_origin.push_back(i);
  }
  if (!chat_tools.empty()) request.chat_body["tools"] = std::move(chat_tools);
  return std::nullopt;
}

// tool_choice: "none" / "auto" / "required", {"type": "function" | "custom", "name"}, or {"type":
// "allowed_tools", "mode": "auto" | "required", ...} (the mode is kept; the subset is not enforced).
Error ReadResponsesToolChoice(const Json& body, ResponsesRequest& request) {
  const Json* choice = Field(body, "tool_choice");
  if (choice == nullptr) return std::nullopt;
  if (choice->is_string()) {
    request.chat_body["tool_choice"] = *choice;
    return std::nullopt;
  }
  if (!choice->is_object()) return WrongType("tool_choice", "a string or an object", *choice);
  const Json* type = Field(*choice, "type");
  const std::string kind = type != nullptr && type->is_string() ? type->get<std::string>() : "";
  if (kind == "function" || kind == "custom") {
    const Json* name = Field(*choice, "name");
    if (name == nullptr || !name->is_string()) {
      return BadRequest(StrCat("a named 'tool_choice' must be {\"type\": \"", kind, "\", \"name\": ...}"),
                        "tool_choice.name");
    }
    request.chat_body["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
    return std::nullopt;
  }
  if (kind == "allowed_tools") {
    const Json* mode = Field(*choice, "mode");
    if (mode != nullptr && !mode->is_string()) return WrongType("tool_choice.mode", "a string", *mode);
    request.chat_body["tool_choice"] = mode != nullptr ? *mode : Json("auto");
    return std::nullopt;
  }
  return BadRequest(StrCat("'tool_choice' of type '", kind.substr(0, 64),
                           "' names a tool glint cannot run; use none, auto, required, or a function or custom tool"),
                    "tool_choice.type");
}

// ---- reasoning, text format, include ----

// reasoning.effort → the template's switch: none and minimal turn thinking off; low → Low; medium and high →
// High; xhigh → Max (GLM-5.3's three levels). Absent: the template's default (Max).
Error ReadReasoning(const Json& body, ResponsesRequest& request) {
  const Json* reasoning = Field(body, "reasoning");
  if (reasoning == nullptr) return std::nullopt;
  if (!reasoning->is_object()) return WrongType("reasoning", "an object", *reasoning);
  const Json* effort = Field(*reasoning, "effort");
  if (effort == nullptr) return std::nullopt;
  if (!effort->is_string()) return WrongType("reasoning.effort", "a string", *effort);
  const std::string level = effort->get<std::string>();
  if (level == "none" || level == "minimal") {
    request.chat_body["chat_template_kwargs"] = {{"enable_thinking", false}};
  } else if (level == "low") {
    request.chat_body["reasoning_effort"] = "low";
  } else if (level == "medium" || level == "high") {
    request.chat_body["reasoning_effort"] = "high";
  } else if (level == "xhigh") {
    request.chat_body["reasoning_effort"] = "max";
  } else {
    return BadRequest(
        StrCat("'reasoning.effort' must be none, minimal, low, medium, high or xhigh, got '", level.substr(0, 64), "'"),
        "reasoning.effort");
  }
  return std::nullopt;
}

// text.format → response_format: text (none), json_object, json_schema {name, schema, strict, description}.
Error ReadTextFormat(const Json& body, ResponsesRequest& request) {
  const Json* text = Field(body, "text");
  if (text == nullptr) return std::nullopt;
  if (!text->is_object()) return WrongType("text", "an object", *text);
  const Json* format = Field(*text, "format");
  if (format == nullptr) return std::nullopt;
  if (!format->is_object()) return WrongType("text.format", "an object", *format);
  const Json* type = Field(*format, "type");
  const std::string kind = type != nullptr && type->is_string() ? type->get<std::string>() : "";
  if (kind == "text") return std::nullopt;
  if (kind == "json_object") {
    request.chat_body["response_format"] = {{"type", "json_object"}};
  } else if (kind == "json_schema") {
    Json schema = Json::object();
    for (const char* key : {"name", "schema", "strict", "description"}) {
      if (const Json* value = Field(*format, key)) schema[key] = *value;
    }
    if (!schema.contains("schema")) return BadRequest("'text.format.schema' is required", "text.format.schema");
    request.chat_body["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  } else {
    return BadRequest(
        StrCat("'text.format.type' must be text, json_object or json_schema, got '", kind.substr(0, 64), "'"),
        "text.format.type");
  }
  return std::nullopt;
}

// include: the extras a response may carry. Unknown values are refused, as OpenAI does; values that name
// outputs glint never makes (web search sources, ...) are accepted and have nothing to include.
Error ReadInclude(const Json& body, ResponsesRequest& request) {
  const Json* include = Field(body, "include");
  if (include == nullptr) return std::nullopt;
  if (!include->is_array()) return WrongType("include", "an array of strings", *include);
  if (include->size() > 64) return BadRequest("'include' has more than 64 entries", "include");
  for (size_t i = 0; i < include->size(); ++i) {
    const Json& value = (*include)[i];
    if (!value.is_string()) return WrongType(StrCat("include[", i, "]"), "a string", value);
    const std::string name = value.get<std::string>();
    if (name == "reasoning.encrypted_content") request.include_encrypted_reasoning = true;
    if (name == "message.output_text.logprobs") request.output_logprobs = true;
  }
  return std::nullopt;
}

// Fields the Responses API has and glint cannot honour: refused with the reason, not ignored.
Error RefuseUnsupported(const Json& body) {
  bool background = false;
  API_RETURN_IF_ERROR(ReadBool(body, "background", background));
  if (background) {
    return BadRequest(
        "'background': true is not supported: glint answers within the request (use 'stream': true for progress)",
        "background");
  }
  if (Field(body, "conversation") != nullptr) {
    return BadRequest("'conversation' is not supported (no Conversations API): use 'previous_response_id'",
                      "conversation");
  }
  if (Field(body, "prompt") != nullptr) {
    return BadRequest("'prompt' (stored prompt templates) is not supported: send 'instructions' and 'input'", "prompt");
  }
  return std::nullopt;
}

// Sampling and the other fields that map one to one, or nearly.
Error ReadGenerationFields(const Json& body, const RequestPolicy& policy, ResponsesRequest& request) {
  Json& chat = request.chat_body;
  for (const char* key : {"model", "temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty",
                          "frequency_penalty", "repetition_penalty"}) {
    if (const Json* value = Field(body, key)) chat[key] = *value;
  }
  if (const Json* value = Field(body, "max_output_tokens")) chat["max_tokens"] = *value;
  API_RETURN_IF_ERROR(ReadBool(body, "stream", request.stream));
  if (request.stream) chat["stream"] = true;
  API_RETURN_IF_ERROR(ReadBool(body, "store", request.store));
  API_RETURN_IF_ERROR(ReadBool(body, "parallel_tool_calls", request.parallel_tool_calls));
  API_RETURN_IF_ERROR(ReadInteger(body, "max_tool_calls", 1, policy.max_tool_calls, request.max_tool_calls));
  std::optional<int64_t> top_logprobs;
  API_RETURN_IF_ERROR(ReadInteger(body, "top_logprobs", 0, policy.max_top_logprobs, top_logprobs));
  request.top_logprobs = top_logprobs.value_or(0);
  if (request.top_logprobs > 0) request.output_logprobs = true;
  if (request.output_logprobs) {
    chat["logprobs"] = true;
    chat["top_logprobs"] = request.top_logprobs;
  }
  API_RETURN_IF_ERROR(ReadString(body, "instructions", request.instructions));
  API_RETURN_IF_ERROR(ReadString(body, "previous_response_id", request.previous_response_id));
  std::optional<std::string> ignored;  // checked for type only: echoed back, no effect on generation
  for (const char* key : {"prompt_cache_key", "user", "safety_identifier", "service_tier", "truncation"}) {
    API_RETURN_IF_ERROR(ReadString(body, key, ignored));
  }
  if (const Json* metadata = Field(body, "metadata"); metadata != nullptr && !metadata->is_object()) {
    return WrongType("metadata", "an object", *metadata);
  }
  return std::nullopt;
}

// ---- input items → chat messages ----

// Builds the chat messages from items, remembering for each message which Responses field it came from.
class ConversationBuilder {
 public:
  ConversationBuilder(const RequestPolicy& policy, std::vector<std::string>& skipped_items)
      : policy_(policy), skipped_items_(skipped_items) {}

  void AddSystem(const std::string& text, const std::string& origin) {
    Push({{"role", "system"}, {"content", text}}, origin);
  }

  Error AddItems(const Json& items, const std::string& prefix) {
    for (size_t i = 0; i < items.size(); ++i) API_RETURN_IF_ERROR(AddItem(items[i], StrCat(prefix, "[", i, "]")));
    return std::nullopt;
  }

  Json TakeMessages() { return std::move(messages_); }
  const std::vector<std::string>& origins() const { return origins_; }

 private:
  Error AddItem(const Json& item, const std::string& param) {
    if (!item.is_object()) return WrongType(param, "an item object", item);
    const Json* type = Field(item, "type");
    if (type != nullptr && !type->is_string()) return WrongType(param + ".type", "a string", *type);
    const std::string kind = type != nullptr ? type->get<std::string>() : "message";
    if (kind == "message") return AddMessage(item, param);
    if (kind == "function_call" || kind == "custom_tool_call") return AddCall(item, param, kind == "custom_tool_call");
    if (kind == "function_call_output" || kind == "custom_tool_call_output") return AddCallOutput(item, param);
    if (kind == "reasoning") return AddReasoning(item, param);
    if (kind == "item_reference") {
      return BadRequest(StrCat("'", param, "' is an item_reference, which is not supported: send the item itself"),
                        param + ".type");
    }
    static const std::unordered_set<std::string> kHostedItems = {"web_search_call",
                                                                 "file_search_call",
                                                                 "computer_call",
                                                                 "computer_call_output",
                                                                 "image_generation_call",
                                                                 "code_interpreter_call",
                                                                 "local_shell_call",
                                                                 "local_shell_call_output",
                                                                 "shell_call",
                                                                 "shell_call_output",
                                                                 "apply_patch_call",
                                                                 "apply_patch_call_output",
                                                                 "mcp_list_tools",
                                                                 "mcp_approval_request",
                                                                 "mcp_approval_response",
                                                                 "mcp_call",
                                                                 "tool_search_call",
                                                                 "tool_search_output",
                                                                 "compaction"};
    if (kHostedItems.count(kind) != 0) {
      AddOnce(skipped_items_, kind);
      return std::nullopt;
    }
    return BadRequest(StrCat("'", param, ".type' '", kind.substr(0, 64),
                             "' is not an input item glint knows (message, function_call, function_call_output, "
                             "custom_tool_call, custom_tool_call_output, reasoning)"),
                      param + ".type");
  }

  Error AddMessage(const Json& item, const std::string& param) {
    std::string role;
    API_RETURN_IF_ERROR(RequireString(item, "role", param, role));
    if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
      return BadRequest(
          StrCat("'", param, ".role' must be user, assistant, system or developer, got '", role.substr(0, 64), "'"),
          param + ".role");
    }
    const Json* content = Field(item, "content");
    if (content == nullptr) return BadRequest(StrCat("'", param, ".content' is required"), param + ".content");
    Json chat_content;
    API_RETURN_IF_ERROR(ReadContent(*content, param + ".content", chat_content));
    if (role == "assistant") {
      Json& turn = AssistantTurn(param, /*for_calls=*/false);
      if (turn["content"].is_null()) {
        turn["content"] = std::move(chat_content);
      } else {
        turn["content"] = Json::array({{{"type", "text"}, {"text", TextOf(turn["content"])}},
                                       {{"type", "text"}, {"text", TextOf(chat_content)}}});
      }
      return std::nullopt;
    }
    Push({{"role", role}, {"content", std::move(chat_content)}}, param);
    return std::nullopt;
  }

  // Content: a string, or parts: input_text / output_text / text / refusal (text), input_image (an image).
  Error ReadContent(const Json& content, const std::string& param, Json& out) const {
    if (content.is_string()) {
      out = content;
      return std::nullopt;
    }
    if (!content.is_array()) return WrongType(param, "a string or an array of content parts", content);
    if (static_cast<int64_t>(content.size()) > policy_.max_content_parts) {
      return BadRequest(StrCat("'", param, "' has ", content.size(), " content parts; at most ",
                               policy_.max_content_parts, " are accepted"),
                        param);
    }
    out = Json::array();
    for (size_t j = 0; j < content.size(); ++j) {
      const std::string part_param = StrCat(param, "[", j, "]");
      const Json& part = content[j];
      if (!part.is_object()) return WrongType(part_param, "a content part object", part);
      const Json* type = Field(part, "type");
      const std::string kind = type != nullptr && type->is_string() ? type->get<std::string>() : "";
      if (kind == "input_text" || kind == "output_text" || kind == "text" || kind == "refusal" ||
          kind == "summary_text" || kind == "reasoning_text") {
        std::string text;
        API_RETURN_IF_ERROR(RequireString(part, kind == "refusal" ? "refusal" : "text", part_param, text));
        out.push_back({{"type", "text"}, {"text", std::move(text)}});
      } else if (kind == "input_image") {
        const Json* url = Field(part, "image_url");
        if (url == nullptr || !url->is_string()) {
          return BadRequest(
              StrCat("'", part_param, ".image_url' must be a data: URL string (file_id images are not supported)"),
              part_param + ".image_url");
        }
        out.push_back({{"type", "image_url"}, {"image_url", {{"url", *url}}}});
      } else {
        return BadRequest(StrCat("content part type '", kind.substr(0, 64),
                                 "' is not supported: glint takes input_text, output_text, refusal and input_image"),
                          part_param + ".type");
      }
    }
    return std::nullopt;
  }

  Error AddCall(const Json& item, const std::string& param, bool custom) {
    std::string call_id;
    std::string name;
    API_RETURN_IF_ERROR(RequireString(item, "call_id", param, call_id));
    API_RETURN_IF_ERROR(RequireString(item, "name", param, name));
    Json function = {{"name", name}};
    if (custom) {
      std::string input;
      API_RETURN_IF_ERROR(RequireString(item, "input", param, input));
      function["arguments"] = Json{{"input", std::move(input)}}.dump();
    } else {
      std::string arguments;
      API_RETURN_IF_ERROR(RequireString(item, "arguments", param, arguments));
      function["arguments"] = arguments.empty() ? "{}" : arguments;
    }
    Json& turn = AssistantTurn(param, /*for_calls=*/true);
    if (!turn.contains("tool_calls")) turn["tool_calls"] = Json::array();
    turn["tool_calls"].push_back({{"id", call_id}, {"type", "function"}, {"function", std::move(function)}});
    return std::nullopt;
  }

  Error AddCallOutput(const Json& item, const std::string& param) {
    std::string call_id;
    API_RETURN_IF_ERROR(RequireString(item, "call_id", param, call_id));
    const Json* output = Field(item, "output");
    if (output == nullptr) return BadRequest(StrCat("'", param, ".output' is required"), param + ".output");
    Json content;
    API_RETURN_IF_ERROR(ReadContent(*output, param + ".output", content));
    Push({{"role", "tool"}, {"tool_call_id", call_id}, {"content", std::move(content)}}, param);
    return std::nullopt;
  }

  // The reasoning's text waits for the assistant turn that follows it.
  Error AddReasoning(const Json& item, const std::string& param) {
    std::string text;
    for (const char* key : {"content", "summary"}) {
      const Json* parts = Field(item, key);
      if (parts == nullptr) continue;
      Json chat_parts;
      API_RETURN_IF_ERROR(ReadContent(*parts, StrCat(param, ".", key), chat_parts));
      text = TextOf(chat_parts);
      if (!text.empty()) break;
    }
    if (text.empty()) {
      std::optional<std::string> encrypted;
      if (const Json* value = Field(item, "encrypted_content"); value != nullptr && !value->is_string()) {
        return WrongType(param + ".encrypted_content", "a string", *value);
      }
      (void)ReadString(item, "encrypted_content", encrypted);
      if (encrypted && encrypted->starts_with(kEncryptedReasoningPrefix)) {
        text = encrypted->substr(kEncryptedReasoningPrefix.size());
      }
    }
    if (!pending_reasoning_.empty() && !text.empty()) pending_reasoning_ += "\n";
    pending_reasoning_ += text;
    return std::nullopt;
  }

  // The assistant message the next assistant item joins: the last message when it is an assistant turn that can
  // take it (text joins a turn without calls yet; calls join any assistant turn), else a new one.
  Json& AssistantTurn(const std::string& param, bool for_calls) {
    const bool reuse = !messages_.empty() && messages_.back()["role"] == "assistant" && pending_reasoning_.empty() &&
                       (for_calls || !messages_.back().contains("tool_calls"));
    if (!reuse) Push({{"role", "assistant"}, {"content", nullptr}}, param);
    Json& turn = messages_.back();
    if (!pending_reasoning_.empty()) {
      turn["reasoning_content"] = std::move(pending_reasoning_);
      pending_reasoning_.clear();
    }
    return turn;
  }

  static std::string TextOf(const Json& content) {
    if (content.is_string()) return content.get<std::string>();
    std::string text;
    for (const Json& part : content) {
      if (part["type"] != "text") continue;
      if (!text.empty()) text += "\n";
      text += part["text"].get<std::string>();
    }
    return text;
  }

  void Push(Json message, const std::string& origin) {
    messages_.push_back(std::move(message));
    origins_.push_back(origin);
  }

  const RequestPolicy& policy_;
  std::vector<std::string>& skipped_items_;
  Json messages_ = Json::array();
  std::vector<std::string> origins_;  // [messages]: the Responses field each came from
  std::string pending_reasoning_;
};

// input: a string (one user message) or a list of items.
Error ReadInput(const Json& body, const RequestPolicy& policy, ResponsesRequest& request) {
  const Json* input = Field(body, "input");
  if (input == nullptr) {
    request.input_items = Json::array();
    return std::nullopt;
  }
  if (input->is_string()) {
    request.input_items = Json::array({{{"type", "message"}, {"role", "user"}, {"content", *input}}});
    return std::nullopt;
  }
  if (!input->is_array()) return WrongType("input", "a string or an array of items", *input);
  if (static_cast<int64_t>(input->size()) > policy.max_messages) {
    return BadRequest(StrCat("'input' has ", input->size(), " items; at most ", policy.max_messages, " are accepted"),
                      "input");
  }
  request.input_items = *input;
  return std::nullopt;
}

// "messages[3].content[1]" (a chat error's param) → the Responses field it came from.
std::string RenameParam(const std::string& param, const std::vector<std::string>& origins,
                        const std::vector<size_t>& tool_origin) {
  auto indexed = [&](std::string_view prefix, auto&& rename) -> std::optional<std::string> {
    if (!param.starts_with(prefix)) return std::nullopt;
    const size_t close = param.find(']', prefix.size());
    if (close == std::string::npos) return std::nullopt;
    const std::string digits = param.substr(prefix.size(), close - prefix.size());
    if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) {
      return std::nullopt;
    }
    return rename(static_cast<size_t>(std::stoul(digits)), param.substr(close + 1));
  };
  if (auto renamed = indexed("messages[", [&](size_t i, const std::string& rest) {
        if (i >= origins.size()) return std::string("input");
        return rest.starts_with(".content") ? origins[i] + rest : origins[i];
      })) {
    return *renamed;
  }
  if (auto renamed = indexed("tools[", [&](size_t i, const std::string& rest) {
        return StrCat("tools[", i < tool_origin.size() ? tool_origin[i] : i, "]",
                      rest.starts_with(".function") ? rest.substr(9) : rest);
      })) {
    return *renamed;
  }
  if (param == "messages") return "input";
  if (param == "max_tokens") return "max_output_tokens";
  if (param.starts_with("response_format")) return "text.format";
  if (param.starts_with("chat_template_kwargs") || param == "reasoning_effort") return "reasoning.effort";
  return param;
}

ApiError RenameError(ApiError error, const std::vector<std::string>& origins, const std::vector<size_t>& tool_origin) {
  if (error.param.empty()) return error;
  const std::string renamed = RenameParam(error.param, origins, tool_origin);
  if (renamed == error.param) return error;
  for (size_t at = 0; (at = error.message.find(error.param, at)) != std::string::npos; at += renamed.size()) {
    error.message.replace(at, error.param.size(), renamed);
  }
  error.param = renamed;
  return error;
}

}  // namespace

ApiOr<ResponsesRequest> ParseResponsesRequest(std::string_view body_text, const RequestPolicy& policy) {
  API_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  ResponsesRequest request;
  request.chat_body = Json::object();
  API_RETURN_IF_ERROR(RefuseUnsupported(body));
  API_RETURN_IF_ERROR(ReadGenerationFields(body, policy, request));
  API_RETURN_IF_ERROR(ReadInput(body, policy, request));
  API_RETURN_IF_ERROR(ReadResponsesTools(body, policy, request));
  API_RETURN_IF_ERROR(ReadResponsesToolChoice(body, request));
  API_RETURN_IF_ERROR(ReadReasoning(body, request));
  API_RETURN_IF_ERROR(ReadTextFormat(body, request));
  API_RETURN_IF_ERROR(ReadInclude(body, request));
  // The conversation is checked now (and translated again, with the stored items, by TranslateResponsesRequest)
  // so that a malformed input is a 400 before the store is consulted.
  ConversationBuilder check(policy, request.skipped_items);
  API_RETURN_IF_ERROR(check.AddItems(request.input_items, "input"));
  request.body = std::move(body);
  return request;
}

ApiOr<ChatRequest> TranslateResponsesRequest(ResponsesRequest& request, const Json* previous_items,
                                             const RequestPolicy& policy) {
  std::vector<std::string> skipped;
  ConversationBuilder conversation(policy, skipped);
  if (request.instructions && !request.instructions->empty()) {
    conversation.AddSystem(*request.instructions, "instructions");
  }
  if (previous_items != nullptr) {
    API_RETURN_IF_ERROR(conversation.AddItems(*previous_items, "previous_response_id"));
  }
  API_RETURN_IF_ERROR(conversation.AddItems(request.input_items, "input"));
  Json chat = request.chat_body;
  chat["messages"] = conversation.TakeMessages();
  auto parsed = ParseChatRequestJson(chat, policy);
  if (!parsed.ok()) return RenameError(parsed.error(), conversation.origins(), request.tool_origin);
  return std::move(parsed).value();
}

}  // namespace glint::server
