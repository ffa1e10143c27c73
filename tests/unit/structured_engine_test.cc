// Structured output through the engine on the trained glint-tiny (fast path), with every feature that touches the
// sampled tokens: greedy outputs equal the masked plain-model loop alone, with speculative decoding (drafts drawn
// under the mask and verified against it), with prefix-cache hits and with preemption (the matcher state depends on
// the tokens only, so a recomputed sequence continues where it was); sampled outputs with n > 1, penalties,
// logprobs and stop strings. Every output is checked against the schema's grammar by the Earley reference: a
// viable prefix always, a complete sentence when the grammar's end id ended it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "engine_checks.h"
#include "fast/fast_model.h"
#include "grammar/reference.h"
#include "server/json_schema_grammar.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace glint {
namespace {

using testing::Collector;
using testing::MakeCore;
using testing::RunToCompletion;
using testing::Tokens;

constexpr int64_t kMaxTokens = 48;

struct Constraint {
  grammar::Grammar grammar;  // for the Earley reference
  std::shared_ptr<grammar::CompiledGrammar> compiled;
};

// A model, its tokenizer and the grammar vocabulary, made once per process.
struct Fixture {
  std::unique_ptr<WorkerPool> pool;
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tokenizer;
  std::unique_ptr<grammar::TokenVocabulary> vocabulary;  // as the engine builds it: the matcher of the oracle
  std::vector<Tokens> prompts;
  std::map<std::string, Constraint> constraints;  // by suite name
};

const Fixture& GetFixture() {
  static std::unique_ptr<Fixture> fixture;
  if (fixture != nullptr) return *fixture;
  fixture = std::make_unique<Fixture>();
  const std::string dir = testing::TestDataPath("../../models/glint-tiny");
  fixture->pool = std::make_unique<WorkerPool>(2);
  fixture->model = FastModel::Load(dir, *fixture->pool).value();
  fixture->tokenizer = Tokenizer::Load(dir).value();
  const ModelConfig& c = fixture->model->config();
  std::vector<std::string> bytes(static_cast<size_t>(c.vocab_size));
  std::vector<bool> special(bytes.size(), false);
  for (int64_t id = 0; id < c.vocab_size && id < fixture->tokenizer->vocab_size(); ++id) {
    bytes[id] = std::string(fixture->tokenizer->TokenText(static_cast<int32_t>(id)));
    special[id] = fixture->tokenizer->IsSpecial(static_cast<int32_t>(id));
  }
  std::vector<int32_t> end_ids(c.eos_token_ids.begin(), c.eos_token_ids.end());
  fixture->vocabulary = std::make_unique<grammar::TokenVocabulary>(std::move(bytes), std::move(special), end_ids);
  for (const char* text :
       {"Give me a record: ", "The person is", "{", "Here is the JSON you asked for, in one line:"}) {
    fixture->prompts.push_back(fixture->tokenizer->Encode(text).value());
  }
  const auto suite = nlohmann::ordered_json::parse(ReadFile(testing::TestDataPath("structured/schemas.json")).value());
  for (const auto& entry : suite["schemas"]) {
    Constraint constraint;
    server::JsonSchemaCompiler compiler(constraint.grammar);
    constraint.grammar.set_root(compiler.AddSchema(entry["schema"]).value());
    constraint.compiled = grammar::CompiledGrammar::Compile(constraint.grammar).value();
    fixture->constraints.emplace(entry["name"].get<std::string>(), std::move(constraint));
  }
  return *fixture;
}

class StructuredEngine : public ::testing::Test {
 protected:
  void SetUp() override { fixture_ = &GetFixture(); }

  const Model& model() const { return *fixture_->model; }
  const Constraint& constraint(const std::string& name) const { return fixture_->constraints.at(name); }
  std::unique_ptr<EngineCore> Core(const EngineOptions& options) const {
    return MakeCore(model(), options, &*fixture_->tokenizer);
  }
  Request Make(const Tokens& prompt, const Constraint& c, std::shared_ptr<RequestSink> sink) const {
    Request request = testing::Greedy(prompt, kMaxTokens, std::move(sink));
    request.stop.ignore_eos = false;
    request.grammar = c.compiled;
    return request;
  }
  // The masked plain-model loop for every prompt.
  std::vector<Tokens> Oracle(const Constraint& c) const {
    std::vector<Tokens> expected;
    for (const Tokens& prompt : fixture_->prompts) {
      grammar::Matcher matcher(c.compiled, fixture_->vocabulary.get());
      expected.push_back(testing::GreedyOracle(model(), prompt, kMaxTokens, &matcher));
    }
    return expected;
  }
  // Every prompt as a structured greedy request at once; their tokens.
  std::vector<Tokens> RunAll(EngineCore& core, const Constraint& c) const {
    auto sink = std::make_shared<Collector>();
    for (size_t i = 0; i < fixture_->prompts.size(); ++i) {
      EXPECT_OK(core.Add(static_cast<RequestId>(i + 1), Make(fixture_->prompts[i], c, sink)));
    }
    RunToCompletion(core);
    std::vector<Tokens> out;
    for (size_t i = 0; i < fixture_->prompts.size(); ++i) {
      out.push_back(sink->TokensOf(static_cast<RequestId>(i + 1)));
      ExpectFollows(c, out.back(), sink->Last(static_cast<RequestId>(i + 1)));
    }
    testing::ExpectPoolsAtStart(core);
    return out;
  }
  // The Earley reference on the output's bytes: a viable prefix, complete when the grammar's end id ended it.
  void ExpectFollows(const Constraint& c, const Tokens& tokens, const RequestOutput* last) const {
    ASSERT_NE(last, nullptr);
    EXPECT_NE(last->finish_reason, FinishReason::kError) << last->error;
    std::string text;
    bool ended = false;
    for (int32_t token : tokens) {
      if (fixture_->vocabulary->is_end(token)) {
        ended = true;
        break;
      }
      text += fixture_->vocabulary->bytes(token);
    }
    const grammar::EarleyResult result = grammar::EarleyRecognize(c.grammar, text);
    EXPECT_TRUE(result.viable) << "'" << text << "'";
    if (ended) {
      EXPECT_TRUE(result.complete) << "'" << text << "'";
    }
  }
  int64_t TightBlocks() const {
    int64_t blocks = 0;
    for (const Tokens& prompt : fixture_->prompts) {
      blocks = std::max<int64_t>(blocks, (static_cast<int64_t>(prompt.size()) + kMaxTokens + 7) / 8 + 1);
    }
    return blocks;
  }

  const Fixture* fixture_ = nullptr;
};

TEST_F(StructuredEngine, GreedyAloneMatchesTheMaskedPlainLoop) {
  int64_t completed = 0;  // outputs the grammar's end id ended (the others reached max_tokens)
  for (const char* name : {"person", "unicode", "one_of_tagged"}) {
    SCOPED_TRACE(name);
    auto core = Core(testing::SizedOptions(model(), 4, 64, 0));
    const std::vector<Tokens> outputs = RunAll(*core, constraint(name));
    EXPECT_EQ(outputs, Oracle(constraint(name)));
    for (const Tokens& tokens : outputs) completed += fixture_->vocabulary->is_end(tokens.back());
  }
  // Some outputs must end by the grammar's end id, so completion is exercised. Since whitespace between JSON tokens
  // is bounded (a newline and up to 20 blanks, docs/structured-output.md), this random model spends its 48 tokens on
  // blanks more often: one of the twelve completes.
  EXPECT_GE(completed, 1);
}

TEST_F(StructuredEngine, SpeculativeDraftsFollowTheGrammarAndStayLossless) {
  const Constraint& c = constraint("nested");
  auto core = Core(testing::SizedOptions(model(), 4, 64, 0, /*speculative=*/true));
  EXPECT_EQ(RunAll(*core, c), Oracle(c));
  const EngineMetrics metrics = core->Metrics();
  EXPECT_GT(metrics.spec_drafts, 0);
  EXPECT_GT(metrics.spec_accepted_tokens, 0);
}

TEST_F(StructuredEngine, PrefixCachingAndPreemptionKeepTheMatcherState) {
  const Constraint& c = constraint("person");
  const std::vector<Tokens> expected = Oracle(c);
  for (bool speculative : {false, true}) {
    SCOPED_TRACE(speculative ? "speculative" : "plain");
    auto core = Core(testing::SizedOptions(model(), 3, TightBlocks(), 3, speculative));
    EXPECT_EQ(RunAll(*core, c), expected);
    EXPECT_EQ(RunAll(*core, c), expected);  // the second time from the prefix cache
    const EngineMetrics metrics = core->Metrics();
    EXPECT_GT(metrics.preemptions, 0);
    EXPECT_GT(metrics.cache.prefix_hit_tokens, 0);
  }
}

TEST_F(StructuredEngine, SampledWithNPenaltiesLogprobsAndStopStrings) {
  for (bool speculative : {false, true}) {
    for (const char* name : {"nested", "recursive_list", "decimal_bounds"}) {
      SCOPED_TRACE(std::string(name) + (speculative ? " speculative" : ""));
      const Constraint& c = constraint(name);
      auto core = Core(testing::SizedOptions(model(), 8, 128, 0, speculative));
      auto sink = std::make_shared<Collector>();
      Request request = Make(fixture_->prompts[0], c, sink);
      request.n = 3;
      request.sampling.temperature = 1.0f;
      request.sampling.seed = 11;
      request.seeded = true;
      request.sampling.presence_penalty = 0.5f;
      request.sampling.frequency_penalty = 0.3f;
      request.sampling.repetition_penalty = 1.2f;
      request.logprobs = 3;
      request.stop.stop_strings = {"\"next\": {"};
      ASSERT_OK(core->Add(1, std::move(request)));
      RunToCompletion(*core);
      for (int64_t index = 0; index < 3; ++index) {
        const Tokens tokens = sink->TokensOf(1, index);
        ExpectFollows(c, tokens, sink->Last(1, index));
        int64_t logprobs = 0;
        for (const RequestOutput& output : sink->outputs) {
          if (output.index == index) logprobs += static_cast<int64_t>(output.logprobs.size());
        }
        EXPECT_EQ(logprobs, static_cast<int64_t>(tokens.size()));
        EXPECT_EQ(sink->TextOf(1, index).find("\"next\": {"), std::string::npos);
      }
      testing::ExpectPoolsAtStart(*core);
    }
  }
}

TEST_F(StructuredEngine, AConstraintThatCannotFinishEndsWithLength) {
  grammar::Grammar g;
  server::JsonSchemaCompiler compiler(g);
  g.set_root(compiler.AddSchema(nlohmann::ordered_json::parse(R"({"type": "string", "minLength": 200})")).value());
  Constraint c{g, grammar::CompiledGrammar::Compile(g).value()};
  auto core = Core(testing::SizedOptions(model(), 4, 64, 0));
  auto sink = std::make_shared<Collector>();
  ASSERT_OK(core->Add(1, Make(fixture_->prompts[0], c, sink)));
  RunToCompletion(*core);
  EXPECT_EQ(sink->Last(1)->finish_reason, FinishReason::kLength);
  EXPECT_EQ(static_cast<int64_t>(sink->TokensOf(1).size()), kMaxTokens);
  ExpectFollows(c, sink->TokensOf(1), sink->Last(1));
}

}  // namespace
}  // namespace glint
