// Prefill/decode disaggregation in the engine (docs/disaggregation.md), two EngineCores in one process: one
// exports the state after a prompt, the other leases memory, imports it and decodes. Greedy tokens and their top-5
// log-probabilities are identical, bit for bit, to one engine doing both (golden tiny models on the reference, the
// trained glint-tiny on the fast path); a decode from a zeroed KDA state is not (the state is really used); sampled
// n > 1 requests with penalties, logprobs and stop strings, and structured output, give what one engine gives; with
// the MTP layer on both engines the decode engine drafts from its first step as one engine does (the same tokens and
// speculation counters); a lease that expires frees everything; a snapshot of the wrong size is refused; nothing is
// left held on either side.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "base/file.h"
#include "engine/engine.h"
#include "engine/engine_core.h"
#include "engine_checks.h"
#include "fast/fast_model.h"
#include "server/json_schema_grammar.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "vision_test_util.h"

namespace glint {
namespace {

using testing::Collector;
using testing::MakeCore;
using testing::RunToCompletion;
using testing::Tokens;

constexpr int64_t kGenerated = 8;

struct Fixture {
  std::unique_ptr<WorkerPool> pool;
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tokenizer;  // glint-tiny only
};
const Fixture& FixtureFor(const testing::PathCase& c) {
  static std::map<std::pair<std::string, bool>, std::unique_ptr<Fixture>> fixtures;
  std::unique_ptr<Fixture>& fixture = fixtures[{c.model, c.fast}];
  if (fixture == nullptr) {
    fixture = std::make_unique<Fixture>();
    fixture->model = testing::LoadPathModel(c, fixture->pool);
    if (c.model == "glint-tiny") fixture->tokenizer = Tokenizer::Load(testing::ModelDir(c.model)).value();
  }
  return *fixture;
}

// Everything one request handed out, per sample: tokens, top logprobs, text, finish reason.
struct Outcome {
  std::vector<Tokens> tokens;
  std::vector<std::vector<std::vector<TokenLogprob>>> top;
  std::vector<std::string> text, finish;
  bool operator==(const Outcome& o) const {
    if (tokens != o.tokens || text != o.text || finish != o.finish || top.size() != o.top.size()) return false;
    for (size_t s = 0; s < top.size(); ++s) {
      if (top[s].size() != o.top[s].size()) return false;
      for (size_t i = 0; i < top[s].size(); ++i) {
        for (size_t k = 0; k < top[s][i].size(); ++k) {
          // Exact: the same state gives the same logits.
          if (top[s][i][k].token != o.top[s][i][k].token || top[s][i][k].logprob != o.top[s][i][k].logprob) {
            return false;
          }
        }
      }
    }
    return true;
  }
};

// A layer's state (LayerRegions) or the MTP layer's (MtpRegions) packed as EngineCore::PackRegions packs it (slot
// ranges, then each block's), from a slot and the blocks `block(b)` of a sequence of `blocks` blocks: the test's own
// reading of the layout, the oracle of what a stream carries.
std::vector<std::byte> PackRegions(const std::vector<CacheRegion>& regions, const std::byte* slot,
                                   const std::function<const std::byte*(int64_t)>& block, int64_t blocks) {
  std::vector<std::byte> bytes;
  for (const CacheRegion& r : regions) {
    if (r.in_slot) bytes.insert(bytes.end(), slot + r.offset, slot + r.offset + r.bytes);
  }
  for (int64_t b = 0; b < blocks; ++b) {
    for (const CacheRegion& r : regions) {
      if (!r.in_slot) bytes.insert(bytes.end(), block(b) + r.offset, block(b) + r.offset + r.bytes);
    }
  }
  return bytes;
}

// The same from a sequence's memory (Model::NewSequence).
std::vector<std::byte> PackState(const SequenceState& s, int64_t layer, int64_t blocks) {
  return PackRegions(
      LayerRegions(*s.layout, layer), s.memory.slot,
      [&](int64_t b) { return s.memory.blocks->Item((*s.memory.block_table)[b]); }, blocks);
}

// The same from a whole snapshot.
std::vector<std::byte> PackSnapshot(const CacheLayout& layout, const std::vector<CacheRegion>& regions,
                                    const SequenceSnapshot& s) {
  const int64_t blocks = (s.tokens + layout.block_tokens() - 1) / layout.block_tokens();
  return PackRegions(
      regions, s.slot.data(), [&](int64_t b) { return s.blocks.data() + b * layout.block_bytes; }, blocks);
}

// And its inverse: streamed regions written into a snapshot's slot and blocks (sized for `tokens`).
void UnpackSnapshot(const CacheLayout& layout, const std::vector<CacheRegion>& regions,
                    std::span<const std::byte> bytes, SequenceSnapshot& s) {
  const int64_t blocks = (s.tokens + layout.block_tokens() - 1) / layout.block_tokens();
  size_t at = 0;
  for (const CacheRegion& r : regions) {
    if (!r.in_slot) continue;
    std::copy(bytes.begin() + at, bytes.begin() + at + r.bytes, s.slot.begin() + r.offset);
    at += r.bytes;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    for (const CacheRegion& r : regions) {
      if (r.in_slot) continue;
      std::copy(bytes.begin() + at, bytes.begin() + at + r.bytes, s.blocks.begin() + b * layout.block_bytes + r.offset);
      at += r.bytes;
    }
  }
  ASSERT_EQ(at, bytes.size());
}

// An engine's speculation counters: verifications, drafts verified, drafts accepted, and both by position.
struct Speculation {
  int64_t drafts = 0, draft_tokens = 0, accepted = 0;
  std::vector<int64_t> accepted_by_position, drafted_by_position;
  bool operator==(const Speculation&) const = default;
};
Speculation SpeculationOf(const EngineCore& core) {
  const EngineMetrics m = core.Metrics();
  return {m.spec_drafts, m.spec_draft_tokens, m.spec_accepted_tokens, m.spec_accepted_per_position,
          m.spec_drafted_per_position};
}
std::ostream& operator<<(std::ostream& out, const Speculation& s) {
  return out << s.accepted << " of " << s.draft_tokens << " drafts accepted in " << s.drafts << " verifications";
}

Outcome Collect(const Collector& sink, RequestId id, int64_t n) {
  Outcome outcome;
  outcome.tokens.resize(n);
  outcome.top.resize(n);
  outcome.text.resize(n);
  outcome.finish.resize(n);
  for (const RequestOutput& out : sink.outputs) {
    if (out.request != id) continue;
    outcome.tokens[out.index].insert(outcome.tokens[out.index].end(), out.tokens.begin(), out.tokens.end());
    outcome.top[out.index].insert(outcome.top[out.index].end(), out.top_logprobs.begin(), out.top_logprobs.end());
    outcome.text[out.index] += out.text;
    if (out.finish_reason != FinishReason::kNone) {
      outcome.finish[out.index] = std::string(FinishReasonName(out.finish_reason)) + out.error;
    }
  }
  return outcome;
}

class Disaggregation : public ::testing::TestWithParam<testing::PathCase> {
 protected:
  void SetUp() override {
    fixture_ = &FixtureFor(GetParam());
    const int64_t vocab = model().config().vocab_size;
    // A prompt ending inside a block (29 tokens) and one ending at a checkpoint position (48).
    for (int64_t length : {29, 48}) {
      Tokens prompt;
      for (int64_t i = 0; i < length; ++i) prompt.push_back(static_cast<int32_t>((i * 131 + 7 * length + 3) % vocab));
      prompts_.push_back(prompt);
    }
  }
  const Model& model() const { return *fixture_->model; }
  const Tokenizer* tokenizer() const { return fixture_->tokenizer ? &*fixture_->tokenizer : nullptr; }
  // 2 slots, blocks of 8 for two requests, checkpoints every 16 tokens (prefix caching on).
  std::unique_ptr<EngineCore> Core() const {
    return MakeCore(model(), testing::SizedOptions(model(), 2, 40, 8), tokenizer());
  }
  // The same running the MTP layer (--speculative mtp, `k` drafts a step), in steps of 16 tokens: the prompts take
  // 2 and 3 chunks.
  std::unique_ptr<EngineCore> SpecCore(int64_t k) const {
    EngineOptions options = testing::SizedOptions(model(), 2, 40, 8, /*speculative=*/true, k);
    options.max_batch_tokens = 16;
    return MakeCore(model(), options, tokenizer());
  }
  // The same with a vision tower.
  std::unique_ptr<EngineCore> CoreWithImages(ImageEncoder& images) const {
    auto core = EngineCore::Create(model(), testing::SizedOptions(model(), 2, 40, 8), tokenizer(), &images).value();
    core->set_check_integrity(true);
    return core;
  }

  Outcome Aggregated(EngineCore& core, Request request) {
    auto sink = std::make_shared<Collector>();
    request.sink = sink;
    const int64_t n = request.n;
    EXPECT_OK(core.Add(++next_id_, std::move(request)));
    RunToCompletion(core);
    return Collect(*sink, next_id_, n);
  }
  // An export of the prompt (its layers streamed or not) run to completion: what it handed out.
  std::shared_ptr<Collector> RunExport(EngineCore& prefill, const Tokens& prompt,
                                       const std::vector<RequestImage>& images, bool stream) {
    auto sink = std::make_shared<Collector>();
    Request request = testing::Greedy(prompt, 1, sink);
    request.images = images;
    request.export_state = true;
    request.stream_layers = stream;
    EXPECT_OK(prefill.Add(++next_id_, std::move(request)));
    RunToCompletion(prefill);
    return sink;
  }
  std::shared_ptr<const SequenceSnapshot> Export(EngineCore& prefill, const Tokens& prompt,
                                                 const std::vector<RequestImage>& images = {}) {
    const std::shared_ptr<Collector> sink = RunExport(prefill, prompt, images, /*stream=*/false);
    EXPECT_EQ(sink->outputs.size(), 1u);
    if (sink->outputs.empty()) return nullptr;
    const RequestOutput& out = sink->outputs.back();
    EXPECT_EQ(out.finish_reason, FinishReason::kStop);
    EXPECT_TRUE(out.tokens.empty());
    EXPECT_TRUE(out.request_finished);
    return out.snapshot;
  }
  // An export that streams: its layers (and the MTP layer's rows and hidden row of the last output) assembled into
  // a whole snapshot, as the transfer plane's decode side assembles them.
  SequenceSnapshot StreamedExport(EngineCore& prefill, const Tokens& prompt) {
    const std::shared_ptr<Collector> sink = RunExport(prefill, prompt, {}, /*stream=*/true);
    const CacheLayout& layout = prefill.layout();
    const int64_t layers = model().config().num_hidden_layers;
    SequenceSnapshot s;
    EXPECT_EQ(static_cast<int64_t>(sink->outputs.size()), layers + 1);
    if (static_cast<int64_t>(sink->outputs.size()) != layers + 1) return s;
    s = *sink->outputs.back().snapshot;
    EXPECT_TRUE(s.slot.empty() && s.blocks.empty());
    const int64_t blocks = (s.tokens + layout.block_tokens() - 1) / layout.block_tokens();
    s.slot.assign(static_cast<size_t>(layout.slot_bytes), std::byte{0});
    s.blocks.assign(static_cast<size_t>(blocks * layout.block_bytes), std::byte{0});
    for (int64_t l = 0; l < layers; ++l)
      UnpackSnapshot(layout, LayerRegions(layout, l), sink->outputs[l].layer->bytes, s);
    const std::vector<CacheRegion> mtp = MtpRegions(layout);
    EXPECT_EQ(static_cast<int64_t>(s.mtp.size()), RegionStateBytes(mtp, blocks));
    UnpackSnapshot(layout, mtp, s.mtp, s);
    s.mtp.clear();
    return s;
  }
  // The request's prompt exported by `prefill`, imported by `decode` (with `edit` applied to the snapshot).
  Outcome Disaggregated(EngineCore& prefill, EngineCore& decode, Request request,
                        const std::function<void(SequenceSnapshot&)>& edit = {}) {
    SequenceSnapshot snapshot = *Export(prefill, request.prompt, request.images);
    if (edit) edit(snapshot);
    return Imported(decode, std::move(request), std::move(snapshot));
  }
  // The request decoded by `decode` from `snapshot`, the state after its prompt.
  Outcome Imported(EngineCore& decode, Request request, SequenceSnapshot snapshot) {
    const uint64_t lease = ++next_lease_;
    EXPECT_OK(decode.Lease(lease, static_cast<int64_t>(request.prompt.size()), 60));
    auto sink = std::make_shared<Collector>();
    request.sink = sink;
    request.imported = std::make_shared<const SequenceSnapshot>(std::move(snapshot));
    request.lease = lease;
    const int64_t n = request.n;
    EXPECT_OK(decode.Add(++next_id_, std::move(request)));
    RunToCompletion(decode);
    return Collect(*sink, next_id_, n);
  }
  Request GreedyWithLogprobs(const Tokens& prompt) const {
    Request request = testing::Greedy(prompt, kGenerated, nullptr);
    request.logprobs = 5;
    return request;
  }

  const Fixture* fixture_ = nullptr;
  std::vector<Tokens> prompts_;
  RequestId next_id_ = 0;
  uint64_t next_lease_ = 0;
};

TEST_P(Disaggregation, GreedyOutputIsTheAggregatedOneBitForBit) {
  auto aggregated = Core(), prefill = Core(), decode = Core();
  for (const Tokens& prompt : prompts_) {
    const Outcome expected = Aggregated(*aggregated, GreedyWithLogprobs(prompt));
    ASSERT_EQ(expected.tokens[0].size(), static_cast<size_t>(kGenerated));
    EXPECT_EQ(Disaggregated(*prefill, *decode, GreedyWithLogprobs(prompt)), expected) << prompt.size();
  }
  // Nothing held on either side; the prefill engine kept the prompts in its prefix cache (a second export hits).
  testing::ExpectPoolsAtStart(*prefill);
  testing::ExpectPoolsAtStart(*decode);
  EXPECT_EQ(decode->num_leases(), 0);
  const int64_t hits = prefill->memory().Stats().prefix_hit_tokens;
  ASSERT_NE(Export(*prefill, prompts_[1]), nullptr);
  EXPECT_GT(prefill->memory().Stats().prefix_hit_tokens, hits);
}

TEST_P(Disaggregation, StreamedLayersAreTheWholeStateAndDecodeTheSame) {
  // An export that streams hands out each layer's state from inside the forward pass; the bytes are those of the
  // whole snapshot taken after the step, and a decode from the streamed state is the aggregated one bit for bit.
  auto aggregated = Core(), whole_engine = Core(), streaming = Core(), decode = Core();
  const int64_t layers = model().config().num_hidden_layers;
  for (const Tokens& prompt : prompts_) {
    const auto whole = Export(*whole_engine, prompt);
    ASSERT_NE(whole, nullptr);
    const std::shared_ptr<Collector> sink = RunExport(*streaming, prompt, {}, /*stream=*/true);
    ASSERT_EQ(static_cast<int64_t>(sink->outputs.size()), layers + 1);
    SequenceSnapshot streamed = *sink->outputs.back().snapshot;
    EXPECT_TRUE(streamed.slot.empty() && streamed.blocks.empty());
    EXPECT_TRUE(streamed.logits == whole->logits);
    streamed.slot.assign(whole->slot.size(), std::byte{0});
    streamed.blocks.assign(whole->blocks.size(), std::byte{0});
    for (int64_t l = 0; l < layers; ++l) {
      const RequestOutput& out = sink->outputs[l];
      ASSERT_NE(out.layer, nullptr);
      EXPECT_EQ(out.layer->layer, l);
      EXPECT_EQ(out.finish_reason, FinishReason::kNone);
      const std::vector<CacheRegion> regions = LayerRegions(streaming->layout(), l);
      EXPECT_TRUE(out.layer->bytes == PackSnapshot(streaming->layout(), regions, *whole)) << "layer " << l;
      UnpackSnapshot(streaming->layout(), regions, out.layer->bytes, streamed);
    }
    const Outcome expected = Aggregated(*aggregated, GreedyWithLogprobs(prompt));
    EXPECT_EQ(Disaggregated(*whole_engine, *decode, GreedyWithLogprobs(prompt),
                            [&](SequenceSnapshot& s) {
                              s.slot = streamed.slot;
                              s.blocks = streamed.blocks;
                            }),
              expected);
  }
  testing::ExpectPoolsAtStart(*streaming);
  testing::ExpectPoolsAtStart(*decode);
  Request alone = testing::Greedy(prompts_[0], 1, std::make_shared<Collector>());
  alone.stream_layers = true;
  EXPECT_ERROR_CONTAINS(streaming->Validate(alone), "needs export_state");
}

TEST_P(Disaggregation, WithTheMtpLayerTheDecodeEngineDraftsFromItsFirstStep) {
  // Both engines run the MTP layer. The prefill engine runs it over the prompt's pairs but the last (whose token it
  // does not draw); the decode engine gets those rows in the slot and blocks with the last position's hidden row,
  // draws the first token and runs the last pair, so it drafts before its first decode as one engine does after its
  // last prefill chunk. Tokens, logprobs and speculation counters are one engine's, with 1 and 2 drafts a step, from
  // a whole snapshot and from a streamed one (the MTP rows packed beside the layers, the same bytes).
  for (const int64_t k : {1, 2}) {
    auto aggregated = SpecCore(k), prefill = SpecCore(k), streaming = SpecCore(k);
    auto decode = SpecCore(k), from_stream = SpecCore(k);
    for (const Tokens& prompt : prompts_) {
      const Outcome expected = Aggregated(*aggregated, GreedyWithLogprobs(prompt));
      ASSERT_EQ(expected.tokens[0].size(), static_cast<size_t>(kGenerated));
      const SequenceSnapshot whole = *Export(*prefill, prompt);
      EXPECT_EQ(static_cast<int64_t>(whole.hidden.size()), model().config().hidden_size);
      EXPECT_EQ(Imported(*decode, GreedyWithLogprobs(prompt), whole), expected) << prompt.size() << ", K " << k;
      const SequenceSnapshot streamed = StreamedExport(*streaming, prompt);
      EXPECT_TRUE(streamed.slot == whole.slot && streamed.blocks == whole.blocks && streamed.hidden == whole.hidden);
      EXPECT_EQ(Imported(*from_stream, GreedyWithLogprobs(prompt), streamed), expected);
    }
    const Speculation one_engine = SpeculationOf(*aggregated);
    EXPECT_GT(one_engine.drafts, 0);
    EXPECT_EQ(SpeculationOf(*decode), one_engine) << "K " << k;
    EXPECT_EQ(SpeculationOf(*from_stream), one_engine) << "K " << k;
    if (GetParam().model == "glint-tiny") {  // the trained MTP layer
      EXPECT_GT(one_engine.accepted, 0);
    }
    for (const auto* core : {prefill.get(), streaming.get(), decode.get(), from_stream.get()}) {
      testing::ExpectPoolsAtStart(*core);
    }
  }
  // A snapshot without the hidden row is refused by an engine that runs the MTP layer; one with it by an engine
  // that does not (whose slot is smaller too).
  auto spec = SpecCore(1), plain = Core();
  SequenceSnapshot without = *Export(*spec, prompts_[0]);
  without.hidden.clear();
  Request request = testing::Greedy(prompts_[0], kGenerated, std::make_shared<Collector>());
  request.imported = std::make_shared<const SequenceSnapshot>(without);
  EXPECT_ERROR_CONTAINS(spec->Validate(request), "hidden row of 0 values");
  SequenceSnapshot with = *Export(*plain, prompts_[0]);
  with.hidden.assign(static_cast<size_t>(model().config().hidden_size), 0.0f);
  request.imported = std::make_shared<const SequenceSnapshot>(with);
  EXPECT_ERROR_CONTAINS(plain->Validate(request), "runs no MTP layer");
}

TEST_P(Disaggregation, AnImportedSequencePreemptedWithTheMtpLayerRecomputesItsPrompt) {
  // 12 blocks of 8 tokens: a local request (40 + 40 positions) and an imported one (29 + 24) cannot both stay. The
  // imported one, admitted last, is preempted; it recomputes its prompt and what it generated here, the MTP rows
  // with them (the transferred ones are gone with its blocks), and gives one engine's tokens.
  EngineOptions options = testing::SizedOptions(model(), 2, 12, 0, /*speculative=*/true);
  auto aggregated = MakeCore(model(), options, tokenizer()), prefill = MakeCore(model(), options, tokenizer());
  auto decode = MakeCore(model(), options, tokenizer());
  const int64_t vocab = model().config().vocab_size;
  Tokens local_prompt;
  for (int64_t i = 0; i < 40; ++i) local_prompt.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
  const Request imported_request = testing::Greedy(prompts_[0], 24, nullptr);
  const Outcome expected = Aggregated(*aggregated, imported_request);
  const Outcome expected_local = Aggregated(*aggregated, testing::Greedy(local_prompt, 40, nullptr));
  auto local_sink = std::make_shared<Collector>();
  ASSERT_OK(decode->Add(++next_id_, testing::Greedy(local_prompt, 40, local_sink)));
  const RequestId local = next_id_;
  ASSERT_OK(decode->Step());  // the local prompt computed: it holds its blocks before the import
  EXPECT_EQ(Disaggregated(*prefill, *decode, imported_request), expected);
  EXPECT_EQ(Collect(*local_sink, local, 1), expected_local);
  EXPECT_GT(decode->Metrics().preemptions, 0);
  ASSERT_TRUE(local_sink->outputs.back().timings.has_value());
  EXPECT_EQ(local_sink->outputs.back().timings->preemptions, 0);  // so the imported sequence was the one preempted
  EXPECT_GT(decode->Metrics().prompt_tokens_computed, static_cast<int64_t>(local_prompt.size()));  // its recompute
  testing::ExpectPoolsAtStart(*decode);
}

TEST_P(Disaggregation, LayerDoneComesWhenTheLayerIsFinalAndBeforeTheNextRuns) {
  // The model's hook: once per layer, in order; at layer l's call its state is already what the pass leaves, and
  // layer l + 1's is still what it was before the pass.
  SequenceState state = model().NewSequence();
  const Tokens& prompt = prompts_[1];
  const CacheLayout& layout = *state.layout;
  const int64_t layers = model().config().num_hidden_layers;
  const int64_t blocks = (static_cast<int64_t>(prompt.size()) + layout.block_tokens() - 1) / layout.block_tokens();
  struct Seen {
    SequenceState* state;
    int64_t blocks;
    std::vector<int64_t> order;
    std::vector<std::vector<std::byte>> at_call, next_at_call;  // [layer] layer l's and l + 1's bytes at l's call
  } seen{&state, blocks, {}, {}, {}};
  BatchEntry entry{prompt, &state, LogitsWanted::kLast};
  entry.layer_done = {
      [](void* context, int64_t layer) {
        auto& s = *static_cast<Seen*>(context);
        const int64_t last = static_cast<int64_t>(s.state->layout->layers.size()) - 1;
        s.order.push_back(layer);
        s.at_call.push_back(PackState(*s.state, layer, s.blocks));
        s.next_at_call.push_back(layer < last ? PackState(*s.state, layer + 1, s.blocks) : std::vector<std::byte>{});
      },
      &seen};
  // Layer 1 before the pass: a fresh state (its blocks are grown by Forward, so compare the slot part only).
  const std::vector<std::byte> layer1_slot_before =
      PackRegions(LayerRegions(*state.layout, 1), state.memory.slot, {}, 0);
  std::vector<EntryOutput> outputs;
  ASSERT_OK(model().Forward({&entry, 1}, outputs));
  ASSERT_EQ(static_cast<int64_t>(seen.order.size()), layers);
  for (int64_t l = 0; l < layers; ++l) {
    EXPECT_EQ(seen.order[l], l);
    EXPECT_TRUE(seen.at_call[l] == PackState(state, l, blocks)) << "layer " << l << " changed after its LayerDone";
  }
  // At layer 0's call, layer 1 had not run: its slot part was as before the pass, and the pass changed it.
  const std::vector<std::byte> layer1_slot_after =
      PackRegions(LayerRegions(*state.layout, 1), state.memory.slot, {}, 0);
  const std::vector<std::byte> layer1_slot_at_call(
      seen.next_at_call[0].begin(), seen.next_at_call[0].begin() + static_cast<int64_t>(layer1_slot_before.size()));
  EXPECT_TRUE(layer1_slot_at_call == layer1_slot_before);
  EXPECT_FALSE(layer1_slot_after == layer1_slot_before);
}

// ARanksSlotHoldsItsHeadsOfTheWholeSlot for layouts with or without the MTP layer's cache.
void ARanksSlotHoldsItsHeads(const ModelConfig& config, bool mtp) {
  SCOPED_TRACE(mtp ? "with the MTP layer" : "without the MTP layer");
  ASSERT_OK_AND_ASSIGN(const CacheLayout whole, MakeCacheLayout(config, {.mtp = mtp}));
  std::vector<std::byte> whole_slot(whole.slot_bytes);
  for (size_t i = 0; i < whole_slot.size(); ++i) whole_slot[i] = static_cast<std::byte>(i * 131 % 251 + 1);
  for (int tp = 2; tp <= config.kda_num_heads; ++tp) {
    std::vector<std::byte> rebuilt(whole.slot_bytes);
    for (int rank = 0; rank < tp; ++rank) {
      ASSERT_OK_AND_ASSIGN(const ShardPlan plan, MakeShardPlan(config, rank, tp, tp, 1));
      ASSERT_TRUE(plan.kda_split);
      const IndexRange heads = plan.slices().kda_heads;
      ASSERT_OK_AND_ASSIGN(const CacheLayout part, MakeCacheLayout(LocalConfig(config, plan), {.mtp = mtp}));
      ASSERT_EQ(part.kda_heads, heads.count());
      std::vector<std::byte> part_slot(part.slot_bytes);
      CopyWholeSlotToPart(whole, whole_slot, part, heads.begin, part_slot.data());
      if (mtp) {
        EXPECT_TRUE(std::equal(whole_slot.begin() + whole.mtp_pending,
                               whole_slot.begin() + whole.mtp_pending + whole.dsa_pending_bytes,
                               part_slot.begin() + part.mtp_pending));
      }
      for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
        if (whole.layers[l].kind == AttentionKind::kDsa) {
          EXPECT_TRUE(std::equal(whole_slot.begin() + whole.layers[l].pending,
                                 whole_slot.begin() + whole.layers[l].pending + whole.dsa_pending_bytes,
                                 part_slot.begin() + part.layers[l].pending))
              << "layer " << l;
          continue;
        }
        const std::vector<SlotRun> to = KdaHeadRuns(whole, l, heads.begin, heads.count());
        const std::vector<SlotRun> from = KdaHeadRuns(part, l, 0, heads.count());
        ASSERT_EQ(to.size(), 4u);
        for (size_t i = 0; i < to.size(); ++i) {
          ASSERT_EQ(to[i].bytes, from[i].bytes);
          for (int64_t b = 0; b < to[i].bytes; ++b) {
            ASSERT_EQ(rebuilt[to[i].offset + b], std::byte{0}) << "a byte of layer " << l << " held by two ranks";
            rebuilt[to[i].offset + b] = part_slot[from[i].offset + b];
          }
        }
      }
    }
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
      for (const CacheRegion& region : LayerRegions(whole, l)) {
        if (!region.in_slot || whole.layers[l].kind != AttentionKind::kKda) continue;
        EXPECT_TRUE(std::equal(whole_slot.begin() + region.offset, whole_slot.begin() + region.offset + region.bytes,
                               rebuilt.begin() + region.offset))
            << "--tp " << tp << ": layer " << l << "'s KDA state at byte " << region.offset;
      }
    }
  }
}

TEST_P(Disaggregation, ARanksSlotHoldsItsHeadsOfTheWholeSlot) {
  // --tp > 1 (docs/disaggregation.md "Several ranks"): each rank's slot takes its KDA heads of a whole slot and every
  // DSA layer's filling pool (CopyWholeSlotToPart); the ranks' runs, put back where KdaHeadRuns says they lie in the
  // whole layout, give every byte of the whole slot's layer regions back — each head exactly once, in head order —
  // with uneven splits too (tiny-sparse's 3 heads over 2 ranks). With the MTP layer's cache its filling pool is
  // whole on every rank too.
  const ModelConfig& config = model().config();
  for (const bool mtp : {false, true}) {
    ARanksSlotHoldsItsHeads(config, mtp);
  }
}

TEST_P(Disaggregation, TheSnapshotIsTheAggregatedEnginesState) {
  // Two engines computing the same prompt hold the same bytes: the KDA state, conv windows, filling pools and
  // the blocks' latents and keys (the aggregated path computes exactly what the export hands over).
  auto first = Core(), second = Core();
  for (const Tokens& prompt : prompts_) {
    const auto a = Export(*first, prompt), b = Export(*second, prompt);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(a->tokens, static_cast<int64_t>(prompt.size()));
    EXPECT_TRUE(a->slot == b->slot);
    EXPECT_TRUE(a->blocks == b->blocks);
    EXPECT_TRUE(a->logits == b->logits);
  }
}

TEST_P(Disaggregation, AZeroedRecurrentStateChangesTheOutput) {
  // What the checklist warns of: a decode from a zeroed KDA state. It must not pass for the real one.
  auto aggregated = Core(), prefill = Core(), decode = Core();
  const Tokens& prompt = prompts_[1];
  const Outcome expected = Aggregated(*aggregated, GreedyWithLogprobs(prompt));
  const int64_t kda = decode->layout().checkpoint_bytes;
  ASSERT_GT(kda, 0);
  const Outcome zeroed = Disaggregated(*prefill, *decode, GreedyWithLogprobs(prompt), [&](SequenceSnapshot& s) {
    std::fill(s.slot.begin(), s.slot.begin() + kda, std::byte{0});
  });
  EXPECT_FALSE(zeroed == expected);
  testing::ExpectPoolsAtStart(*decode);
}

TEST_P(Disaggregation, ALeaseThatExpiresFreesItsMemory) {
  auto decode = Core();
  ASSERT_OK(decode->Lease(1, 29, 0.001));
  EXPECT_EQ(decode->memory().Stats().slots_used, 1);
  EXPECT_GT(decode->memory().Stats().blocks_used, 0);
  EXPECT_OK(decode->CheckIntegrity());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(decode->ExpireLeases(), 1);
  testing::ExpectPoolsAtStart(*decode);
  // The state arriving after that is refused, not decoded.
  auto prefill = Core();
  auto sink = std::make_shared<Collector>();
  Request request = testing::Greedy(prompts_[0], kGenerated, sink);
  request.imported = Export(*prefill, prompts_[0]);
  request.lease = 1;
  EXPECT_ERROR_CONTAINS(decode->Add(99, std::move(request)), "unknown or expired");
  testing::ExpectPoolsAtStart(*decode);
  // A released lease frees at once; with every slot leased the next lease is refused.
  ASSERT_OK(decode->Lease(2, 29, 60));
  ASSERT_OK(decode->Lease(3, 29, 60));
  EXPECT_ERROR_CONTAINS(decode->Lease(4, 29, 60), "no slot");
  decode->ReleaseLease(2);
  decode->ReleaseLease(3);
  testing::ExpectPoolsAtStart(*decode);
}

TEST_P(Disaggregation, TheEngineThreadExpiresLeasesWhileIdle) {
  // Engine::Lease answers from the engine thread, which wakes at the deadline with no request to run; a lease for
  // a prompt it holds nearly all of is refused when the threshold says so.
  auto engine = Engine::Start(model(), testing::SizedOptions(model(), 2, 40, 8)).value();
  ASSERT_OK_AND_ASSIGN(const uint64_t lease, engine->Lease(prompts_[0], 0.5));
  EXPECT_GT(lease, 0u);
  // The metrics are published at the end of the round that granted it.
  for (int i = 0; i < 40 && engine->Metrics().cache.slots_used != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine->Metrics().cache.slots_used, 1);
  for (int i = 0; i < 200 && engine->Metrics().cache.slots_used != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(engine->Metrics().cache.slots_used, 0);
  EXPECT_EQ(engine->Metrics().cache.blocks_used, 0);
  // A prompt computed here before (blocks up to its checkpoint at 16 positions cached): with a threshold above what
  // is left, no lease.
  auto sink = std::make_shared<Collector>();
  ASSERT_OK(engine->Submit(testing::Greedy(prompts_[1], 1, sink)).status());
  for (int i = 0; i < 500 && (sink->outputs.empty() || !sink->outputs.back().request_finished); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_ERROR_CONTAINS(engine->Lease(prompts_[1], 60, /*local_below=*/40), "the prefix cache holds");
  ASSERT_OK_AND_ASSIGN(const uint64_t granted, engine->Lease(prompts_[1], 60, /*local_below=*/8));
  engine->ReleaseLease(granted);
}

TEST_P(Disaggregation, ASnapshotOfAnotherShapeIsRefused) {
  auto prefill = Core(), decode = Core();
  const auto good = Export(*prefill, prompts_[0]);
  ASSERT_NE(good, nullptr);
  const auto refused = [&](const std::function<void(SequenceSnapshot&)>& edit, const std::string& message) {
    auto snapshot = std::make_shared<SequenceSnapshot>(*good);
    edit(*snapshot);
    Request request = testing::Greedy(prompts_[0], kGenerated, std::make_shared<Collector>());
    request.imported = snapshot;
    EXPECT_ERROR_CONTAINS(decode->Validate(request), message);
  };
  refused([](SequenceSnapshot& s) { s.slot.pop_back(); }, "slot bytes");
  refused([](SequenceSnapshot& s) { s.blocks.resize(s.blocks.size() * 2); }, "block bytes");
  refused([](SequenceSnapshot& s) { s.logits.pop_back(); }, "logits");
  refused([](SequenceSnapshot& s) { s.tokens += 1; }, "covers 30 positions");
  Request both = testing::Greedy(prompts_[0], kGenerated, std::make_shared<Collector>());
  both.imported = good;
  both.export_state = true;
  EXPECT_ERROR_CONTAINS(decode->Validate(both), "both export");
  Request forked = testing::Greedy(prompts_[0], 1, std::make_shared<Collector>());
  forked.export_state = true;
  forked.n = 2;
  EXPECT_ERROR_CONTAINS(decode->Validate(forked), "n = 1");
}

INSTANTIATE_TEST_SUITE_P(Models, Disaggregation,
                         ::testing::Values(testing::PathCase{"tiny-dense"}, testing::PathCase{"tiny-sparse"},
                                           testing::PathCase{"glint-tiny", true}),
                         testing::PathCaseName);

// A prompt with an image (golden tiny-dense with the golden tiny tower): the prefill engine runs the tower and the
// prompt, the decode engine imports the state. Greedy tokens and top-5 logprobs are the aggregated ones bit for bit;
// the decode engine never runs the tower; its prefix cache keys the imported blocks by the image, so the next turn
// about the same image restores the prompt (and computes what an aggregated engine computes), while the same text
// with another image does not reach past the placeholders.
class DisaggregationImages : public Disaggregation {};

TEST_P(DisaggregationImages, TheTowerRunsOnThePrefillSideAndTheCacheKnowsTheImage) {
  const VisionConfig vision = testing::TinyVisionConfig();
  std::unique_ptr<ImageEncoder> tower = MakeReferenceImageEncoder(testing::TinyVisionWeights(vision), vision);
  auto aggregated = CoreWithImages(*tower), prefill = CoreWithImages(*tower), decode = CoreWithImages(*tower);
  constexpr int32_t kPlaceholder = 7;
  const auto request = [&](const Tokens& before, const Tokens& after, uint64_t key, uint64_t seed) {
    Tokens prompt = before;
    const auto image = testing::Image(vision, 8, 8, seed);
    prompt.insert(prompt.end(), VisionTokenCount(vision, *image), kPlaceholder);
    prompt.insert(prompt.end(), after.begin(), after.end());
    Request r = GreedyWithLogprobs(prompt);
    r.images = {{static_cast<int64_t>(before.size()), image, key}};
    return r;
  };
  const Tokens before = {1, 2, 3, 4, 5}, after = {9, 10, 11, 12, 13, 14, 15};
  const Outcome expected = Aggregated(*aggregated, request(before, after, 41, 11));
  ASSERT_EQ(expected.tokens[0].size(), static_cast<size_t>(kGenerated));
  EXPECT_EQ(Disaggregated(*prefill, *decode, request(before, after, 41, 11)), expected);
  EXPECT_EQ(prefill->Metrics().images_encoded, 1);
  EXPECT_EQ(decode->Metrics().images_encoded, 0);
  EXPECT_EQ(decode->Metrics().images, 1);

  // The next turn: the first turn's prompt and answer, more text. The decode engine holds the imported blocks
  // under the image's key: the lookup with the image reaches past its placeholders (the blocks of the first turn's
  // prompt, 16 positions here); with another image it stops before them.
  Tokens longer = after;
  longer.insert(longer.end(), expected.tokens[0].begin(), expected.tokens[0].end());
  longer.insert(longer.end(), {20, 21, 22});
  const Request next = request(before, longer, 41, 11), other = request(before, longer, 42, 12);
  const int64_t image_end = static_cast<int64_t>(before.size()) + 16;
  EXPECT_GE(decode->CachedPrefix(decode->PrefixKeys(next)), image_end);
  EXPECT_LT(decode->CachedPrefix(decode->PrefixKeys(other)), static_cast<int64_t>(before.size()));
  const int64_t hits = decode->memory().Stats().prefix_hit_tokens;
  EXPECT_EQ(Aggregated(*decode, request(before, longer, 41, 11)),
            Aggregated(*aggregated, request(before, longer, 41, 11)));
  EXPECT_GE(decode->memory().Stats().prefix_hit_tokens - hits, image_end);
  testing::ExpectPoolsAtStart(*prefill);
  testing::ExpectPoolsAtStart(*decode);
}

INSTANTIATE_TEST_SUITE_P(Vision, DisaggregationImages, ::testing::Values(testing::PathCase{"tiny-dense"}),
                         testing::PathCaseName);

// Everything the decode side owns, on the trained model with its tokenizer: n > 1 seeded samples with penalties
// and logprobs, stop strings, and a grammar, through the import path: what one engine gives.
class DisaggregationSampling : public Disaggregation {};

TEST_P(DisaggregationSampling, SamplersStopsAndGrammarsStayOnTheDecodeSide) {
  auto aggregated = Core(), prefill = Core(), decode = Core();
  const Tokens prompt = tokenizer()->Encode("Once upon a time, in a land far away, there lived").value();
  Request sampled = testing::Greedy(prompt, 24, nullptr);
  sampled.n = 3;
  sampled.sampling = {.temperature = 1.0f, .seed = 7, .presence_penalty = 0.5f, .repetition_penalty = 1.2f};
  sampled.seeded = true;
  sampled.logprobs = 2;
  sampled.stop.stop_strings = {"the", "."};
  const Outcome expected = Aggregated(*aggregated, sampled);
  ASSERT_FALSE(expected.tokens[2].empty());
  EXPECT_EQ(Disaggregated(*prefill, *decode, sampled), expected);

  const auto suite = nlohmann::ordered_json::parse(ReadFile(testing::TestDataPath("structured/schemas.json")).value());
  grammar::Grammar g;
  server::JsonSchemaCompiler compiler(g);
  g.set_root(compiler.AddSchema(suite["schemas"][0]["schema"]).value());
  Request structured = testing::Greedy(tokenizer()->Encode("Give me a record: ").value(), 48, nullptr);
  structured.stop.ignore_eos = false;
  structured.grammar = grammar::CompiledGrammar::Compile(g).value();
  const Outcome expected_structured = Aggregated(*aggregated, structured);
  EXPECT_EQ(Disaggregated(*prefill, *decode, structured), expected_structured);
  testing::ExpectPoolsAtStart(*prefill);
  testing::ExpectPoolsAtStart(*decode);
}

TEST_P(DisaggregationSampling, WithTheMtpLayerForkedSamplesDraftAsOnOneEngine) {
  // n = 2 seeded samples with penalties and 2 drafts a step: the second sample forks from the imported one and runs
  // its own MTP pair of the last prompt position (the transferred hidden row, its own first token).
  auto aggregated = SpecCore(2), prefill = SpecCore(2), decode = SpecCore(2);
  const Tokens prompt = tokenizer()->Encode("Once upon a time, in a land far away, there lived").value();
  Request sampled = testing::Greedy(prompt, 24, nullptr);
  sampled.n = 2;
  sampled.sampling = {.temperature = 0.8f, .top_p = 0.95f, .seed = 11, .presence_penalty = 0.5f};
  sampled.seeded = true;
  sampled.logprobs = 2;
  const Outcome expected = Aggregated(*aggregated, sampled);
  ASSERT_EQ(expected.tokens[1].size(), 24u);
  EXPECT_NE(expected.tokens[0], expected.tokens[1]);
  EXPECT_EQ(Disaggregated(*prefill, *decode, sampled), expected);
  EXPECT_GT(SpeculationOf(*aggregated).accepted, 0);
  EXPECT_EQ(SpeculationOf(*decode), SpeculationOf(*aggregated));
  // The oracle's own check: sampled tokens depend on the draft distributions (the acceptance test and the residual
  // draw), so a decode engine whose MTP cache holds none of the prompt's rows gives other tokens. (Greedy tokens do
  // not depend on the drafts, and on these prompts the trained layer's greedy drafts barely do on its cache.)
  auto cold = SpecCore(2);
  EXPECT_FALSE(Disaggregated(*prefill, *cold, sampled, [&](SequenceSnapshot& s) {
                 const CacheLayout& layout = cold->layout();
                 const std::vector<CacheRegion> mtp = MtpRegions(layout);
                 const int64_t blocks = static_cast<int64_t>(s.blocks.size()) / layout.block_bytes;
                 UnpackSnapshot(layout, mtp, std::vector<std::byte>(static_cast<size_t>(RegionStateBytes(mtp, blocks))),
                                s);
               }) == expected);
  for (const auto* core : {prefill.get(), decode.get(), cold.get()}) testing::ExpectPoolsAtStart(*core);
}

INSTANTIATE_TEST_SUITE_P(Trained, DisaggregationSampling, ::testing::Values(testing::PathCase{"glint-tiny", true}),
                         testing::PathCaseName);

}  // namespace
}  // namespace glint
