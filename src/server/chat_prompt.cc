#include "server/chat_prompt.h"

#include "server/json_schema_grammar.h"

namespace glint::server {
namespace {

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

ToolParameterTypes ParameterTypes(const Json& tools) {
  ToolParameterTypes types;
  for (const Json& tool : tools) {
    const Json& function = tool["function"];
    const std::string name = function["name"].get<std::string>();
    auto& strings = types.string_parameters[name];
    const auto parameters = function.find("parameters");
    if (parameters == function.end() || !parameters->is_object()) continue;
    const auto properties = parameters->find("properties");
    if (properties == parameters->end() || !properties->is_object()) continue;
    for (const auto& [key, schema] : properties->items()) {
      if (IsStringSchema(schema)) strings.insert(key);
    }
  }
  return types;
}

}  // namespace

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
                                  const Tokenizer& tokenizer) {
  auto rendered = chat_template.Render(ChatTemplateVariables(request));
  if (!rendered.ok()) return BadRequest(rendered.status().message(), "messages", "chat_template_error");
  ChatPrompt prompt;
  prompt.text = std::move(rendered).value();
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
  if (prompt.parse_tool_calls) prompt.tool_types = ParameterTypes(request.tools);
  auto tokens = tokenizer.Encode(prompt.text, /*parse_special=*/true);
  if (!tokens.ok()) return ApiError{500, "server_error", tokens.status().message(), "", ""};
  prompt.tokens = std::move(tokens).value();
  if (prompt.tokens.empty()) return BadRequest("the rendered prompt is empty", "messages");
  return prompt;
}

}  // namespace glint::server
