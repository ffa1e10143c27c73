// The MTP layer batched across sequences on the fast path (FastModel::MtpForwardBatch, src/fast/fast_mtp.cc): one
// pass over every entry's pairs gives, bit for bit, what each entry gives alone through MtpForward — logits, the
// last pair's normed output (chained drafts' input) and the MTP caches it leaves (a second call continuing them
// agrees too) — on the golden fixtures and the trained glint-tiny; lm_head runs only on the rows that want logits.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "base/worker_pool.h"
#include "fast/fast_model.h"
#include "model/model.h"
#include "test_util.h"

namespace glint {
namespace {

using Tokens = std::vector<int32_t>;

using testing::ModelDir;

// One sequence of the test: its tokens and, per copy (batched, alone), its state and the trunk's hidden rows.
struct Sequence {
  Tokens tokens;  // [length + 2]: the prompt, then the tokens the later steps feed
  int64_t length = 0;
  SequenceState batched, alone;
  std::vector<float> hidden;  // [length, D] the trunk's final normed hidden of the prompt
};

class FastMtp : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto model = FastModel::Load(ModelDir(GetParam()), pool_);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = std::move(model).value();
    const ModelConfig& c = model_->config();
    // Past the indexer's dense regime, inside one pool, and one token: every regime of the MTP layer's DSA.
    for (const int64_t length : {c.DenseRegimeTokens() + 2 * c.index_kpool + 5, int64_t{9}, int64_t{1}}) {
      Sequence& s = sequences_.emplace_back();
      s.length = length;
      for (int64_t i = 0; i < length + 2; ++i) {
        s.tokens.push_back(static_cast<int32_t>((i * 7919 + 31 * length + 13) % c.vocab_size));
      }
      s.batched = model_->NewSequence();
      s.alone = model_->NewSequence();
      s.hidden = Trunk(s.batched, std::span<const int32_t>(s.tokens.data(), length));
      ASSERT_EQ(Trunk(s.alone, std::span<const int32_t>(s.tokens.data(), length)), s.hidden);
    }
  }

  std::vector<float> Trunk(SequenceState& state, std::span<const int32_t> tokens) {
    std::vector<EntryOutput> outputs;
    const BatchEntry entry{tokens, &state, LogitsWanted::kNone, true};
    EXPECT_OK(model_->Forward({&entry, 1}, outputs));
    return outputs.empty() ? std::vector<float>{} : outputs[0].hidden;
  }

  WorkerPool pool_{2};
  std::unique_ptr<FastModel> model_;
  std::vector<Sequence> sequences_;
};

// Entry i alone (MtpForward, logits of every pair) trimmed as `wanted` asks.
std::vector<float> Trim(std::vector<float> logits, LogitsWanted wanted, int64_t vocab) {
  if (wanted == LogitsWanted::kNone) return {};
  if (wanted == LogitsWanted::kLast) logits.erase(logits.begin(), logits.end() - vocab);
  return logits;
}

TEST_P(FastMtp, BatchEqualsOneAtATime) {
  const ModelConfig& c = model_->config();
  const int64_t d = c.hidden_size, vocab = c.vocab_size;
  const LogitsWanted wanted[] = {LogitsWanted::kLast, LogitsWanted::kAll, LogitsWanted::kNone};
  // Step 1: every prompt position's pair (h_p, x_{p+1}).
  std::vector<MtpEntry> batch;
  for (size_t i = 0; i < sequences_.size(); ++i) {
    const Sequence& s = sequences_[i];
    batch.push_back(
        {&sequences_[i].batched, s.hidden, std::span<const int32_t>(s.tokens.data() + 1, s.length), wanted[i]});
  }
  std::vector<std::vector<float>> logits, last_hidden;
  std::vector<Status> errors;
  const int64_t lm_head_before = model_->lm_head_rows();
  ASSERT_OK(model_->MtpForwardBatch(batch, logits, {}, &errors, &last_hidden));
  EXPECT_EQ(model_->lm_head_rows() - lm_head_before, 1 + sequences_[1].length) << "lm_head on wanted rows only";
  ASSERT_EQ(logits.size(), sequences_.size());
  for (size_t i = 0; i < sequences_.size(); ++i) {
    Sequence& s = sequences_[i];
    EXPECT_OK(errors[i]);
    std::vector<float> alone;
    ASSERT_OK(model_->MtpForward(s.alone, s.hidden, std::span<const int32_t>(s.tokens.data() + 1, s.length), alone));
    EXPECT_EQ(logits[i], Trim(alone, wanted[i], vocab)) << "sequence " << i;
    // The last pair's normed output: as the entry alone in a batch of one gives it.
    SequenceState single = model_->NewSequence();
    Trunk(single, std::span<const int32_t>(s.tokens.data(), s.length));
    std::vector<std::vector<float>> single_logits, single_hidden;
    const MtpEntry entry{&single, s.hidden, std::span<const int32_t>(s.tokens.data() + 1, s.length),
                         LogitsWanted::kLast};
    ASSERT_OK(model_->MtpForwardBatch({&entry, 1}, single_logits, {}, nullptr, &single_hidden));
    ASSERT_EQ(static_cast<int64_t>(last_hidden[i].size()), d);
    EXPECT_EQ(last_hidden[i], single_hidden[0]) << "sequence " << i;
    EXPECT_EQ(s.batched.mtp_tokens, s.length);
  }
  // Step 2: one decode each, then one more pair each, continuing the caches step 1 wrote.
  batch.clear();
  std::vector<std::vector<float>> step_hidden;
  for (Sequence& s : sequences_) {
    const std::span<const int32_t> next(s.tokens.data() + s.length, 1);
    step_hidden.push_back(Trunk(s.batched, next));
    ASSERT_EQ(Trunk(s.alone, next), step_hidden.back());
  }
  for (size_t i = 0; i < sequences_.size(); ++i) {
    Sequence& s = sequences_[i];
    batch.push_back(
        {&s.batched, step_hidden[i], std::span<const int32_t>(s.tokens.data() + s.length + 1, 1), LogitsWanted::kLast});
  }
  ASSERT_OK(model_->MtpForwardBatch(batch, logits));
  for (size_t i = 0; i < sequences_.size(); ++i) {
    Sequence& s = sequences_[i];
    std::vector<float> alone;
    ASSERT_OK(model_->MtpForward(s.alone, step_hidden[i], std::span<const int32_t>(s.tokens.data() + s.length + 1, 1),
                                 alone));
    EXPECT_EQ(logits[i], alone) << "sequence " << i << ", second call";
  }
}

// Bad inputs are refused before any state changes; a state twice in one batch too.
TEST_P(FastMtp, BadEntriesAreRefusedBeforeAnyState) {
  Sequence& s = sequences_[1];
  std::vector<std::vector<float>> logits;
  const Tokens bad = {static_cast<int32_t>(model_->config().vocab_size)};
  const MtpEntry good{&s.batched, std::span<const float>(s.hidden.data(), model_->config().hidden_size),
                      std::span<const int32_t>(s.tokens.data() + 1, 1)};
  const MtpEntry wrong{&sequences_[0].batched, std::span<const float>(s.hidden.data(), model_->config().hidden_size),
                       bad};
  const MtpEntry both[] = {good, wrong};
  EXPECT_ERROR_CONTAINS(model_->MtpForwardBatch(both, logits), "MTP batch entry 1");
  const MtpEntry twice[] = {good, good};
  EXPECT_ERROR_CONTAINS(model_->MtpForwardBatch(twice, logits), "share a state");
  EXPECT_EQ(s.batched.mtp_tokens, 0);
  EXPECT_EQ(sequences_[0].batched.mtp_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, FastMtp, ::testing::Values("tiny-dense", "tiny-sparse", "glint-tiny"));

}  // namespace
}  // namespace glint
