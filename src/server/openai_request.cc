#include "server/openai_request.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <unordered_set>

namespace glint::server {

using Error = std::optional<ApiError>;

std::string TypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

ApiError WrongType(const std::string& param, const char* expected, const Json& value) {
  return BadRequest(StrCat("'", param, "' must be ", expected, ", got ", TypeName(value)), param);
}

const Json* Field(const Json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

Error ReadBool(const Json& object, const char* name, bool& out) {
  const Json* value = Field(object, name);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) return WrongType(name, "a boolean", *value);
  out = value->get<bool>();
  return std::nullopt;
}

Error ReadString(const Json& object, const char* name, std::optional<std::string>& out) {
  const Json* value = Field(object, name);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) return WrongType(name, "a string", *value);
  out = value->get<std::string>();
  return std::nullopt;
}

Error ToInteger(const Json& value, const std::string& param, int64_t min, int64_t max, int64_t& out) {
  int64_t parsed = 0;
  // Unsigned first: nlohmann's is_number_integer() is also true for unsigned values, and 2^64 − 1 read as int64
  // is −1. Values beyond int64 saturate to its maximum (every range check below then refuses or clamps them).
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    parsed = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                            : static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    parsed = value.get<int64_t>();
  } else if (value.is_number_float() && std::isfinite(value.get<double>()) &&
             std::floor(value.get<double>()) == value.get<double>() && std::fabs(value.get<double>()) < 9e18) {
    parsed = static_cast<int64_t>(value.get<double>());
  } else {
    return WrongType(param, "an integer", value);
  }
  if (parsed < min || parsed > max) {
    if (max == std::numeric_limits<int64_t>::max()) {
      return BadRequest(StrCat("'", param, "' must be at least ", min, ", got ", parsed), param);
    }
    return BadRequest(StrCat("'", param, "' must be in [", min, ", ", max, "], got ", parsed), param);
  }
  out = parsed;
  return std::nullopt;
}

Error ReadInteger(const Json& object, const char* name, int64_t min, int64_t max, std::optional<int64_t>& out) {
  const Json* value = Field(object, name);
  if (value == nullptr) return std::nullopt;
  int64_t parsed = 0;
  API_RETURN_IF_ERROR(ToInteger(*value, name, min, max, parsed));
  out = parsed;
  return std::nullopt;
}

namespace {

// A number in [min, max] (or (min, max] when min_exclusive).
Error ReadNumber(const Json& object, const char* name, double min, double max, bool min_exclusive, float& out) {
  const Json* value = Field(object, name);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) return WrongType(name, "a number", *value);
  const double x = value->get<double>();
  if (!std::isfinite(x) || x > max || x < min || (min_exclusive && x == min)) {
    return BadRequest(StrCat("'", name, "' must be in ", min_exclusive ? "(" : "[", min, ", ", max, "], got ", x),
                      name);
  }
  out = static_cast<float>(x);
  return std::nullopt;
}

// A list longer than `limit` is refused before any of it is read.
Error CheckCount(const Json& list, const std::string& param, int64_t limit, const char* what) {
  if (static_cast<int64_t>(list.size()) > limit) {
    return BadRequest(StrCat("'", param, "' has ", list.size(), " ", what, "; at most ", limit, " are accepted"),
                      param);
  }
  return std::nullopt;
}

Error ReadTokenIds(const Json& value, const std::string& param, int64_t vocab_size, int64_t limit,
                   std::vector<int32_t>& out) {
  if (!value.is_array()) return WrongType(param, "an array of token ids", value);
  API_RETURN_IF_ERROR(CheckCount(value, param, limit, "token ids"));
  out.clear();
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    int64_t id = 0;
    API_RETURN_IF_ERROR(ToInteger(value[i], StrCat(param, "[", i, "]"), 0,
                                  vocab_size > 0 ? vocab_size - 1 : std::numeric_limits<int32_t>::max(), id));
    out.push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// OpenAI's logit_bias: {"token id": bias} with ids as decimal strings and biases in [−100, 100].
Error ReadLogitBias(const Json& body, const RequestPolicy& policy, std::vector<std::pair<int32_t, float>>& out) {
  const Json* bias = Field(body, "logit_bias");
  if (bias == nullptr) return std::nullopt;
  if (!bias->is_object()) return WrongType("logit_bias", "an object mapping token ids to biases", *bias);
  API_RETURN_IF_ERROR(CheckCount(*bias, "logit_bias", policy.max_logit_bias, "entries"));
  const int64_t max_id = policy.vocab_size > 0 ? policy.vocab_size - 1 : std::numeric_limits<int32_t>::max();
  for (const auto& [key, value] : bias->items()) {
    const std::string param = StrCat("logit_bias[", key.substr(0, 32), "]");
    int64_t id = 0;
    const bool digits = !key.empty() && key.size() <= 10 &&
                        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || (id = std::stoll(key)) > max_id) {
      return BadRequest(
          StrCat("'logit_bias' keys must be token ids in [0, ", max_id, "], got '", key.substr(0, 32), "'"),
          "logit_bias");
    }
    if (!value.is_number()) return WrongType(param, "a number", value);
    const double x = value.get<double>();
    if (!(x >= -100 && x <= 100)) {
      return BadRequest(StrCat("'", param, "' must be in [-100, 100], got ", x), "logit_bias");
    }
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(x));
  }
  return std::nullopt;
}

Error ReadSamplingFields(const Json& body, const RequestPolicy& policy, SamplingFields& fields) {
  GenerationSampling& s = fields.sampling;
  s = policy.default_sampling;
  API_RETURN_IF_ERROR(ReadNumber(body, "temperature", 0.0, 2.0, false, s.temperature));
  API_RETURN_IF_ERROR(ReadNumber(body, "top_p", 0.0, 1.0, true, s.top_p));
  std::optional<int64_t> top_k;
  API_RETURN_IF_ERROR(ReadInteger(body, "top_k", -1, std::numeric_limits<int32_t>::max(), top_k));
  if (top_k) s.top_k = *top_k < 0 ? 0 : *top_k;  // −1 and 0 both mean off (vLLM accepts −1)
  API_RETURN_IF_ERROR(ReadNumber(body, "min_p", 0.0, 1.0, false, s.min_p));
  std::optional<int64_t> seed;
  API_RETURN_IF_ERROR(
      ReadInteger(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), seed));
  if (seed) s.seed = static_cast<uint64_t>(*seed);
  API_RETURN_IF_ERROR(ReadNumber(body, "presence_penalty", -2.0, 2.0, false, s.presence_penalty));
  API_RETURN_IF_ERROR(ReadNumber(body, "frequency_penalty", -2.0, 2.0, false, s.frequency_penalty));
  API_RETURN_IF_ERROR(ReadNumber(body, "repetition_penalty", 0.0, 2.0, true, s.repetition_penalty));

  std::optional<int64_t> max_tokens;
  std::optional<int64_t> max_completion_tokens;
  API_RETURN_IF_ERROR(ReadInteger(body, "max_tokens", 1, std::numeric_limits<int64_t>::max(), max_tokens));
  API_RETURN_IF_ERROR(
      ReadInteger(body, "max_completion_tokens", 1, std::numeric_limits<int64_t>::max(), max_completion_tokens));
  fields.max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;

  if (const Json* stop = Field(body, "stop")) {
    if (stop->is_string()) {
      fields.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      API_RETURN_IF_ERROR(CheckCount(*stop, "stop", policy.max_stop_strings, "strings"));
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) return WrongType(StrCat("stop[", i, "]"), "a string", (*stop)[i]);
        fields.stop.push_back((*stop)[i].get<std::string>());
      }
    } else {
      return WrongType("stop", "a string or an array of strings", *stop);
    }
    for (const std::string& text : fields.stop) {
      if (text.empty()) return BadRequest("'stop' strings must not be empty", "stop");
      if (static_cast<int64_t>(text.size()) > policy.max_stop_bytes) {
        return BadRequest(StrCat("a 'stop' string has ", text.size(), " bytes; at most ", policy.max_stop_bytes),
                          "stop");
      }
    }
  }
  if (const Json* ids = Field(body, "stop_token_ids")) {
    API_RETURN_IF_ERROR(
        ReadTokenIds(*ids, "stop_token_ids", policy.vocab_size, policy.max_stop_token_ids, fields.stop_token_ids));
  }
  API_RETURN_IF_ERROR(ReadLogitBias(body, policy, s.logit_bias));
  API_RETURN_IF_ERROR(ReadBool(body, "ignore_eos", fields.ignore_eos));
  std::optional<int64_t> n;
  API_RETURN_IF_ERROR(ReadInteger(body, "n", 1, policy.max_n, n));
  if (n) fields.n = *n;
  API_RETURN_IF_ERROR(ReadBool(body, "stream", fields.stream));
  if (const Json* options = Field(body, "stream_options")) {
    if (!options->is_object()) return WrongType("stream_options", "an object", *options);
    if (!fields.stream) {
      return BadRequest("'stream_options' is only allowed when 'stream' is true", "stream_options");
    }
    if (const Json* usage = Field(*options, "include_usage")) {
      if (!usage->is_boolean()) return WrongType("stream_options.include_usage", "a boolean", *usage);
      fields.include_usage = usage->get<bool>();
    }
  }
  API_RETURN_IF_ERROR(ReadConstraint(body, fields.constraint));
  return std::nullopt;
}

bool ValidToolName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || c == ':';
  });
}

// Flattens OpenAI content (a string, or text and image_url parts) into one string. Consecutive text parts are
// joined with "\n", as vLLM does for templates that expect a string; an image part becomes kImageMarker with no
// separator (the released template concatenates parts) and is recorded in `images`.
Error ReadContent(const Json& content, const std::string& param, const RequestPolicy& policy, size_t message,
                  std::string& out, std::vector<ImagePart>& images) {
  if (content.is_string()) {
    out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return WrongType(param, "a string or an array of content parts", content);
  API_RETURN_IF_ERROR(CheckCount(content, param, policy.max_content_parts, "content parts"));
  out.clear();
  bool previous_was_text = false;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string part_param = StrCat(param, "[", i, "]");
    if (!part.is_object()) return WrongType(part_param, "a content part object", part);
    const Json* type = Field(part, "type");
    if (type == nullptr || !type->is_string())
      return BadRequest(StrCat("'", part_param, ".type' must be a string"), part_param);
    if (type->get<std::string>() == "image_url") {
      const Json* image = Field(part, "image_url");
      const Json* url = image != nullptr && image->is_object() ? Field(*image, "url") : image;
      if (url == nullptr || !url->is_string() || url->get<std::string>().empty()) {
        return BadRequest(StrCat("'", part_param, ".image_url' must be {\"url\": \"data:image/...;base64,...\"}"),
                          part_param);
      }
      if (static_cast<int64_t>(images.size()) >= policy.max_images) {
        return BadRequest(StrCat("'", part_param, "' is image ", images.size() + 1, "; a request may carry at most ",
                                 policy.max_images, " images"),
                          part_param);
      }
      images.push_back({url->get<std::string>(), part_param, message, out.size()});
      out += kImageMarker;
      previous_was_text = false;
      continue;
    }
    if (type->get<std::string>() != "text") {
      return BadRequest(StrCat("content part type '", type->get<std::string>(),
                               "' is not supported: glint takes text and image_url parts"),
                        part_param);
    }
    const Json* text = Field(part, "text");
    if (text == nullptr || !text->is_string())
      return BadRequest(StrCat("'", part_param, ".text' must be a string"), part_param);
    if (previous_was_text) out += "\n";
    out += text->get<std::string>();
    previous_was_text = true;
  }
  return std::nullopt;
}

Error ReadToolCalls(const Json& calls, const std::string& param, int64_t max_calls, Json& out) {
  if (!calls.is_array()) return WrongType(param, "an array", calls);
  API_RETURN_IF_ERROR(CheckCount(calls, param, max_calls, "tool calls"));
  out = Json::array();
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string call_param = StrCat(param, "[", j, "]");
    const Json& call = calls[j];
    if (!call.is_object()) return WrongType(call_param, "an object", call);
    const Json* function = Field(call, "function");
    if (function == nullptr || !function->is_object()) {
      return BadRequest(StrCat("'", call_param, ".function' must be an object"), call_param);
    }
    const Json* name = Field(*function, "name");
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
      return BadRequest(StrCat("'", call_param, ".function.name' must be a non-empty string"), call_param);
    }
    Json arguments = Json::object();
    if (const Json* given = Field(*function, "arguments")) {
      if (given->is_string()) {
        // The same linear, depth-capped parser as the body (arguments are client text too).
        auto parsed = ParseJsonObject(given->get<std::string>());
        if (!parsed.ok()) {
          return BadRequest(StrCat("'", call_param, ".function.arguments' must be a JSON object encoded as a string: ",
                                   parsed.error().message),
                            call_param);
        }
        arguments = std::move(parsed).value();
      } else if (given->is_object()) {
        arguments = *given;
      } else {
        return WrongType(call_param + ".function.arguments", "a string", *given);
      }
    }
    Json normalized = {{"type", "function"}, {"function", {{"name", *name}, {"arguments", std::move(arguments)}}}};
    if (const Json* id = Field(call, "id")) {
      if (!id->is_string()) return WrongType(call_param + ".id", "a string", *id);
      normalized["id"] = *id;
    }
    out.push_back(std::move(normalized));
  }
  return std::nullopt;
}

Error ReadMessages(const Json& body, const RequestPolicy& policy, Json& out, std::vector<ImagePart>& images) {
  const Json* messages = Field(body, "messages");
  if (messages == nullptr) return BadRequest("'messages' is required", "messages");
  if (!messages->is_array()) return WrongType("messages", "an array", *messages);
  if (messages->empty()) return BadRequest("'messages' must not be empty", "messages");
  API_RETURN_IF_ERROR(CheckCount(*messages, "messages", policy.max_messages, "messages"));
  out = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string param = StrCat("messages[", i, "]");
    const Json& message = (*messages)[i];
    if (!message.is_object()) return WrongType(param, "an object", message);
    const Json* role_value = Field(message, "role");
    if (role_value == nullptr || !role_value->is_string()) {
      return BadRequest(StrCat("'", param, ".role' must be a string"), param + ".role");
    }
    std::string role = role_value->get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return BadRequest(
          StrCat("'", param, ".role' must be system, developer, user, assistant or tool, got '", role, "'"),
          param + ".role");
    }
    Json normalized = {{"role", role}};
    const Json* content = Field(message, "content");
    Json tool_calls = Json::array();
    if (role == "assistant") {
      if (const Json* calls = Field(message, "tool_calls")) {
        API_RETURN_IF_ERROR(ReadToolCalls(*calls, param + ".tool_calls", policy.max_tool_calls, tool_calls));
      }
    }
    if (content != nullptr) {
      std::string text;
      API_RETURN_IF_ERROR(ReadContent(*content, param + ".content", policy, i, text, images));
      normalized["content"] = std::move(text);
    } else if (role == "assistant") {
      normalized["content"] = nullptr;  // allowed: a turn with only tool calls
    } else {
      return BadRequest(StrCat("'", param, ".content' is required for a ", role, " message"), param + ".content");
    }
    if (role == "assistant") {
      std::optional<std::string> reasoning;
      API_RETURN_IF_ERROR(ReadString(message, "reasoning_content", reasoning));
      if (!reasoning) API_RETURN_IF_ERROR(ReadString(message, "reasoning", reasoning));
      if (reasoning) normalized["reasoning_content"] = *reasoning;
      if (!tool_calls.empty()) normalized["tool_calls"] = std::move(tool_calls);
    }
    if (role == "tool") {
      std::optional<std::string> id;
      API_RETURN_IF_ERROR(ReadString(message, "tool_call_id", id));
      if (id) normalized["tool_call_id"] = *id;
    }
    std::optional<std::string> name;
    API_RETURN_IF_ERROR(ReadString(message, "name", name));
    if (name) normalized["name"] = *name;
    out.push_back(std::move(normalized));
  }
  return std::nullopt;
}

Error ReadTools(const Json& body, const RequestPolicy& policy, ChatRequest& chat) {
  if (const Json* tools = Field(body, "tools")) {
    if (!tools->is_array()) return WrongType("tools", "an array", *tools);
    API_RETURN_IF_ERROR(CheckCount(*tools, "tools", policy.max_tools, "tools"));
    std::unordered_set<std::string> names;  // a hash set: the duplicate check was quadratic in the tools
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string param = StrCat("tools[", i, "]");
      const Json& tool = (*tools)[i];
      if (!tool.is_object()) return WrongType(param, "an object", tool);
      const Json* type = Field(tool, "type");
      if (type == nullptr || !type->is_string() || type->get<std::string>() != "function") {
        return BadRequest(StrCat("'", param, ".type' must be \"function\""), param);
      }
      const Json* function = Field(tool, "function");
      if (function == nullptr || !function->is_object()) {
        return BadRequest(StrCat("'", param, ".function' must be an object"), param);
      }
      const Json* name = Field(*function, "name");
      if (name == nullptr || !name->is_string() || !ValidToolName(name->get<std::string>())) {
        return BadRequest(StrCat("'", param, ".function.name' must be 1 to 128 letters, digits, _ - . or :"), param);
      }
      if (!names.insert(name->get<std::string>()).second) {
        return BadRequest(StrCat("tool '", name->get<std::string>(), "' is defined twice"), param);
      }
      Json normalized_function = {{"name", *name}};
      if (const Json* description = Field(*function, "description")) {
        if (!description->is_string()) return WrongType(param + ".function.description", "a string", *description);
        normalized_function["description"] = *description;
      }
      if (const Json* parameters = Field(*function, "parameters")) {
        if (!parameters->is_object()) return WrongType(param + ".function.parameters", "an object", *parameters);
        normalized_function["parameters"] = *parameters;
      }
      if (const Json* strict = Field(*function, "strict")) {
        if (!strict->is_boolean()) return WrongType(param + ".function.strict", "a boolean", *strict);
        if (strict->get<bool>()) chat.strict_tools.insert(name->get<std::string>());
      }
      chat.tools.push_back({{"type", "function"}, {"function", std::move(normalized_function)}});
    }
  }
  chat.tool_choice = chat.tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (const Json* choice = Field(body, "tool_choice")) {
    if (choice->is_string()) {
      const std::string value = choice->get<std::string>();
      if (value == "none") {
        chat.tool_choice = ToolChoice::kNone;
      } else if (value == "auto") {
        chat.tool_choice = chat.tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
      } else if (value == "required") {
        chat.tool_choice = ToolChoice::kRequired;
      } else {
        return BadRequest(StrCat("'tool_choice' must be none, auto, required or a named function, got '", value, "'"),
                          "tool_choice");
      }
    } else if (choice->is_object()) {
      const Json* function = Field(*choice, "function");
      const Json* name = function != nullptr && function->is_object() ? Field(*function, "name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        return BadRequest("a named 'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                          "tool_choice");
      }
      chat.tool_choice = ToolChoice::kNamed;
      chat.tool_choice_name = name->get<std::string>();
      const bool known = std::any_of(chat.tools.begin(), chat.tools.end(),
                                     [&](const Json& tool) { return tool["function"]["name"] == *name; });
      if (!known) {
        return BadRequest(StrCat("'tool_choice' names '", chat.tool_choice_name, "', which is not in 'tools'"),
                          "tool_choice");
      }
    } else {
      return WrongType("tool_choice", "a string or an object", *choice);
    }
    if ((chat.tool_choice == ToolChoice::kRequired || chat.tool_choice == ToolChoice::kNamed) && chat.tools.empty()) {
      return BadRequest("'tool_choice' requires a tool but 'tools' is empty", "tool_choice");
    }
  }
  return std::nullopt;
}

// GLM-5.3's reasoning levels: low / high / max (any case) → the template's Low / High / Max.
Error ReadReasoningEffort(const Json& effort, const std::string& param, std::string& out) {
  if (!effort.is_string()) return WrongType(param, "a string", effort);
  std::string value = effort.get<std::string>();
  std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) { return std::tolower(c); });
  if (value == "low") {
    out = "Low";
  } else if (value == "high") {
    out = "High";
  } else if (value == "max") {
    out = "Max";
  } else {
    return BadRequest(StrCat("'", param, "' must be low, high or max (GLM-5.3's levels), got '",
                             effort.get<std::string>().substr(0, 64), "'"),
                      param);
  }
  return std::nullopt;
}

// chat_template_kwargs reach the template as variables: the ones the template reads are checked like request
// fields (a reasoning_effort string is rendered verbatim into the system turn), the rest are passed on, their
// strings kept plain text like message content (chat_prompt.h).
Error ReadTemplateKwargs(const Json& kwargs, ChatRequest& chat) {
  if (!kwargs.is_object()) return WrongType("chat_template_kwargs", "an object", kwargs);
  for (const char* reserved : {"messages", "tools", "add_generation_prompt"}) {
    if (kwargs.contains(reserved)) {
      return BadRequest(StrCat("'chat_template_kwargs' may not set '", reserved, "': use the request field"),
                        "chat_template_kwargs");
    }
  }
  chat.chat_template_kwargs = kwargs;
  for (const char* flag : {"enable_thinking", "clear_thinking"}) {
    if (const Json* value = Field(kwargs, flag); value != nullptr && !value->is_boolean()) {
      return WrongType(StrCat("chat_template_kwargs.", flag), "a boolean", *value);
    }
  }
  if (const Json* effort = Field(kwargs, "reasoning_effort")) {
    std::string level;
    API_RETURN_IF_ERROR(ReadReasoningEffort(*effort, "chat_template_kwargs.reasoning_effort", level));
    chat.chat_template_kwargs["reasoning_effort"] = level;
    chat.reasoning_effort = level;
  }
  return std::nullopt;
}

Error ReadChatTemplateFields(const Json& body, ChatRequest& chat) {
  if (const Json* kwargs = Field(body, "chat_template_kwargs")) API_RETURN_IF_ERROR(ReadTemplateKwargs(*kwargs, chat));
  if (const Json* effort = Field(body, "reasoning_effort")) {  // the request field wins over the kwarg
    std::string level;
    API_RETURN_IF_ERROR(ReadReasoningEffort(*effort, "reasoning_effort", level));
    chat.reasoning_effort = level;
  }
  API_RETURN_IF_ERROR(ReadBool(body, "add_generation_prompt", chat.add_generation_prompt));
  bool continue_final_message = false;
  API_RETURN_IF_ERROR(ReadBool(body, "continue_final_message", continue_final_message));
  if (continue_final_message) {
    return BadRequest("'continue_final_message' is not supported", "continue_final_message");
  }
  return std::nullopt;
}

Error ReadModel(const Json& body, std::optional<std::string>& model) { return ReadString(body, "model", model); }

}  // namespace

std::string ErrorBody(const ApiError& error) {
  Json body = {{"error",
                {{"message", error.message},
                 {"type", error.type},
                 {"param", error.param.empty() ? Json(nullptr) : Json(error.param)},
                 {"code", error.code.empty() ? Json(nullptr) : Json(error.code)}}}};
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

ApiOr<ChatRequest> ParseChatRequest(std::string_view body_text, const RequestPolicy& policy) {
  API_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  return ParseChatRequestJson(body, policy);
}

ApiOr<ChatRequest> ParseChatRequestJson(const Json& body, const RequestPolicy& policy) {
  ChatRequest chat;
  API_RETURN_IF_ERROR(ReadModel(body, chat.model));
  API_RETURN_IF_ERROR(ReadMessages(body, policy, chat.messages, chat.images));
  API_RETURN_IF_ERROR(ReadSamplingFields(body, policy, chat.fields));
  API_RETURN_IF_ERROR(ReadBool(body, "logprobs", chat.logprobs));
  std::optional<int64_t> top_logprobs;
  API_RETURN_IF_ERROR(ReadInteger(body, "top_logprobs", 0, policy.max_top_logprobs, top_logprobs));
  if (top_logprobs) {
    if (!chat.logprobs) return BadRequest("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    chat.top_logprobs = *top_logprobs;
  }
  API_RETURN_IF_ERROR(ReadTools(body, policy, chat));
  API_RETURN_IF_ERROR(ReadChatTemplateFields(body, chat));
  return chat;
}

ApiOr<CompletionRequest> ParseCompletionRequest(std::string_view body_text, const RequestPolicy& policy) {
  API_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  CompletionRequest completion;
  API_RETURN_IF_ERROR(ReadModel(body, completion.model));
  const Json* prompt = Field(body, "prompt");
  if (prompt == nullptr) return BadRequest("'prompt' is required", "prompt");
  auto token_list = [](const Json& value) {
    return value.is_array() && !value.empty() &&
           std::all_of(value.begin(), value.end(), [](const Json& x) { return x.is_number(); });
  };
  if (prompt->is_string()) {
    completion.prompts.push_back({false, prompt->get<std::string>(), {}});
  } else if (token_list(*prompt)) {
    PromptInput input;
    input.is_tokens = true;
    API_RETURN_IF_ERROR(ReadTokenIds(*prompt, "prompt", policy.vocab_size, policy.max_token_ids, input.tokens));
    completion.prompts.push_back(std::move(input));
  } else if (prompt->is_array() && !prompt->empty()) {
    if (static_cast<int64_t>(prompt->size()) > policy.max_prompts) {
      return BadRequest(StrCat("'prompt' has ", prompt->size(), " prompts; at most ", policy.max_prompts), "prompt");
    }
    for (size_t i = 0; i < prompt->size(); ++i) {
      const Json& item = (*prompt)[i];
      const std::string param = StrCat("prompt[", i, "]");
      if (item.is_string()) {
        completion.prompts.push_back({false, item.get<std::string>(), {}});
      } else if (token_list(item)) {
        PromptInput input;
        input.is_tokens = true;
        API_RETURN_IF_ERROR(ReadTokenIds(item, param, policy.vocab_size, policy.max_token_ids, input.tokens));
        completion.prompts.push_back(std::move(input));
      } else {
        return WrongType(param, "a string or a non-empty array of token ids", item);
      }
    }
  } else {
    return WrongType("prompt", "a string, an array of token ids, or a non-empty array of those", *prompt);
  }
  API_RETURN_IF_ERROR(ReadSamplingFields(body, policy, completion.fields));
  API_RETURN_IF_ERROR(ReadInteger(body, "logprobs", 0, policy.max_top_logprobs, completion.logprobs));
  API_RETURN_IF_ERROR(ReadBool(body, "echo", completion.echo));
  if (completion.echo && completion.logprobs) {
    return BadRequest("'echo' with 'logprobs' needs prompt logprobs, which are not supported", "echo");
  }
  std::optional<std::string> suffix;
  API_RETURN_IF_ERROR(ReadString(body, "suffix", suffix));
  if (suffix && !suffix->empty()) return BadRequest("'suffix' is not supported", "suffix");
  std::optional<int64_t> best_of;
  API_RETURN_IF_ERROR(ReadInteger(body, "best_of", 1, policy.max_n, best_of));
  if (best_of && *best_of != completion.fields.n) {
    return BadRequest("'best_of' other than 'n' is not supported", "best_of");
  }
  return completion;
}

ApiOr<TokenizeRequest> ParseTokenizeRequest(std::string_view body_text, const RequestPolicy& policy) {
  API_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  TokenizeRequest request;
  API_RETURN_IF_ERROR(ReadModel(body, request.model));
  API_RETURN_IF_ERROR(ReadString(body, "prompt", request.prompt));
  API_RETURN_IF_ERROR(ReadBool(body, "add_special_tokens", request.add_special_tokens));
  API_RETURN_IF_ERROR(ReadBool(body, "return_token_strs", request.return_token_strs));
  const bool has_messages = Field(body, "messages") != nullptr;
  if (request.prompt.has_value() == has_messages) {
    return BadRequest("give exactly one of 'prompt' (a string) or 'messages'", request.prompt ? "messages" : "prompt");
  }
  if (has_messages) {
    API_RETURN_IF_ERROR(ReadMessages(body, policy, request.chat.messages, request.chat.images));
    API_RETURN_IF_ERROR(ReadTools(body, policy, request.chat));
    API_RETURN_IF_ERROR(ReadChatTemplateFields(body, request.chat));
  }
  return request;
}

ApiOr<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body_text, const RequestPolicy& policy) {
  API_ASSIGN_OR_RETURN(Json body, ParseJsonObject(body_text));
  DetokenizeRequest request;
  API_RETURN_IF_ERROR(ReadModel(body, request.model));
  const Json* tokens = Field(body, "tokens");
  if (tokens == nullptr) return BadRequest("'tokens' is required", "tokens");
  API_RETURN_IF_ERROR(ReadTokenIds(*tokens, "tokens", policy.vocab_size, policy.max_token_ids, request.tokens));
  return request;
}

}  // namespace glint::server
