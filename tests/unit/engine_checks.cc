#include "engine_checks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/worker_pool.h"
#include "engine/sampling.h"
#include "fast/fast_model.h"
#include "test_util.h"

namespace glint::testing {

Tokens Collector::TokensOf(RequestId request, int64_t index) const {
  Tokens tokens;
  for (const RequestOutput& o : outputs) {
    if (o.request == request && o.index == index) tokens.insert(tokens.end(), o.tokens.begin(), o.tokens.end());
  }
  return tokens;
}

std::string Collector::TextOf(RequestId request, int64_t index) const {
  std::string text;
  for (const RequestOutput& o : outputs) {
    if (o.request == request && o.index == index) text += o.text;
  }
  return text;
}

const RequestOutput* Collector::Last(RequestId request, int64_t index) const {
  const RequestOutput* last = nullptr;
  for (const RequestOutput& o : outputs) {
    if (o.request == request && o.index == index) last = &o;
  }
  return last;
}

std::pair<Tokens, Tokens> GlintTinyTexts() {
  Tokens a, b;
  const Result<std::string> text = ReadFile(TestDataPath("glint-tiny/tokenizer_cases.json"));
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  if (!text.ok()) return {};
  for (const auto& entry : nlohmann::json::parse(*text)) {
    const Tokens ids = entry["ids"].get<Tokens>();
    Tokens& into = a.size() <= b.size() ? a : b;
    into.insert(into.end(), ids.begin(), ids.end());
  }
  return {a, b};
}

Tokens GreedyOracle(const Model& model, const Tokens& prompt, int64_t count, grammar::Matcher* matcher) {
  SequenceState state = model.NewSequence();
  Tokens generated;
  Tokens input = prompt;
  grammar::TokenMask mask;
  for (int64_t i = 0; i < count; ++i) {
    std::vector<EntryOutput> outputs;
    BatchEntry entry{input, &state, LogitsWanted::kLast, false};
    EXPECT_OK(model.Forward({&entry, 1}, outputs));
    if (outputs.empty()) break;
    std::vector<float> logits(outputs[0].logits.begin(), outputs[0].logits.end());  // [V]
    if (matcher != nullptr) {
      matcher->FillMask(mask);
      ApplyTokenMask(mask.words, logits);
    }
    const int32_t token = ArgMax(logits);
    generated.push_back(token);
    if (matcher != nullptr) {
      EXPECT_TRUE(matcher->Advance(token));
      if (matcher->ended()) break;
    }
    input = {token};
  }
  return generated;
}

Request Greedy(const Tokens& prompt, int64_t max_tokens, std::shared_ptr<RequestSink> sink) {
  Request request;
  request.prompt = prompt;
  request.sampling.temperature = 0.0f;
  request.stop.max_tokens = max_tokens;
  request.stop.ignore_eos = true;
  request.sink = std::move(sink);
  return request;
}

EngineOptions SizedOptions(const Model& model, int64_t slots, int64_t blocks, int64_t checkpoints, bool speculative,
                           int64_t speculative_tokens) {
  EngineOptions o;
  o.block_tokens = 8;
  o.checkpoint_interval = 16;
  o.max_seqs = slots;
  o.prefix_caching = checkpoints > 0;
  o.admission_watermark = 0;
  o.speculative = speculative ? SpeculativeMethod::kMtp : SpeculativeMethod::kNone;
  o.speculative_tokens = speculative_tokens;
  const CacheLayout layout = model.CacheLayoutFor({.block_tokens = 8, .mtp = speculative}).value();
  // With speculation every slot has a rollback copy of its KDA state per drafted token (engine.md "Speculative
  // decoding").
  const int64_t rollback =
      speculative ? speculative_tokens * AlignItemBytes(std::max<int64_t>(layout.checkpoint_bytes, 1)) : 0;
  const int64_t rest = checkpoints * layout.checkpoint_bytes + blocks * layout.block_bytes;
  o.memory_bytes = slots * (layout.slot_bytes + rollback) + rest;
  o.checkpoint_fraction = checkpoints > 0 ? (checkpoints * layout.checkpoint_bytes + 0.5) / rest : 0.2;
  return o;
}

std::unique_ptr<EngineCore> MakeCore(const Model& model, const EngineOptions& options, const Tokenizer* tokenizer) {
  auto core = EngineCore::Create(model, options, tokenizer);
  EXPECT_TRUE(core.ok()) << core.status().ToString();
  if (!core.ok()) return nullptr;
  (*core)->set_check_integrity(true);
  return std::move(core).value();
}

void RunToCompletion(EngineCore& core) {
  for (int step = 0; core.HasWork(); ++step) {
    ASSERT_OK(core.Step());
    ASSERT_LT(step, 100000) << "the engine does not finish";
  }
}

std::vector<Tokens> RunGreedyPrompts(EngineCore& core, const std::vector<Tokens>& prompts, int64_t generated,
                                     bool one_at_a_time) {
  auto sink = std::make_shared<Collector>();
  std::vector<Tokens> results;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_OK(core.Add(i + 1, Greedy(prompts[i], generated, sink)));
    if (one_at_a_time) RunToCompletion(core);
  }
  RunToCompletion(core);
  for (size_t i = 0; i < prompts.size(); ++i) {
    results.push_back(sink->TokensOf(i + 1));
    const RequestOutput* last = sink->Last(i + 1);
    EXPECT_TRUE(last != nullptr && last->finish_reason == FinishReason::kLength && last->request_finished);
  }
  ExpectPoolsAtStart(core);
  return results;
}

void ExpectPoolsAtStart(const EngineCore& core) {
  for (int partition = 0; partition < core.num_partitions(); ++partition) {  // --dp-attention: one per rank
    const CacheStats stats = core.memory(partition).Stats();
    EXPECT_EQ(stats.blocks_used, 0) << "partition " << partition;
    EXPECT_EQ(stats.slots_used, 0) << "partition " << partition;
    EXPECT_EQ(core.memory(partition).block_pool().num_free(), stats.blocks_total) << "partition " << partition;
  }
  EXPECT_EQ(core.scheduler().num_running() + core.scheduler().num_waiting(), 0);
  EXPECT_OK(core.CheckIntegrity());
}

std::unique_ptr<Model> LoadPathModel(const PathCase& c, std::unique_ptr<WorkerPool>& pool) {
  if (!c.fast) return ReferenceModel::Load(ModelDir(c.model)).value();
  pool = std::make_unique<WorkerPool>(2);
  return FastModel::Load(ModelDir(c.model), *pool).value();
}

std::string PathCaseName(const ::testing::TestParamInfo<PathCase>& info) {
  std::string name = info.param.model + (info.param.fast ? "_fast" : "_reference");
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace glint::testing
