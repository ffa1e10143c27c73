// The streaming parsers of GLM's output: reasoning vs content, and tool calls → OpenAI tool_calls. Every test
// feeds the same text whole, split at every byte position (one and two cuts), byte by byte and in random pieces,
// and requires the same result each time.
#include <nlohmann/json.hpp>
#include <random>

#include "test_util.h"
#include "tokenizer/reasoning_parser.h"
#include "tokenizer/tool_call_parser.h"

namespace glint {
namespace {

using Json = nlohmann::json;

struct Parsed {
  std::string reasoning;
  std::string content;
  std::vector<std::string> names;      // per call
  std::vector<std::string> arguments;  // per call, fragments concatenated
  std::vector<bool> truncated;         // per call
  int deltas_with_name = 0;

  bool operator==(const Parsed& other) const {
    return reasoning == other.reasoning && content == other.content && names == other.names &&
           arguments == other.arguments && truncated == other.truncated;
  }
};

std::ostream& operator<<(std::ostream& out, const Parsed& p) {
  out << "reasoning=[" << p.reasoning << "] content=[" << p.content << "]";
  for (size_t i = 0; i < p.names.size(); ++i) {
    out << " call " << p.names[i] << " " << p.arguments[i] << (p.truncated[i] ? " (truncated)" : "");
  }
  return out;
}

struct ParserSetup {
  ReasoningParser::Start start = ReasoningParser::Start::kReasoning;
  bool tools = true;
  const ToolParameterTypes* types = nullptr;
  std::optional<std::string> forced_call;  // StartInsideCall(name)
};

// Reasoning parser first, then the tool-call parser on its content, as the server chains them.
Parsed Feed(const std::vector<std::string_view>& pieces, const ParserSetup& setup) {
  ReasoningParser reasoning_parser(setup.start);
  ToolCallParser tool_parser(setup.types);
  if (setup.forced_call) tool_parser.StartInsideCall(*setup.forced_call);
  Parsed parsed;
  std::vector<bool> done;
  auto absorb = [&](const std::string& content, const std::vector<ToolCallDelta>& calls) {
    parsed.content += content;
    for (const ToolCallDelta& delta : calls) {
      if (delta.index >= static_cast<int>(parsed.names.size())) {
        EXPECT_EQ(delta.index, static_cast<int>(parsed.names.size())) << "calls must start in order";
        EXPECT_FALSE(delta.name.empty()) << "a call's first delta carries its name";
        EXPECT_TRUE(done.empty() || done.back()) << "a call is done before the next one starts";
        parsed.names.push_back(delta.name);
        parsed.arguments.emplace_back();
        parsed.truncated.push_back(false);
        done.push_back(false);
      } else {
        EXPECT_TRUE(delta.name.empty()) << "the name is sent once";
      }
      const auto call = static_cast<size_t>(delta.index);
      EXPECT_FALSE(done[call]) << "nothing follows a call's done delta";
      if (!delta.name.empty()) ++parsed.deltas_with_name;
      parsed.arguments[call] += delta.arguments;
      done[call] = delta.done;
      parsed.truncated[call] = delta.truncated;
      EXPECT_TRUE(delta.done || !delta.truncated) << "truncated comes with done";
    }
  };
  auto feed_content = [&](const std::string& text, bool finish) {
    std::string content;
    std::vector<ToolCallDelta> calls;
    if (setup.tools) {
      tool_parser.Push(text, content, calls);
      if (finish) tool_parser.Finish(content, calls);
    } else {
      content = text;
    }
    absorb(content, calls);
  };
  for (std::string_view piece : pieces) {
    std::string content;
    reasoning_parser.Push(piece, parsed.reasoning, content);
    feed_content(content, false);
  }
  std::string content;
  reasoning_parser.Finish(parsed.reasoning, content);
  feed_content(content, true);
  for (size_t i = 0; i < done.size(); ++i) EXPECT_TRUE(done[i]) << "every call is done at the end: " << i;
  return parsed;
}

// Every way of cutting `text` tried here gives the same result as feeding it whole; returns that result.
Parsed RunAllChunkings(std::string_view text, const ParserSetup& setup) {
  const Parsed whole = Feed({text}, setup);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    EXPECT_EQ(Feed({text.substr(0, cut), text.substr(cut)}, setup), whole) << "cut at " << cut;
  }
  if (text.size() <= 160) {
    for (size_t a = 1; a < text.size(); ++a) {
      for (size_t b = a + 1; b < text.size(); ++b) {
        const Parsed parsed = Feed({text.substr(0, a), text.substr(a, b - a), text.substr(b)}, setup);
        if (!(parsed == whole)) {
          ADD_FAILURE() << "cuts at " << a << ", " << b << ": " << parsed << " vs " << whole;
          return whole;
        }
      }
    }
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  EXPECT_EQ(Feed(bytes, setup), whole) << "byte by byte";
  std::mt19937 random(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::string_view> pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t length = std::min<size_t>(text.size() - at, 1 + random() % 12);
      pieces.push_back(text.substr(at, length));
      at += length;
    }
    EXPECT_EQ(Feed(pieces, setup), whole) << "random pieces, trial " << trial;
  }
  return whole;
}

TEST(ReasoningParser, SplitsAtCloseTagWhateverTheChunking) {
  ParserSetup setup;
  setup.tools = false;
  Parsed p = RunAllChunkings("Let me think. <thi nk> </think >still</think>The answer is 4.", setup);
  EXPECT_EQ(p.reasoning, "Let me think. <thi nk> </think >still");
  EXPECT_EQ(p.content, "The answer is 4.");
}

TEST(ReasoningParser, NoCloseTagMeansAllReasoning) {
  ParserSetup setup;
  setup.tools = false;
  Parsed p = RunAllChunkings("thinking and cut off </thi", setup);
  EXPECT_EQ(p.reasoning, "thinking and cut off </thi");
  EXPECT_EQ(p.content, "");
}

TEST(ReasoningParser, ContentStartOpensReasoningOnlyWithLeadingThink) {
  ParserSetup setup;
  setup.tools = false;
  setup.start = ReasoningParser::Start::kContent;
  Parsed p = RunAllChunkings("\n <think>hmm</think>Hi <think>not a tag here</think>", setup);
  EXPECT_EQ(p.reasoning, "hmm");
  EXPECT_EQ(p.content, "Hi <think>not a tag here</think>");
  p = RunAllChunkings("Hello <think>x</think>", setup);
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "Hello <think>x</think>");
  p = RunAllChunkings("  <thin", setup);
  EXPECT_EQ(p.content, "  <thin");
}

TEST(ReasoningParser, PartialTagLength) {
  EXPECT_EQ(PartialTagLength("abc</th", "</think>"), 4u);
  EXPECT_EQ(PartialTagLength("abc<", "</think>"), 1u);
  EXPECT_EQ(PartialTagLength("abc", "</think>"), 0u);
  EXPECT_EQ(PartialTagLength("</think>", "</think>"), 0u);  // a whole tag is found, not held
  EXPECT_EQ(PartialTagLength("", "</think>"), 0u);
}

ToolParameterTypes WeatherTypes() {
  ToolParameterTypes types;
  types.string_parameters["get_weather"] = {"city", "note"};
  types.string_parameters["write_file"] = {"path", "content"};
  return types;
}

TEST(ToolCallParser, GlmCallsBecomeOpenAiCallsWhateverTheChunking) {
  const ToolParameterTypes types = WeatherTypes();
  ParserSetup setup;
  setup.types = &types;
  const std::string text =
      "Plan: call it.</think>Checking.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris \"FR\""
      "</arg_value><arg_key>days</arg_key><arg_value>3</arg_value><arg_key>opts</arg_key><arg_value>{\"unit\": "
      "\"C\"}</arg_value></tool_call>\n<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value>"
      "</tool_call>";
  Parsed p = RunAllChunkings(text, setup);
  EXPECT_EQ(p.reasoning, "Plan: call it.");
  EXPECT_EQ(p.content, "Checking.");
  ASSERT_EQ(p.names.size(), 2u);
  EXPECT_EQ(p.names[0], "get_weather");
  EXPECT_EQ(p.names[1], "get_weather");
  EXPECT_EQ(p.deltas_with_name, 2);
  EXPECT_EQ(Json::parse(p.arguments[0]), Json::parse(R"({"city": "Paris \"FR\"", "days": 3, "opts": {"unit": "C"}})"));
  EXPECT_EQ(p.arguments[0], R"({"city": "Paris \"FR\"", "days": 3, "opts": {"unit":"C"}})");
  EXPECT_EQ(Json::parse(p.arguments[1]), Json::parse(R"({"city": "Oslo"})"));
}

TEST(ToolCallParser, SchemaDecidesStringsUnknownToolsParseJson) {
  const ToolParameterTypes types = WeatherTypes();
  ParserSetup setup;
  setup.start = ReasoningParser::Start::kContent;
  setup.types = &types;
  // "note" is a string in the schema: "42" and "true" stay strings; for an unknown tool they become JSON.
  Parsed p = RunAllChunkings(
      "<tool_call>get_weather<arg_key>note</arg_key><arg_value>42</arg_value></tool_call>"
      "<tool_call>other<arg_key>n</arg_key><arg_value> 42 </arg_value><arg_key>b</arg_key><arg_value>true"
      "</arg_value><arg_key>s</arg_key><arg_value>plain text</arg_value><arg_key>e</arg_key><arg_value>"
      "</arg_value></tool_call>",
      setup);
  ASSERT_EQ(p.names.size(), 2u);
  EXPECT_EQ(p.arguments[0], R"({"note": "42"})");
  EXPECT_EQ(p.arguments[1], R"({"n": 42, "b": true, "s": "plain text", "e": ""})");
  EXPECT_EQ(p.content, "");
}

TEST(ToolCallParser, StringValuesStreamBeforeTheyAreComplete) {
  const ToolParameterTypes types = WeatherTypes();
  ToolCallParser parser(&types);
  std::string content;
  std::vector<ToolCallDelta> calls;
  parser.Push("<tool_call>write_file<arg_key>content</arg_key><arg_value>line 1\nline", content, calls);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "write_file");
  EXPECT_EQ(calls[0].arguments, "{\"content\": \"line 1\\nline");
  calls.clear();
  parser.Push(" 2</arg_val", content, calls);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, " 2");
  calls.clear();
  parser.Push("ue></tool_call>", content, calls);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, "\"}");
  EXPECT_EQ(content, "");
}

TEST(ToolCallParser, NamesAreSentAsSoonAsComplete) {
  ToolCallParser parser;
  std::string content;
  std::vector<ToolCallDelta> calls;
  parser.Push("<tool_call>lookup", content, calls);
  EXPECT_TRUE(calls.empty());  // the name may continue
  parser.Push("<arg_key>q", content, calls);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "lookup");
  EXPECT_EQ(calls[0].arguments, "");
}

TEST(ToolCallParser, CallsCutByTheEndAreTruncatedNeverMadeUp) {
  ParserSetup setup;
  setup.start = ReasoningParser::Start::kContent;
  const ToolParameterTypes types = WeatherTypes();
  setup.types = &types;
  const auto expect_truncated = [&](const std::string& output, const std::string& arguments) {
    Parsed p = RunAllChunkings(output, setup);
    ASSERT_EQ(p.names.size(), 1u) << output;
    EXPECT_EQ(p.arguments[0], arguments) << output;
    EXPECT_TRUE(p.truncated[0]) << output;
  };
  expect_truncated("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par", R"({"city": "Par)");
  expect_truncated("<tool_call>get_weather<arg_key>days</arg_key><arg_value>1", R"({"days": 1)");
  expect_truncated("<tool_call>get_weather<arg_key>days</arg_key><arg_value> 4.6e-2", R"({"days": 4.6e-2)");
  expect_truncated("<tool_call>get_weather<arg_key>da", "");
  expect_truncated("<tool_call>get_weather", "");
  expect_truncated("<tool_call>get_weather<arg_key>days</arg_key><arg_value>1</arg_value>", R"({"days": 1)");
  // The start of a closing tag is never part of a value (the issue's "42.000000000000000e-220</ar").
  expect_truncated("<tool_call>get_weather<arg_key>days</arg_key><arg_value>42.0e-220</ar", R"({"days": 42.0e-220)");
  expect_truncated("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value", R"({"city": "Oslo)");
  expect_truncated("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</tool_c", R"({"city": "Oslo)");
  expect_truncated("<tool_call>get_weather<arg_key>ci</arg_k", "");
  // A closed call with no arguments is `{}`, complete.
  Parsed p = RunAllChunkings("<tool_call>get_weather</tool_call>", setup);
  EXPECT_EQ(p.arguments[0], "{}");
  EXPECT_FALSE(p.truncated[0]);
}

TEST(ToolCallParser, ConstrainedValuesStreamAsWritten) {
  ToolParameterTypes types = WeatherTypes();
  types.constrained_json_parameters["get_weather"] = {"days", "opts"};
  ToolCallParser parser(&types);
  std::string content;
  std::vector<ToolCallDelta> calls;
  parser.Push("<tool_call>get_weather<arg_key>days</arg_key><arg_value>\n12", content, calls);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, R"({"days": 12)");
  calls.clear();
  parser.Push(".5 \n", content, calls);  // the blanks wait: they may end the value
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, ".5");
  calls.clear();
  parser.Push("</arg_value><arg_key>opts</arg_key><arg_value>{\"unit\": ", content, calls);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, R"(, "opts": {"unit":)");
  calls.clear();
  parser.Push("\"C\"}</arg_value></tool_call>", content, calls);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, R"( "C"})"
                                "}");
  EXPECT_TRUE(calls[0].done);
  EXPECT_FALSE(calls[0].truncated);
  // Whatever the chunking, the same arguments, as written.
  ParserSetup setup;
  setup.start = ReasoningParser::Start::kContent;
  setup.types = &types;
  Parsed p = RunAllChunkings(
      "<tool_call>get_weather<arg_key>days</arg_key><arg_value> 3 </arg_value><arg_key>opts</arg_key><arg_value>"
      "[1, 2]</arg_value></tool_call><tool_call>get_weather</tool_call>",
      setup);
  ASSERT_EQ(p.names.size(), 2u);
  EXPECT_EQ(p.arguments[0], R"({"days": 3, "opts": [1, 2]})");
  EXPECT_EQ(p.arguments[1], "{}");
}

TEST(ToolCallParser, MalformedCallsStayContent) {
  ParserSetup setup;
  setup.start = ReasoningParser::Start::kContent;
  Parsed p = RunAllChunkings("a <tool_call>not a name<arg_key>k</arg_key> b", setup);
  EXPECT_TRUE(p.names.empty());
  EXPECT_EQ(p.content, "a <tool_call>not a name<arg_key>k</arg_key> b");
  p = RunAllChunkings("<tool_call></tool_call>x", setup);
  EXPECT_TRUE(p.names.empty());
  EXPECT_EQ(p.content, "<tool_call></tool_call>x");
  p = RunAllChunkings("<tool_call>f<x>g</tool_call>", setup);
  EXPECT_TRUE(p.names.empty());
  EXPECT_EQ(p.content, "<tool_call>f<x>g</tool_call>");
  const std::string long_name(300, 'n');
  p = RunAllChunkings("<tool_call>" + long_name, setup);
  EXPECT_TRUE(p.names.empty());
  EXPECT_EQ(p.content, "<tool_call>" + long_name);
  // Garbage between tags inside a call is ignored; a value without a key is dropped.
  p = RunAllChunkings(
      "<tool_call>f junk? no:<arg_value>v</arg_value><arg_key>k</arg_key>zz<arg_value>1</arg_value>"
      "yy</tool_call>",
      setup);
  EXPECT_EQ(p.content,
            "<tool_call>f junk? no:<arg_value>v</arg_value><arg_key>k</arg_key>zz<arg_value>1</arg_value>"
            "yy</tool_call>");  // "f junk? no:" has spaces: not a call
  p = RunAllChunkings(
      "<tool_call>f\n<arg_key>k</arg_key>zz<arg_value>1</arg_value>yy<arg_key>j</arg_key>"
      "</tool_call>",
      setup);
  ASSERT_EQ(p.names.size(), 1u);
  EXPECT_EQ(p.names[0], "f");
  EXPECT_EQ(p.arguments[0], R"({"k": 1})");
}

TEST(ToolCallParser, ContentAroundCalls) {
  ParserSetup setup;
  setup.start = ReasoningParser::Start::kContent;
  Parsed p = RunAllChunkings("Sure.\n<tool_call>a</tool_call>\n\n<tool_call>b</tool_call>\n", setup);
  EXPECT_EQ(p.content, "Sure.\n");
  ASSERT_EQ(p.names.size(), 2u);
  p = RunAllChunkings("<tool_call>a</tool_call> Done. ", setup);
  EXPECT_EQ(p.content, " Done.");  // whitespace after the last call is dropped
  p = RunAllChunkings("no calls, just <tool_ text", setup);
  EXPECT_EQ(p.content, "no calls, just <tool_ text");
  EXPECT_TRUE(p.names.empty());
  p = RunAllChunkings("ends with <tool_ca", setup);
  EXPECT_EQ(p.content, "ends with <tool_ca");
}

TEST(ToolCallParser, ForcedCallsStartInside) {
  ParserSetup setup;
  setup.start = ReasoningParser::Start::kContent;
  setup.forced_call = "";  // tool_choice "required": the prompt ends with <tool_call>
  Parsed p = RunAllChunkings("search<arg_key>q</arg_key><arg_value>cats</arg_value></tool_call>", setup);
  ASSERT_EQ(p.names.size(), 1u);
  EXPECT_EQ(p.names[0], "search");
  EXPECT_EQ(p.arguments[0], R"({"q": "cats"})");
  setup.forced_call = "search";  // a named function: the prompt ends with <tool_call>search
  p = RunAllChunkings("<arg_key>q</arg_key><arg_value>[1, 2]</arg_value></tool_call>tail", setup);
  ASSERT_EQ(p.names.size(), 1u);
  EXPECT_EQ(p.names[0], "search");
  EXPECT_EQ(p.arguments[0], R"({"q": [1,2]})");
  EXPECT_EQ(p.content, "tail");
  p = Feed({""}, setup);  // nothing generated: the forced call is still reported, truncated, with no arguments
  ASSERT_EQ(p.names.size(), 1u);
  EXPECT_EQ(p.arguments[0], "");
  EXPECT_TRUE(p.truncated[0]);
}

TEST(ToolCallParser, ArgumentsOfClosedCallsAreAlwaysValidJson) {
  // Whatever the model writes in an unconstrained call, a closed call's arguments parse as a JSON object.
  const std::vector<std::string> outputs = {
      "<tool_call>f<arg_key>a\"b</arg_key><arg_value>x\\y\x01</arg_value></tool_call>",
      "<tool_call>f<arg_key></arg_key><arg_value></arg_value></tool_call>",
      "<tool_call>f<arg_key>k</arg_key><arg_value>{\"unclosed\": </arg_value></tool_call>",
      "<tool_call>f<arg_key>k</arg_key><arg_value>é😀</arg_value><arg_key>k2</tool_call>",
      "<tool_call>f<arg_key>k</arg_key><arg_value>1</arg_value><arg_key>k</arg_key><arg_value>2</tool_call>",
  };
  const ToolParameterTypes types = [] {
    ToolParameterTypes t;
    t.string_parameters["f"] = {"k2"};
    return t;
  }();
  ParserSetup setup;
  setup.start = ReasoningParser::Start::kContent;
  setup.types = &types;
  for (const std::string& output : outputs) {
    Parsed p = RunAllChunkings(output, setup);
    ASSERT_EQ(p.names.size(), 1u) << output;
    const Json arguments = Json::parse(p.arguments[0], nullptr, false);
    EXPECT_TRUE(arguments.is_object()) << output << " → " << p.arguments[0];
  }
}

}  // namespace
}  // namespace glint
