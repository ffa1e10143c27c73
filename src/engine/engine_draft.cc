// EngineCore's token choice and MTP drafts (docs/engine.md "Sampling", "Speculative decoding"): the penalised
// logits a sample draws from, the speculative-sampling check of a drafted token, and the MTP layer run for the
// sequences that want a draft. Split from engine_core.cc to keep each file readable.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "base/log.h"
#include "engine/engine_core.h"

namespace glint {

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

std::pair<int32_t, bool> EngineCore::VerifyDraft(Sample& sample, std::span<const float> logits) {
  // The draft was drawn under the same mask (RunMtp masks with the state this position starts from), so the
  // acceptance test compares two distributions over the allowed tokens and stays lossless.
  std::vector<float> penalised = SamplerLogits(sample, logits);
  if (sample.sampler.greedy()) {  // the target is one token: the draft is kept exactly when it is that token
    const int32_t token = ArgMax(penalised);
    return {token, token == sample.draft};
  }
  return sample.sampler.Verify(sample.sampler.Distribution(penalised), sample.draft, sample.draft_distribution);
}

void EngineCore::Append(SequenceId id, int32_t token) {
  Sample& sample = samples_.at(id);
  if (sample.matcher && !sample.grammar_dead_end && !sample.matcher->Advance(token)) sample.grammar_dead_end = true;
  sample.history.Add(token);
  scheduler_->AppendToken(id, token);
}

void EngineCore::ClearDraft(SequenceId id) {
  Sample& sample = samples_.at(id);
  sample.draft = -1;
  sample.draft_distribution.clear();
  if (scheduler_->Contains(id) && scheduler_->Get(id).has_draft) scheduler_->SetDraft(id, false);
}

bool EngineCore::WantsDraft(SequenceId id) const {
  const Sample& sample = samples_.at(id);
  const SequenceInfo& info = scheduler_->Get(id);
  const int64_t end = sample.state->tokens;  // the next decode computes x_end, and the draft is x_{end+1}
  const int64_t generated = static_cast<int64_t>(info.tokens.size()) - info.prompt_length;
  return end + 1 == static_cast<int64_t>(info.tokens.size()) && end >= info.prompt_length &&
         generated + 2 <= requests_.at(sample.request).max_tokens;
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
    SequenceState& state = *samples_.at(w.id).state;
    const SequenceInfo& info = scheduler_->Get(w.id);
    const int64_t first = state.mtp_tokens, end = state.tokens;  // pairs first .. end − 1 are new
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
                       WantsDraft(w.id) ? LogitsWanted::kLast : LogitsWanted::kNone,
                       {image_indices[i], image_rows[i]}});
    ids.push_back(w.id);
  }
  if (entries.empty()) return Status::Ok();
  std::vector<std::vector<float>> logits;  // [entries][rows, V]
  Stopwatch clock;
  std::vector<Status> errors;
  const Status status = model_.MtpForwardBatch(entries, logits, options_.forward, &errors);
  counters_.mtp_seconds += clock.Seconds();
  counters_.model_seconds += clock.Seconds();
  const bool scoped = std::any_of(errors.begin(), errors.end(), [](const Status& e) { return !e.ok(); });
  for (size_t i = 0; i < entries.size() && !status.ok(); ++i) {
    if (!scoped || !errors[i].ok()) failed.push_back({ids[i], scoped ? errors[i] : status});
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].logits == LogitsWanted::kNone || (!status.ok() && (!scoped || !errors[i].ok()))) continue;
    if (static_cast<int64_t>(logits[i].size()) != vocab) {
      return InternalError("engine: the MTP layer gave ", logits[i].size(), " logits for one row of ", vocab);
    }
    // The last pair predicts x_{end+1}: drawn with the sample's own penalties and sampler (its distribution q is
    // kept for the acceptance test when sampling).
    Sample& sample = samples_.at(ids[i]);
    std::vector<float> penalised = SamplerLogits(sample, logits[i]);  // [V], masked: drafts follow the grammar
    if (sample.sampler.greedy()) {
      sample.draft = ArgMax(penalised);
    } else {
      sample.draft_distribution = sample.sampler.Distribution(penalised);
      sample.draft = sample.sampler.Draw(sample.draft_distribution);
    }
    scheduler_->SetDraft(ids[i], true);
  }
  return Status::Ok();
}

}  // namespace glint
