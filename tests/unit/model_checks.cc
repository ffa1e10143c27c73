#include "model_checks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "memory/item_arena.h"
#include "test_util.h"

namespace glint::testing {

ForcedChoices ForcedChoicesOf(const RecordingTrace& trace, const ModelConfig& c, int64_t tokens) {
  ForcedChoices forced;
  forced.router.resize(c.num_hidden_layers);
  forced.attended.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string prefix = "layer." + std::to_string(l) + ".";
    if (c.mlp_kinds[l] == MlpKind::kMoe) {
      const auto& experts = trace.ints.at(prefix + "moe_experts");
      for (int64_t t = 0; t < tokens; ++t) {
        RouterChoice choice;
        choice.experts.assign(experts.begin() + t * c.num_experts_per_tok,
                              experts.begin() + (t + 1) * c.num_experts_per_tok);
        forced.router[l].push_back(choice);
      }
    }
    if (c.attention_kinds[l] == AttentionKind::kDsa) {
      const auto& selected = trace.ints.at(prefix + "indexer_selected");
      const int64_t width = c.DenseRegimeTokens();
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<int64_t> positions;
        for (int64_t i = 0; i < width && selected[t * width + i] >= 0; ++i)
          positions.push_back(selected[t * width + i]);
        forced.attended[l].push_back(positions);
      }
    }
  }
  return forced;
}

void ExpectCheckpointsInsideACallEqualTheStateAtThatPosition(const Model& model) {
  std::vector<int32_t> tokens(80);  // any ids: the property holds for every input
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 7919 + 13) % model.config().vocab_size);
  }
  auto layout = std::make_shared<const CacheLayout>(model.CacheLayoutFor({.block_tokens = 8}).value());
  ItemArena blocks = ItemArena::Fixed(32, layout->block_bytes).value();
  ItemArena slots = ItemArena::Fixed(2, layout->slot_bytes).value();
  ItemArena saved = ItemArena::Fixed(2, layout->checkpoint_bytes).value();
  std::vector<int32_t> table_a, table_b;  // [16] blocks each: 128 positions
  for (int32_t b = 0; b < 16; ++b) {
    table_a.push_back(b);
    table_b.push_back(16 + b);
  }
  SequenceState a = model.BindSequence(layout, {&blocks, &table_a, slots.Item(0)}, 0);
  SequenceState b = model.BindSequence(layout, {&blocks, &table_b, slots.Item(1)}, 0);
  std::vector<EntryOutput> outputs;
  const std::vector<StateCheckpoint> checkpoints = {{40, saved.Item(0)}, {64, saved.Item(1)}};
  BatchEntry whole{std::span<const int32_t>(tokens.data(), 70), &a, LogitsWanted::kLast, false, checkpoints};
  ASSERT_OK(model.Forward({&whole, 1}, outputs));
  const std::vector<float> logits = outputs[0].logits;
  int64_t start = 0;
  for (int i = 0; i < 2; ++i) {
    const int64_t end = checkpoints[i].position;
    BatchEntry part{std::span<const int32_t>(tokens.data() + start, end - start), &b, LogitsWanted::kNone, false};
    ASSERT_OK(model.Forward({&part, 1}, outputs));
    EXPECT_EQ(std::memcmp(saved.Item(i), slots.Item(1), layout->checkpoint_bytes), 0) << "checkpoint at " << end;
    start = end;
  }
  BatchEntry rest{std::span<const int32_t>(tokens.data() + 64, 6), &b, LogitsWanted::kLast, false};
  ASSERT_OK(model.Forward({&rest, 1}, outputs));
  EXPECT_EQ(outputs[0].logits, logits);  // the split is where a chunked prefill would split

  const std::vector<StateCheckpoint> unaligned = {{76, saved.Item(0)}};
  BatchEntry bad{std::span<const int32_t>(tokens.data() + 70, 10), &a, LogitsWanted::kLast, false, unaligned};
  EXPECT_ERROR_CONTAINS(model.Forward({&bad, 1}, outputs), "not at a block boundary");
  const std::vector<StateCheckpoint> outside = {{96, saved.Item(0)}};
  bad.checkpoints = outside;
  EXPECT_ERROR_CONTAINS(model.Forward({&bad, 1}, outputs), "not within this call's positions 71 .. 80");
  EXPECT_EQ(a.tokens, 70);
}

void Accumulate(const std::vector<float>& reference, const std::vector<float>& other, int64_t vocab, Agreement& a) {
  for (size_t r = 0; r < reference.size() / vocab; ++r) {
    const float* p = reference.data() + r * vocab;
    const float* q = other.data() + r * vocab;
    const double max_p = *std::max_element(p, p + vocab), max_q = *std::max_element(q, q + vocab);
    double sum_p = 0, sum_q = 0;
    for (int64_t i = 0; i < vocab; ++i) sum_p += std::exp(p[i] - max_p), sum_q += std::exp(q[i] - max_q);
    double kl = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double log_p = p[i] - max_p - std::log(sum_p), log_q = q[i] - max_q - std::log(sum_q);
      kl += std::exp(log_p) * (log_p - log_q);
    }
    a.kl_sum += kl;
    a.top1_equal += (std::max_element(p, p + vocab) - p) == (std::max_element(q, q + vocab) - q);
    ++a.rows;
  }
}

}  // namespace glint::testing
