// The chat template loader and a GLM-5.3-style template (tests/data/chat_templates/glm53.jinja) rendering system,
// user, assistant and tool turns, tools, reasoning effort, thinking history and the generation prompt.
#include "tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "test_util.h"

namespace glint {
namespace {

using Json = nlohmann::ordered_json;

std::string Glm53Template() {
  auto text = ReadFile(testing::TestDataPath("chat_templates/glm53.jinja"));
  EXPECT_TRUE(text.ok());
  return text.ok() ? *text : "";
}

ChatTemplate LoadGlm53() {
  auto loaded = ChatTemplate::FromSource(Glm53Template(), "glm53.jinja");
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  return std::move(loaded).value();
}

Result<std::string> Render(const ChatTemplate& chat_template, const Json& variables) {
  const jinja::Value value = jinja::FromJson(variables);
  return chat_template.Render(value.as_object());
}

const Json kTools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"},
  "days": {"type": "integer"}}, "required": ["city"]}}}])");

const char kToolsBlock[] =
    "<|system|>\n# Tools\n\nYou may call one or more of these functions. Their signatures are inside "
    "<tools></tools>:\n<tools>\n"
    R"({"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", )"
    R"("parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, )"
    R"("required": ["city"]}}})"
    "\n</tools>\n\nCall a function like this:\n<tool_call>function_name<arg_key>argument_name</arg_key>"
    "<arg_value>argument_value</arg_value></tool_call>";

// An agent loop: a tool call with reasoning, its result, an answer with reasoning, then a new user message.
const Json kAgentTurns = Json::parse(R"([
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": "", "reasoning_content": "Need the tool.", "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
  {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
  {"role": "assistant", "content": "It is sunny.", "reasoning_content": "Report it."},
  {"role": "user", "content": "Thanks"}])");

TEST(ChatTemplate, SystemUserAndGenerationPrompt) {
  const ChatTemplate chat_template = LoadGlm53();
  ASSERT_OK_AND_ASSIGN(std::string out,
                       Render(chat_template, {{"messages", Json::parse(R"([{"role": "system", "content": "Be brief."},
                                                  {"role": "user", "content": "Hi"}])")},
                                              {"add_generation_prompt", true}}));
  EXPECT_EQ(out, "[gMASK]<sop><|system|>Reasoning Effort: Max<|system|>Be brief.<|user|>Hi<|assistant|><think>");
}

TEST(ChatTemplate, ToolsToolCallsObservationsAndEffort) {
  const ChatTemplate chat_template = LoadGlm53();
  ASSERT_OK_AND_ASSIGN(std::string out, Render(chat_template, {{"messages", kAgentTurns},
                                                               {"tools", kTools},
                                                               {"add_generation_prompt", true},
                                                               {"reasoning_effort", "Low"}}));
  EXPECT_EQ(out, std::string("[gMASK]<sop><|system|>Reasoning Effort: Low") + kToolsBlock +
                     "<|user|>Weather in Paris?<|assistant|><think></think><tool_call>get_weather"
                     "<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>2"
                     "</arg_value></tool_call><|observation|><tool_response>Sunny</tool_response>"
                     "<|assistant|><think></think>It is sunny.<|user|>Thanks<|assistant|><think>");
}

TEST(ChatTemplate, ThinkingHistoryIsKeptOnlyWhenClearThinkingIsFalse) {
  const ChatTemplate chat_template = LoadGlm53();
  ASSERT_OK_AND_ASSIGN(
      std::string kept,
      Render(chat_template, {{"messages", kAgentTurns}, {"add_generation_prompt", true}, {"clear_thinking", false}}));
  EXPECT_NE(kept.find("<|assistant|><think>Need the tool.</think><tool_call>get_weather"), std::string::npos) << kept;
  EXPECT_NE(kept.find("<|assistant|><think>Report it.</think>It is sunny."), std::string::npos) << kept;

  // Turns after the last user message (the current agent loop) keep their reasoning by default.
  Json current_loop = Json(kAgentTurns);
  current_loop.erase(current_loop.end() - 1);
  ASSERT_OK_AND_ASSIGN(std::string loop, Render(chat_template, {{"messages", current_loop}}));
  EXPECT_EQ(loop,
            "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Weather in Paris?<|assistant|><think>Need the tool."
            "</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days"
            "</arg_key><arg_value>2</arg_value></tool_call><|observation|><tool_response>Sunny</tool_response>"
            "<|assistant|><think>Report it.</think>It is sunny.");
}

TEST(ChatTemplate, ThinkingOffContentPartsAndInlineThink) {
  const ChatTemplate chat_template = LoadGlm53();
  const Json messages = Json::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": ", part two"}]},
    {"role": "assistant", "content": "<think>inline</think>answer"},
    {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"},
    {"role": "user", "content": "next"}])");
  ASSERT_OK_AND_ASSIGN(
      std::string out,
      Render(chat_template, {{"messages", messages}, {"add_generation_prompt", true}, {"enable_thinking", false}}));
  EXPECT_EQ(out,
            "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>part one, part two<|assistant|><think></think>"
            "answer<|observation|><tool_response>r1</tool_response><tool_response>r2</tool_response>"
            "<|user|>next<|assistant|><think></think>");
}

TEST(ChatTemplate, TemplateErrorsReachTheCaller) {
  const ChatTemplate chat_template = LoadGlm53();
  EXPECT_ERROR_CONTAINS(Render(chat_template, {{"messages", Json::array()}, {"reasoning_effort", "Medium"}}),
                        "reasoning_effort must be Low, High or Max, not Medium");
  EXPECT_ERROR_CONTAINS(Render(chat_template, {{"messages", Json::parse(R"([{"role": "wizard", "content": "x"}])")}}),
                        "unknown role: wizard");
  EXPECT_OK(Render(chat_template, {{"messages", Json::array()}}).status());
}

TEST(ChatTemplate, LoadsFromTheCheckpointDirectory) {
  const std::string dir = testing::MakeTempDir("chat_template");
  EXPECT_ERROR_CONTAINS(ChatTemplate::Load(dir), "no chat template in");

  Json config = {{"eos_token", "<|endoftext|>"},
                 {"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
                 {"chat_template", "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"}};
  ASSERT_OK(WriteFileAtomic(JoinPath(dir, "tokenizer_config.json"), config.dump()));
  ASSERT_OK_AND_ASSIGN(ChatTemplate from_config, ChatTemplate::Load(dir));
  EXPECT_EQ(from_config.origin(), JoinPath(dir, "tokenizer_config.json"));
  ASSERT_OK_AND_ASSIGN(std::string out, Render(from_config, {{"messages", {{{"role", "user"}, {"content", "x"}}}}}));
  EXPECT_EQ(out, "<s>x<|endoftext|>");
  // A variable given by the caller wins over the checkpoint's special token.
  ASSERT_OK_AND_ASSIGN(out, Render(from_config, {{"messages", {{{"content", "y"}}}}, {"eos_token", "E"}}));
  EXPECT_EQ(out, "<s>yE");

  config["chat_template"] =
      Json::array({{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}});
  ASSERT_OK(WriteFileAtomic(JoinPath(dir, "tokenizer_config.json"), config.dump()));
  ASSERT_OK_AND_ASSIGN(ChatTemplate named, ChatTemplate::Load(dir));
  ASSERT_OK_AND_ASSIGN(out, Render(named, Json::object()));
  EXPECT_EQ(out, "D");

  // chat_template.jinja wins over tokenizer_config.json.
  ASSERT_OK(WriteFileAtomic(JoinPath(dir, "chat_template.jinja"), Glm53Template()));
  ASSERT_OK_AND_ASSIGN(ChatTemplate from_file, ChatTemplate::Load(dir));
  EXPECT_EQ(from_file.origin(), JoinPath(dir, "chat_template.jinja"));
  ASSERT_OK_AND_ASSIGN(out, Render(from_file, {{"messages", Json::array()}, {"add_generation_prompt", true}}));
  EXPECT_EQ(out, "[gMASK]<sop><|system|>Reasoning Effort: Max<|assistant|><think>");
}

TEST(ChatTemplate, BadFilesAreClearErrors) {
  const std::string dir = testing::MakeTempDir("chat_template_bad");
  ASSERT_OK(WriteFileAtomic(JoinPath(dir, "tokenizer_config.json"), "{not json"));
  EXPECT_ERROR_CONTAINS(ChatTemplate::Load(dir), "is not a JSON object");
  ASSERT_OK(WriteFileAtomic(JoinPath(dir, "tokenizer_config.json"), R"({"eos_token": "x"})"));
  EXPECT_ERROR_CONTAINS(ChatTemplate::Load(dir), "has no \"chat_template\"");
  ASSERT_OK(WriteFileAtomic(JoinPath(dir, "tokenizer_config.json"), R"({"chat_template": 5})"));
  EXPECT_ERROR_CONTAINS(ChatTemplate::Load(dir), "must be a string or a list");
  ASSERT_OK(
      WriteFileAtomic(JoinPath(dir, "tokenizer_config.json"), R"({"chat_template": [{"name": "x", "template": ""}]})"));
  EXPECT_ERROR_CONTAINS(ChatTemplate::Load(dir), "without an entry named \"default\"");
  ASSERT_OK(WriteFileAtomic(JoinPath(dir, "chat_template.jinja"), "{% for %}"));
  EXPECT_ERROR_CONTAINS(ChatTemplate::Load(dir), "chat_template.jinja: template line 1");
}

}  // namespace
}  // namespace glint
