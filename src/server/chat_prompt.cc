#include "server/chat_prompt.h"

#include "server/json_schema_grammar.h"

namespace glint::server {
namespace {

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// Which arguments are strings, and which calls the grammar constrains (CompileToolConstraint: every tool under
// "required", the named one, the strict ones under "auto"): their values stream as the model writes them.
ToolParameterTypes ParameterTypes(const ChatRequest& request) {
  ToolParameterTypes types;
  for (const Json& tool : request.tools) {
    const Json& function = tool["function"];
    const std::string name = function["name"].get<std::string>();
    const bool constrained = request.tool_choice == ToolChoice::kRequired ||
                             (request.tool_choice == ToolChoice::kNamed && name == request.tool_choice_name) ||
                             (request.tool_choice == ToolChoice::kAuto && request.strict_tools.count(name) > 0);
    auto& strings = types.string_parameters[name];
    const auto parameters = function.find("parameters");
    if (parameters == function.end() || !parameters->is_object()) continue;
    const auto properties = parameters->find("properties");
    if (properties == parameters->end() || !properties->is_object()) continue;
    for (const auto& [key, schema] : properties->items()) {
      if (IsStringSchema(schema)) {
        strings.insert(key);
      } else if (constrained) {
        types.constrained_json_parameters[name].insert(key);
      }
    }
  }
  return types;
}

constexpr std::string_view kMark = "\xEE\x80\x80";  // U+E000

// Marks every string in `value`, object keys included (a tool schema's property names reach the prompt).
void MarkStrings(Json& value, const Tokenizer& tokenizer) {
  if (value.is_string()) {
    value = MarkAddedTokens(value.get_ref<const std::string&>(), tokenizer);
  } else if (value.is_array()) {
    for (Json& item : value) MarkStrings(item, tokenizer);
  } else if (value.is_object()) {
    // Marking is injective, so the keys stay distinct; appending to ordered_map's vector skips its linear search.
    Json marked = Json::object();
    auto& members = static_cast<Json::object_t::Container&>(marked.get_ref<Json::object_t&>());
    members.reserve(value.size());
    for (auto& [key, item] : value.items()) {
      MarkStrings(item, tokenizer);
      members.emplace_back(MarkAddedTokens(key, tokenizer), std::move(item));
    }
    value = std::move(marked);
  }
}

// A message content that holds image markers (openai_request.h, kImageMarker at the recorded offsets): each marker
// becomes `image_marker` (the checkpoint's own tokens' text, or kImageMarker when empty) and, with `mark_with`, the
// client's text around them is marked while the markers are not, so they tokenize as special tokens.
void RewriteImageParts(const ChatRequest& request, Json& messages, const Tokenizer* mark_with,
                       std::string_view image_marker) {
  const std::string_view marker = image_marker.empty() ? kImageMarker : image_marker;
  auto text = [&](std::string_view client_text) {
    return mark_with != nullptr ? MarkAddedTokens(client_text, *mark_with) : std::string(client_text);
  };
  size_t k = 0;
  while (k < request.images.size()) {
    const size_t message = request.images[k].message;
    const std::string& content = request.messages[message]["content"].get_ref<const std::string&>();
    std::string rewritten;
    size_t from = 0;
    for (; k < request.images.size() && request.images[k].message == message; ++k) {
      const size_t at = request.images[k].offset;
      rewritten += text(std::string_view(content).substr(from, at - from));
      rewritten += marker;
      from = at + kImageMarker.size();
    }
    rewritten += text(std::string_view(content).substr(from));
    messages[message]["content"] = std::move(rewritten);
  }
}

}  // namespace

std::string MarkAddedTokens(std::string_view text, const Tokenizer& tokenizer) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i).starts_with(kMark)) {
      out += kMark;
      out += kMark;
      i += kMark.size();
    } else if (const size_t length = tokenizer.AddedTokenLengthAt(text, i)) {
      out += kMark;
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += text[i++];
    }
  }
  return out;
}

UnmarkedText RemoveMarks(std::string_view marked) {
  UnmarkedText out;
  out.text.reserve(marked.size());
  for (size_t i = 0; i < marked.size();) {
    if (!marked.substr(i).starts_with(kMark)) {
      out.text += marked[i++];
    } else if (marked.substr(i + kMark.size()).starts_with(kMark)) {  // a doubled mark is the client's U+E000
      out.text += kMark;
      i += 2 * kMark.size();
    } else {
      out.literal_positions.push_back(out.text.size());
      i += kMark.size();
    }
  }
  return out;
}

jinja::Object ChatTemplateVariables(const ChatRequest& request) {
  jinja::Object variables;
  for (const auto& [key, value] : request.chat_template_kwargs.items()) variables.Set(key, jinja::FromJson(value));
  // The request's own fields win over the same names in chat_template_kwargs.
  variables.Set("messages", jinja::FromJson(request.messages));
  if (!request.tools.empty()) variables.Set("tools", jinja::FromJson(request.tools));
  variables.Set("add_generation_prompt", jinja::Value(request.add_generation_prompt));
  if (request.reasoning_effort) variables.Set("reasoning_effort", jinja::Value(*request.reasoning_effort));
  return variables;
}

ApiOr<ChatPrompt> BuildChatPrompt(const ChatRequest& request, const ChatTemplate& chat_template,
                                  const Tokenizer& tokenizer, const ChatPromptOptions& options) {
  const bool mark = !options.allow_special_tokens_in_content;
  // Unmarked, only image parts in another spelling than kImageMarker need a copy of the messages.
  const bool respell = !request.images.empty() && !options.image_marker.empty() && options.image_marker != kImageMarker;
  ChatRequest marked;
  if (mark) {
    marked.messages = request.messages;
    marked.tools = request.tools;
    marked.chat_template_kwargs = request.chat_template_kwargs;
    MarkStrings(marked.messages, tokenizer);
    RewriteImageParts(request, marked.messages, &tokenizer, options.image_marker);
    MarkStrings(marked.tools, tokenizer);
    MarkStrings(marked.chat_template_kwargs, tokenizer);
    marked.add_generation_prompt = request.add_generation_prompt;
    marked.reasoning_effort = request.reasoning_effort;  // validated: Low, High or Max
  }
  ChatRequest respelled;
  if (!mark && respell) {
    respelled = request;
    RewriteImageParts(request, respelled.messages, nullptr, options.image_marker);
  }
  auto rendered = chat_template.Render(ChatTemplateVariables(mark ? marked : respell ? respelled : request));
  if (!rendered.ok()) return BadRequest(rendered.status().message(), "messages", "chat_template_error");
  ChatPrompt prompt;
  UnmarkedText unmarked;
  if (mark) {
    unmarked = RemoveMarks(rendered.value());
  } else {
    unmarked.text = std::move(rendered).value();
  }
  prompt.text = std::move(unmarked.text);
  // Every token is at most max_token_bytes long, so the prompt has at least bytes / max_token_bytes tokens: a
  // prompt that cannot fit is refused without tokenizing it.
  const int64_t fewest_tokens = static_cast<int64_t>(prompt.text.size() / tokenizer.max_token_bytes());
  if (options.max_model_len > 0 && fewest_tokens >= options.max_model_len) {
    return BadRequest(StrCat("the prompt has at least ", fewest_tokens, " tokens but this model's context is ",
                             options.max_model_len, " tokens (prompt + output)"),
                      "messages", "context_length_exceeded");
  }
  const bool forced = request.tool_choice == ToolChoice::kRequired || request.tool_choice == ToolChoice::kNamed;
  if (forced) {
    if (EndsWith(prompt.text, "<think>")) prompt.text += "</think>";
    prompt.text += "<tool_call>";
    prompt.forced_call = "";
    if (request.tool_choice == ToolChoice::kNamed) {
      prompt.text += request.tool_choice_name;
      prompt.forced_call = request.tool_choice_name;
    }
  }
  prompt.reasoning_start =
      EndsWith(prompt.text, "<think>") ? ReasoningParser::Start::kReasoning : ReasoningParser::Start::kContent;
  prompt.parse_tool_calls = request.tool_choice != ToolChoice::kNone;
  if (prompt.parse_tool_calls) prompt.tool_types = ParameterTypes(request);
  // Positions past the rendered text (the forced call appended above) are the server's own: none is literal.
  auto tokens = tokenizer.EncodeWithLiterals(prompt.text, unmarked.literal_positions);
  if (!tokens.ok()) return ApiError{500, "server_error", tokens.status().message(), "", ""};
  prompt.tokens = std::move(tokens).value();
  if (prompt.tokens.empty()) return BadRequest("the rendered prompt is empty", "messages");
  return prompt;
}

}  // namespace glint::server
