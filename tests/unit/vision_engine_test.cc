// The engine running the vision tower during prefill (docs/vision.md "In the engine"), on tiny-dense (hidden 64)
// with the golden tiny tower (tests/data/golden/tiny-vision, out_hidden 64): greedy tokens and the first token's
// logprobs equal a direct forward with the tower's rows in both paths; chunked prefill, an image split across
// chunks, two images and preemption with recompute give the same tokens; the tower runs once per image; the
// prefix cache keys images by their hash; bad requests are refused clearly.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/worker_pool.h"
#include "engine/engine_core.h"
#include "engine/sampling.h"
#include "engine_checks.h"
#include "fast/fast_model.h"
#include "model/model.h"
#include "model_checks.h"
#include "modelgen/random_weights.h"
#include "test_util.h"
#include "vision/image_encoder.h"
#include "vision_test_util.h"

namespace glint {
namespace {

using testing::Collector;
using testing::Image;
using testing::TinyVisionConfig;
using testing::TinyVisionWeights;
using testing::Tokens;

constexpr int32_t kPlaceholder = 7;  // any id: the engine takes the positions from RequestImage::start
constexpr int64_t kGenerated = 6;

// A prompt of text pieces with images between them: text[0], image 0, text[1], image 1, ... (ids are text).
struct ImagePrompt {
  Tokens tokens;
  std::vector<RequestImage> images;
};
ImagePrompt Compose(const VisionConfig& c, const std::vector<Tokens>& text,
                    const std::vector<std::shared_ptr<const VisionInput>>& images, std::vector<uint64_t> keys = {}) {
  ImagePrompt p;
  for (size_t i = 0; i < text.size(); ++i) {
    p.tokens.insert(p.tokens.end(), text[i].begin(), text[i].end());
    if (i >= images.size()) continue;
    p.images.push_back({static_cast<int64_t>(p.tokens.size()), images[i], keys.empty() ? 1000 + i : keys[i]});
    p.tokens.insert(p.tokens.end(), VisionTokenCount(c, *images[i]), kPlaceholder);
  }
  return p;
}

// The oracle: the tower's rows for every image, one forward over the whole prompt with them, then greedy decode
// one token at a time. `first_logits` receives the prompt's last-position logits.
Tokens DirectGreedy(const Model& model, ImageEncoder& encoder, const ImagePrompt& prompt,
                    std::vector<float>* first_logits) {
  std::vector<int32_t> positions;
  std::vector<float> rows;
  for (const RequestImage& image : prompt.images) {
    Result<std::vector<float>> out = encoder.Encode(*image.input);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    rows.insert(rows.end(), out->begin(), out->end());
    const int64_t n = static_cast<int64_t>(out->size()) / model.config().hidden_size;
    for (int64_t j = 0; j < n; ++j) positions.push_back(static_cast<int32_t>(image.start + j));
  }
  SequenceState state = model.NewSequence();
  Tokens generated, input = prompt.tokens;
  for (int64_t i = 0; i < kGenerated; ++i) {
    std::vector<EntryOutput> outputs;
    BatchEntry entry{input, &state, LogitsWanted::kLast, false};
    if (i == 0) {
      entry.embedding_positions = positions;
      entry.embedding_rows = rows;
    }
    EXPECT_OK(model.Forward({&entry, 1}, outputs));
    if (outputs.empty()) break;
    if (i == 0 && first_logits != nullptr) first_logits->assign(outputs[0].logits.begin(), outputs[0].logits.end());
    generated.push_back(ArgMax(outputs[0].logits));
    input = {generated.back()};
  }
  return generated;
}

class VisionEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::TestDataPath("golden/tiny-dense");
    reference_ = std::move(ReferenceModel::Load(dir)).value();
    fast_ = std::move(FastModel::Load(dir, pool_)).value();
    vision_ = TinyVisionConfig();
    const VisionWeights weights = TinyVisionWeights(vision_);
    reference_tower_ = MakeReferenceImageEncoder(weights, vision_);
    fast_tower_ = std::move(MakeFastImageEncoder(weights, vision_, pool_)).value();
  }

  std::unique_ptr<EngineCore> Core(const Model& model, ImageEncoder* encoder, const EngineOptions& options) {
    auto core = EngineCore::Create(model, options, nullptr, encoder);
    EXPECT_TRUE(core.ok()) << core.status().ToString();
    if (core.ok()) (*core)->set_check_integrity(true);
    return core.ok() ? std::move(core).value() : nullptr;
  }

  Request Greedy(const ImagePrompt& prompt, std::shared_ptr<RequestSink> sink, int64_t logprobs = -1) {
    Request request = testing::Greedy(prompt.tokens, kGenerated, std::move(sink));
    request.images = prompt.images;
    request.logprobs = logprobs;
    return request;
  }

  // Runs the prompts through `core`, all queued at once; returns the generated tokens of each.
  std::vector<Tokens> RunAll(EngineCore& core, const std::vector<ImagePrompt>& prompts) {
    auto sink = std::make_shared<Collector>();
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_OK(core.Add(i + 1, Greedy(prompts[i], sink)));
    testing::RunToCompletion(core);
    std::vector<Tokens> out;
    for (size_t i = 0; i < prompts.size(); ++i) out.push_back(sink->TokensOf(i + 1));
    return out;
  }

  WorkerPool pool_{2};
  std::unique_ptr<ReferenceModel> reference_;
  std::unique_ptr<FastModel> fast_;
  VisionConfig vision_;
  std::unique_ptr<ImageEncoder> reference_tower_, fast_tower_;
};

EngineOptions Options(const Model& model, int64_t budget, int64_t blocks = 64, int64_t checkpoints = 0,
                      bool speculative = false) {
  EngineOptions o = testing::SizedOptions(model, 4, blocks, checkpoints, speculative);
  o.max_batch_tokens = budget;
  return o;
}

TEST_F(VisionEngine, OneShotEqualsADirectForwardWithTheTowersRowsInBothPaths) {
  const ImagePrompt prompt = Compose(vision_, {{1, 2, 3}, {4, 5, 6, 8}}, {Image(vision_, 4, 6, 11)});
  ASSERT_EQ(prompt.images[0].start, 3);
  ASSERT_EQ(prompt.tokens.size(), 3u + 6u + 4u);
  for (auto [model, tower] : {std::pair<const Model*, ImageEncoder*>{reference_.get(), reference_tower_.get()},
                              std::pair<const Model*, ImageEncoder*>{fast_.get(), fast_tower_.get()}}) {
    std::vector<float> logits;
    const Tokens expected = DirectGreedy(*model, *tower, prompt, &logits);
    // The image matters: the same prompt with the placeholder's own embedding continues differently.
    std::vector<float> plain;
    DirectGreedy(*model, *tower, {prompt.tokens, {}}, &plain);
    EXPECT_NE(plain, logits);

    auto core = Core(*model, tower, Options(*model, 512));
    auto sink = std::make_shared<Collector>();
    ASSERT_OK(core->Add(1, Greedy(prompt, sink, /*logprobs=*/5)));
    testing::RunToCompletion(*core);
    EXPECT_EQ(sink->TokensOf(1), expected) << tower->description();
    // One chunk is the direct forward: the first token's log-probabilities are the same bits.
    const Logprobs want = ComputeLogprobs(logits, expected[0], 5);
    ASSERT_FALSE(sink->outputs.empty());
    const RequestOutput& first = sink->outputs[0];
    ASSERT_EQ(first.top_logprobs.size(), 1u);
    ASSERT_EQ(first.top_logprobs[0].size(), want.top.size());
    for (size_t k = 0; k < want.top.size(); ++k) {
      EXPECT_EQ(first.top_logprobs[0][k].token, want.top[k].first);
      EXPECT_EQ(first.top_logprobs[0][k].logprob, want.top[k].second);
    }
    const EngineMetrics m = core->Metrics();
    EXPECT_EQ(m.images, 1);
    EXPECT_EQ(m.image_tokens, 6);
    EXPECT_EQ(m.images_encoded, 1);
    EXPECT_EQ(m.image_tokens_encoded, 6);
  }
}

TEST_F(VisionEngine, ChunkedPrefillSplitImagesAndTwoImagesMatchOneShot) {
  // 8-token and 6-token images; a budget of 10 splits the prompt into many chunks, and the first image (at
  // position 5) across several: the chunk that reaches it pays its 8 tokens, so it holds at most 2 positions.
  const ImagePrompt prompt =
      Compose(vision_, {{1, 2, 3, 4, 5}, {9, 10, 11}, {12, 13}}, {Image(vision_, 4, 8, 21), Image(vision_, 4, 6, 22)});
  const ImagePrompt other = Compose(vision_, {{14, 15}, {16, 17, 18, 19}}, {Image(vision_, 4, 4, 23)});
  for (auto [model, tower] : {std::pair<const Model*, ImageEncoder*>{reference_.get(), reference_tower_.get()},
                              std::pair<const Model*, ImageEncoder*>{fast_.get(), fast_tower_.get()}}) {
    const std::vector<Tokens> expected = {DirectGreedy(*model, *tower, prompt, nullptr),
                                          DirectGreedy(*model, *tower, other, nullptr)};
    auto core = Core(*model, tower, Options(*model, 10));
    EXPECT_EQ(RunAll(*core, {prompt, other}), expected) << tower->description();
    EXPECT_EQ(core->Metrics().images_encoded, 3);
    auto one_shot = Core(*model, tower, Options(*model, 512));
    EXPECT_EQ(RunAll(*one_shot, {prompt, other}), expected) << tower->description();
  }
}

TEST_F(VisionEngine, APreemptedSequenceRecomputesWithItsImageRows) {
  // 5 blocks of 8 tokens for two prompts of ~20 tokens and their generated tokens: one is preempted, recomputes
  // its prompt (images included) and must still match; the tower ran once per image all the same.
  const ImagePrompt a = Compose(vision_, {{1, 2}, {3, 4, 5, 6}}, {Image(vision_, 4, 8, 31)});
  const ImagePrompt b = Compose(vision_, {{8, 9, 10}, {11, 12}}, {Image(vision_, 4, 8, 32)});
  const std::vector<Tokens> expected = {DirectGreedy(*reference_, *reference_tower_, a, nullptr),
                                        DirectGreedy(*reference_, *reference_tower_, b, nullptr)};
  auto core = Core(*reference_, reference_tower_.get(), Options(*reference_, 64, /*blocks=*/5));
  EXPECT_EQ(RunAll(*core, {a, b}), expected);
  EXPECT_GT(core->Metrics().preemptions, 0);
  EXPECT_EQ(core->Metrics().images_encoded, 2);
  testing::ExpectPoolsAtStart(*core);
}

TEST_F(VisionEngine, ThePrefixCacheKeysImagesByTheirHash) {
  // Blocks of 8, checkpoints every 16. Prompt a: 16 text tokens, an 8-token image, 10 text tokens.
  Tokens text(16), tail = {20, 21, 22, 23, 24, 25, 26, 27, 28, 29};
  for (int32_t i = 0; i < 16; ++i) text[i] = 30 + i;
  const auto x = Image(vision_, 4, 8, 51), y = Image(vision_, 4, 8, 52);
  const ImagePrompt a = Compose(vision_, {text, tail}, {x}, {0xA11CE});
  const ImagePrompt b = Compose(vision_, {text, tail}, {y}, {0xB0B});         // same text, another image
  const ImagePrompt forged = Compose(vision_, {text, tail}, {y}, {0xA11CE});  // another image under a's key
  ASSERT_EQ(a.tokens, b.tokens);  // the placeholders are the same tokens: only the key tells them apart
  const int64_t image_start = a.images[0].start, image_end = image_start + 8;
  auto core = Core(*reference_, reference_tower_.get(), Options(*reference_, 512, /*blocks=*/64, /*checkpoints=*/8));
  auto sink = std::make_shared<Collector>();
  auto run = [&](RequestId id, const ImagePrompt& prompt) {
    EXPECT_OK(core->Add(id, Greedy(prompt, sink)));
    testing::RunToCompletion(*core);
    return sink->Last(id)->timings->cached_prompt_tokens;
  };
  EXPECT_EQ(run(1, a), 0);
  EXPECT_EQ(sink->TokensOf(1), DirectGreedy(*reference_, *reference_tower_, a, nullptr));
  // Another image: nothing past its first placeholder is shared, and the output is its own.
  EXPECT_LE(run(2, b), image_start);
  EXPECT_EQ(sink->TokensOf(2), DirectGreedy(*reference_, *reference_tower_, b, nullptr));
  EXPECT_EQ(core->Metrics().images_encoded, 2);
  // The control: the same key is trusted as the same image (so the key is what separates a and b above).
  EXPECT_GT(run(3, forged), image_start);
  // A later turn with a's image: the hit covers the image, so the tower does not run again, and the output is
  // the one a direct forward gives.
  ImagePrompt turn = a;
  const Tokens answer = sink->TokensOf(1);
  turn.tokens.insert(turn.tokens.end(), answer.begin(), answer.end());
  turn.tokens.insert(turn.tokens.end(), {40, 41, 42, 43, 44});
  const int64_t encoded = core->Metrics().images_encoded;
  EXPECT_GE(run(4, turn), image_end);
  EXPECT_EQ(core->Metrics().images_encoded, encoded);
  EXPECT_EQ(sink->TokensOf(4), DirectGreedy(*reference_, *reference_tower_, turn, nullptr));
  testing::ExpectPoolsAtStart(*core);
}

// Wraps a model (not owned) and records every MTP input embedding that replaced a next token's: its sequence
// position (the pair's next token) and its row.
class MtpRecorder final : public testing::ForwardingModel {
 public:
  using ForwardingModel::ForwardingModel;
  Status MtpForward(SequenceState& state, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                    std::vector<float>& logits, const ForwardOptions& options, Trace* trace,
                    const MtpReplacedEmbeddings& replaced) const override {
    const int64_t d = config().hidden_size, next = state.mtp_tokens + 1;  // position of next_tokens[0]
    for (size_t i = 0; i < replaced.positions.size(); ++i) {
      rows[next + replaced.positions[i]].assign(replaced.rows.begin() + i * d, replaced.rows.begin() + (i + 1) * d);
    }
    return inner().MtpForward(state, hidden, next_tokens, logits, options, trace, replaced);
  }
  mutable std::map<int64_t, std::vector<float>> rows;  // position → the row the MTP layer embedded there
};

TEST_F(VisionEngine, MtpDraftsSeeTheImageRowsAndKeepGreedyOutput) {
  // The ChunkedPrefill prompts: with a budget of 10 the first chunk ends just before the first image (position
  // 5), so the MTP pair (h_4, x_5) needs image 0's first row before the chunk that encodes it.
  const ImagePrompt prompt =
      Compose(vision_, {{1, 2, 3, 4, 5}, {9, 10, 11}, {12, 13}}, {Image(vision_, 4, 8, 21), Image(vision_, 4, 6, 22)});
  for (auto [model, tower] : {std::pair<const Model*, ImageEncoder*>{reference_.get(), reference_tower_.get()},
                              std::pair<const Model*, ImageEncoder*>{fast_.get(), fast_tower_.get()}}) {
    const Tokens expected = DirectGreedy(*model, *tower, prompt, nullptr);
    std::map<int64_t, std::vector<float>> tower_rows;  // position → the tower's row
    const int64_t d = model->config().hidden_size;
    for (const RequestImage& image : prompt.images) {
      ASSERT_OK_AND_ASSIGN(std::vector<float> out, tower->Encode(*image.input));
      for (int64_t j = 0; j < static_cast<int64_t>(out.size()) / d; ++j)
        tower_rows[image.start + j].assign(out.begin() + j * d, out.begin() + (j + 1) * d);
    }
    for (int64_t budget : {10, 512}) {
      MtpRecorder recorder(*model);
      auto core = Core(recorder, tower, Options(recorder, budget, 64, 0, /*speculative=*/true));
      EXPECT_EQ(RunAll(*core, {prompt}), std::vector<Tokens>{expected}) << tower->description() << " " << budget;
      EXPECT_EQ(recorder.rows, tower_rows) << tower->description() << " budget " << budget;
      EXPECT_EQ(core->Metrics().images_encoded, 2);  // the early encode is the image's only one
      EXPECT_GT(core->Metrics().spec_drafts, 0);
    }
  }
}

TEST_F(VisionEngine, MtpReplacedEmbeddingsInTheModel) {
  // In both paths: a replaced row equal to the token's own embedding changes no bit (the fast path's bf16 table
  // holds the same values as the reference's fp32 one); another row changes the draft logits; bad rows are refused.
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const int64_t d = reference_->config().hidden_size;
  for (const Model* model : {static_cast<const Model*>(reference_.get()), static_cast<const Model*>(fast_.get())}) {
    SequenceState state = model->NewSequence();
    std::vector<EntryOutput> outputs;
    BatchEntry entry{tokens, &state, LogitsWanted::kLast, true};
    ASSERT_OK(model->Forward({&entry, 1}, outputs));
    const std::vector<int32_t> next = {2, 3, 4};
    const std::span<const float> hidden(outputs[0].hidden.data(), 3 * d);
    auto draft = [&](const MtpReplacedEmbeddings& replaced) {
      SequenceState s = model->NewSequence();
      std::vector<EntryOutput> o;
      BatchEntry e{tokens, &s, LogitsWanted::kLast, false};
      EXPECT_OK(model->Forward({&e, 1}, o));
      std::vector<float> logits;
      EXPECT_OK(model->MtpForward(s, hidden, next, logits, {}, nullptr, replaced));
      return logits;
    };
    const std::vector<float> plain = draft({});
    const std::vector<int32_t> at = {1};  // next_tokens[1] = token 3
    const float* own = reference_->weights().embed_tokens.Row(3);
    EXPECT_EQ(draft({at, std::vector<float>(own, own + d)}), plain);
    const std::vector<float> image(d, 0.5f);
    EXPECT_NE(draft({at, image}), plain);
    const std::vector<int32_t> bad = {3};
    std::vector<float> logits;
    EXPECT_ERROR_CONTAINS(model->MtpForward(state, hidden, next, logits, {}, nullptr, {bad, image}),
                          "outside the entry's 3 tokens");
  }
}

TEST_F(VisionEngine, BadImageRequestsAreRefusedClearly) {
  const ImagePrompt prompt = Compose(vision_, {{1, 2}, {3}}, {Image(vision_, 4, 4, 41)});
  auto sink = std::make_shared<Collector>();
  auto text_only = Core(*reference_, nullptr, Options(*reference_, 64));
  EXPECT_ERROR_CONTAINS(text_only->Validate(Greedy(prompt, sink)), "this engine has no vision tower");
  auto core = Core(*reference_, reference_tower_.get(), Options(*reference_, 64));
  ImagePrompt moved = prompt;
  moved.images[0].start = 0;
  EXPECT_ERROR_CONTAINS(core->Validate(Greedy(moved, sink)), "not the image placeholder");
  moved.images[0].start = 2 + 4 - 1 + 1;  // runs past the prompt's end
  EXPECT_ERROR_CONTAINS(core->Validate(Greedy(moved, sink)), "inside the prompt of 7 tokens");
  ImagePrompt twice = prompt;
  twice.images.push_back(prompt.images[0]);
  EXPECT_ERROR_CONTAINS(core->Validate(Greedy(twice, sink)), "not overlapping");
  ImagePrompt bad = prompt;
  auto odd = std::make_shared<VisionInput>(*prompt.images[0].input);
  odd->grid_w = 3;
  bad.images[0].input = odd;
  EXPECT_ERROR_CONTAINS(core->Validate(Greedy(bad, sink)), "image 0");
  auto small_budget = Core(*reference_, reference_tower_.get(), Options(*reference_, 3));
  EXPECT_ERROR_CONTAINS(small_budget->Validate(Greedy(prompt, sink)), "more than the step's token budget (3");
}

}  // namespace
}  // namespace glint
