// EngineCore's token choice and MTP drafts (docs/engine.md "Sampling", "Speculative decoding"): the penalised
// logits a sample draws from, the speculative-sampling check of a drafted token, the MTP layer run for the
// sequences that want drafts, and its chain for drafts 2 .. K. Split from engine_core.cc to keep each file readable.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "base/log.h"
#include "engine/engine_core.h"

namespace glint {

std::string DescribeSpeculation(const EngineMetrics& m) {
  if (m.spec_accepted_per_position.empty()) return "off";
  const auto percent = [](int64_t part, int64_t whole) {
    return whole > 0 ? StrCat(std::lround(100.0 * static_cast<double>(part) / static_cast<double>(whole)), " %")
                     : std::string("-");
  };
  std::string text = StrCat(m.spec_accepted_tokens, " of ", m.spec_draft_tokens, " drafted tokens accepted (",
                            percent(m.spec_accepted_tokens, m.spec_draft_tokens), "; by position:");
  for (size_t k = 0; k < m.spec_accepted_per_position.size(); ++k) {
    text += StrCat(k == 0 ? " " : ", ", percent(m.spec_accepted_per_position[k], m.spec_drafted_per_position[k]));
  }
  return text + ")";
}

std::vector<float> EngineCore::SamplerLogits(Sample& sample, std::span<const float> logits) {
  std::vector<float> penalised(logits.begin(), logits.end());  // [V]
  ApplyPenalties(requests_.at(sample.request).request.sampling, sample.history, penalised);
  if (sample.matcher) {
    sample.matcher->FillMask(mask_);
    if (mask_.Count() == 0) {
      sample.grammar_dead_end = true;  // nothing fits (EmitToken ends the sample with an error); leave logits as is
    } else {
      ApplyTokenMask(mask_.words, penalised);
    }
  }
  return penalised;
}

int32_t EngineCore::ChooseToken(Sample& sample, std::span<const float> logits) {
  return sample.sampler.Sample(SamplerLogits(sample, logits));
}

std::pair<int32_t, bool> EngineCore::VerifyDraft(Sample& sample, size_t k, std::span<const float> logits) {
  // The draft was drawn under the same mask and penalties (DrawDraft ran with the history this position starts
  // from: the drafts before k, now accepted), so the acceptance test compares two distributions over the allowed
  // tokens and stays lossless.
  std::vector<float> penalised = SamplerLogits(sample, logits);
  const int32_t draft = sample.drafts[k];
  if (sample.sampler.greedy()) {  // the target is one token: the draft is kept exactly when it is that token
    const int32_t token = ArgMax(penalised);
    return {token, token == draft};
  }
  return sample.sampler.Verify(sample.sampler.Distribution(penalised), draft, sample.draft_distributions[k]);
}

void EngineCore::Append(SequenceId id, int32_t token) {
  Sample& sample = samples_.at(id);
  if (sample.matcher && !sample.grammar_dead_end && !sample.matcher->Advance(token)) sample.grammar_dead_end = true;
  sample.history.Add(token);
  scheduler_->AppendToken(id, token);
}

void EngineCore::ClearDraft(SequenceId id) {
  Sample& sample = samples_.at(id);
  sample.drafts.clear();
  sample.draft_distributions.clear();
  if (scheduler_->Contains(id) && scheduler_->Get(id).drafts > 0) scheduler_->SetDrafts(id, 0);
}

int64_t EngineCore::DraftsWanted(SequenceId id) const {
  const Sample& sample = samples_.at(id);
  const SequenceInfo& info = scheduler_->Get(id);
  const int64_t end = sample.state->tokens;  // the next decode computes x_end, and the drafts are x_{end+1}, …
  const int64_t generated = static_cast<int64_t>(info.tokens.size()) - info.prompt_length;
  if (end + 1 != static_cast<int64_t>(info.tokens.size()) || end < info.prompt_length) return 0;
  // A verification of k drafts hands out up to k + 1 tokens.
  const int64_t room = requests_.at(sample.request).max_tokens - generated - 1;
  return std::clamp<int64_t>(std::min(room, PoolSafeDrafts(end, layout_->index_kpool)), 0, options_.speculative_tokens);
}

// The indexer's filling pool (kpool − 1 raw rows in the slot, trunk and MTP layer alike) has no rollback copy: a
// row past the position c that completes a pool writes row 0 of the next pool over a row of c's pool. The rows a
// rolled-back sequence still needs are safe as long as no row lies past such a c that a rollback can land at or
// before: the verification's rows end .. end + k must not pass the first c ≥ end + 1 (k ≤ c − end), nor the chain's
// MTP pairs end .. end + k − 2 the first c ≥ end (k ≤ c − end + 2). With kpool 4 that allows 1 to 4 drafts by
// position; K = 1 is never cut (docs/engine.md "Speculative decoding", "State across rejected drafts").
int64_t PoolSafeDrafts(int64_t end, int64_t kpool) {
  if (kpool <= 1) return std::numeric_limits<int64_t>::max();
  const auto first_pool_end_from = [kpool](int64_t p) { return (p / kpool) * kpool + kpool - 1; };
  return std::min(first_pool_end_from(end + 1) - end, first_pool_end_from(end) - end + 2);
}

void EngineCore::DrawDraft(Sample& sample, std::span<const float> logits) {
  std::vector<float> penalised = SamplerLogits(sample, logits);  // [V], masked: drafts follow the grammar
  if (sample.sampler.greedy()) {
    sample.drafts.push_back(ArgMax(penalised));
  } else {
    // Sampling: q is kept for the acceptance test.
    TokenDistribution& q = sample.draft_distributions.emplace_back(sample.sampler.Distribution(penalised));
    sample.drafts.push_back(sample.sampler.Draw(q));
  }
}

Status EngineCore::RunMtp(std::span<const MtpWork> work, std::vector<std::pair<SequenceId, Status>>& failed) {
  const int64_t d = model_.config().hidden_size, vocab = model_.config().vocab_size;
  std::vector<MtpEntry> entries;  // [sequences with new pairs]
  std::vector<SequenceId> ids;
  // The image rows of the pairs' next tokens: the MTP layer embeds a placeholder as the trunk did (its image row).
  std::vector<std::vector<int32_t>> image_indices(work.size());  // [work][rows]
  std::vector<std::vector<float>> image_rows(work.size());       // [work][rows, D]
  for (size_t i = 0; i < work.size(); ++i) {
    const MtpWork& w = work[i];
    const Sample& sample = samples_.at(w.id);
    SequenceState& state = *sample.state;
    const SequenceInfo& info = scheduler_->Get(w.id);
    // Pairs first .. end − 1 are new. An export's last pair (h_{T−1}, x_T) waits for x_T, which the engine that
    // imports the state draws: that engine runs it (docs/disaggregation.md "Speculative decoding").
    const bool exported_end = Exports(sample) && state.tokens == info.prompt_length;
    const int64_t first = state.mtp_tokens, end = state.tokens - (exported_end ? 1 : 0);
    if (first == end) continue;
    const int64_t rows = static_cast<int64_t>(w.hidden.size()) / d;
    if (first < w.first_position || end > w.first_position + rows || end >= static_cast<int64_t>(info.tokens.size())) {
      return InternalError("engine: MTP pairs ", first, " .. ", end - 1, " of sequence ", w.id, " are not covered by ",
                           rows, " hidden rows from position ", w.first_position, " and ", info.tokens.size(),
                           " tokens");
    }
    // Pair p = (h_p, x_{p+1}): the trunk's final hidden at p and the token after it (all known now).
    if (Status status = MtpImageRows(w.id, first + 1, end - first, image_indices[i], image_rows[i]); !status.ok()) {
      failed.push_back({w.id, status});
      continue;
    }
    entries.push_back({&state,
                       w.hidden.subspan((first - w.first_position) * d, (end - first) * d),
                       std::span<const int32_t>(info.tokens.data() + first + 1, end - first),
                       DraftsWanted(w.id) > 0 ? LogitsWanted::kLast : LogitsWanted::kNone,
                       {image_indices[i], image_rows[i]}});
    ids.push_back(w.id);
  }
  if (entries.empty()) return Status::Ok();
  std::vector<std::vector<float>> logits;  // [entries][rows, V]
  std::vector<std::vector<float>> hidden;  // [entries][D] chained drafts' input
  Stopwatch clock;
  std::vector<Status> errors;
  const bool chain = options_.speculative_tokens > 1;
  const Status status = model_.MtpForwardBatch(entries, logits, options_.forward, &errors, chain ? &hidden : nullptr);
  counters_.mtp_seconds += clock.Seconds();
  counters_.model_seconds += clock.Seconds();
  const bool scoped = std::any_of(errors.begin(), errors.end(), [](const Status& e) { return !e.ok(); });
  for (size_t i = 0; i < entries.size() && !status.ok(); ++i) {
    if (!scoped || !errors[i].ok()) failed.push_back({ids[i], scoped ? errors[i] : status});
  }
  std::vector<SequenceId> chained;
  std::vector<std::vector<float>> chained_hidden;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].logits == LogitsWanted::kNone || (!status.ok() && (!scoped || !errors[i].ok()))) continue;
    if (static_cast<int64_t>(logits[i].size()) != vocab) {
      return InternalError("engine: the MTP layer gave ", logits[i].size(), " logits for one row of ", vocab);
    }
    // The last pair predicts x_{end+1}: drawn with the sample's own penalties and sampler.
    DrawDraft(samples_.at(ids[i]), logits[i]);
    scheduler_->SetDrafts(ids[i], 1);
    if (chain && DraftsWanted(ids[i]) > 1) {
      chained.push_back(ids[i]);
      chained_hidden.push_back(std::move(hidden[i]));
    }
  }
  if (chained.empty()) return Status::Ok();
  return ChainDrafts(std::move(chained), std::move(chained_hidden), failed);
}

namespace {

// One sample's chain past its first draft: the history and grammar state the verification starts from (restored
// when the chain ends: the drafts join them only for the draws), the MTP cache length it goes back to, and the
// MTP layer's output at the last pair, the next pair's hidden input.
struct DraftChain {
  SequenceId id = 0;
  int64_t want = 0;  // drafts wanted in all
  int64_t mtp_tokens = 0;
  TokenHistory history;
  std::optional<grammar::Matcher> matcher;
  bool grammar_dead_end = false;
  std::vector<float> hidden;  // [D]
};

}  // namespace

Status EngineCore::ChainDrafts(std::vector<SequenceId> ids, std::vector<std::vector<float>> hidden,
                               std::vector<std::pair<SequenceId, Status>>& failed) {
  std::vector<DraftChain> chains;
  const int64_t block_tokens = layout_->block_tokens();
  for (size_t i = 0; i < ids.size(); ++i) {
    Sample& sample = samples_.at(ids[i]);
    const int64_t end = sample.state->mtp_tokens, want = DraftsWanted(ids[i]);
    // The chain's pairs go to MTP positions end .. end + want − 2: blocks for them (the verification writes those
    // positions next step anyway), or fewer drafts when the pool has none free.
    CacheManager& memory = MemoryOf(ids[i]);
    const int64_t covered = static_cast<int64_t>(memory.BlockTable(ids[i]).size()) * block_tokens;
    const int64_t reachable = memory.Reserve(ids[i], end + want - 1) ? want : std::min(want, covered - end + 1);
    if (reachable < 2) continue;
    chains.push_back(
        {ids[i], reachable, end, sample.history, sample.matcher, sample.grammar_dead_end, std::move(hidden[i])});
  }
  for (;;) {
    std::vector<MtpEntry> entries;  // one pair per chain still drafting: (its hidden, its last draft)
    std::vector<DraftChain*> members;
    for (DraftChain& chain : chains) {
      Sample& sample = samples_.at(chain.id);
      if (static_cast<int64_t>(sample.drafts.size()) >= chain.want) continue;
      const int32_t last = sample.drafts.back();
      // The draw sees the drafts before it as the verification will, once they are accepted. Past an end id or a
      // token the grammar refuses, nothing is worth drafting.
      const bool ends = std::find(end_ids_.begin(), end_ids_.end(), last) != end_ids_.end();
      if (ends || (sample.matcher && !sample.grammar_dead_end && !sample.matcher->Advance(last))) {
        chain.want = static_cast<int64_t>(sample.drafts.size());
        continue;
      }
      sample.history.Add(last);
      entries.push_back({sample.state.get(),
                         chain.hidden,
                         std::span<const int32_t>(&sample.drafts.back(), 1),
                         LogitsWanted::kLast,
                         {}});
      members.push_back(&chain);
    }
    if (entries.empty()) break;
    std::vector<std::vector<float>> logits, outputs;  // [members][V], [members][D]
    std::vector<Status> errors;
    Stopwatch clock;
    const Status status = model_.MtpForwardBatch(entries, logits, options_.forward, &errors, &outputs);
    counters_.mtp_seconds += clock.Seconds();
    counters_.model_seconds += clock.Seconds();
    for (size_t j = 0; j < members.size(); ++j) {
      const bool entry_failed = !status.ok() && (errors.size() != members.size() || !errors[j].ok());
      if (entry_failed) {  // as a failed first MTP call: the request ends with the error
        failed.push_back({members[j]->id, errors.size() == members.size() && !errors[j].ok() ? errors[j] : status});
        members[j]->want = 0;
        continue;
      }
      DrawDraft(samples_.at(members[j]->id), logits[j]);
      members[j]->hidden = std::move(outputs[j]);
    }
  }
  for (DraftChain& chain : chains) {  // the sample as the verification finds it; the chain's pairs dropped
    Sample& sample = samples_.at(chain.id);
    sample.history = std::move(chain.history);
    sample.matcher = std::move(chain.matcher);
    sample.grammar_dead_end = chain.grammar_dead_end;
    sample.state->mtp_tokens = sample.state->mtp_dsa.tokens = chain.mtp_tokens;
    scheduler_->SetDrafts(chain.id, static_cast<int64_t>(sample.drafts.size()));
  }
  return Status::Ok();
}

}  // namespace glint
