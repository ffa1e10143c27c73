// The MTP layer on the fast path (model-glm53.md §10), batched across sequences: one pass over every entry's pairs
// (h_t, x_{t+1}), so that its weights — eh_proj, the DSA sublayer, the MoE and lm_head — are read once per call,
// not once per sequence. Every product quantizes per row and every sublayer keeps rows apart (the DSA sublayer
// attends within its own sequence's cache; the MoE sums each row's experts in ascending id), so an entry's outputs
// are bit for bit those of the same entry alone (FastMtp.BatchEqualsOneAtATime).
#include <algorithm>
#include <cstring>

#include "fast/fast_model.h"
#include "kernels/vector_ops.h"
#include "model/forward_common.h"

namespace glint {

// One pass of the MTP layer: the entries' pairs as consecutive rows, one segment per entry.
struct FastMtpPass {
  std::span<const MtpEntry> batch;
  std::vector<Segment> segments;  // [entries] rows of entry i: segments[i].row .. + count
  int64_t rows = 0;
  Trace* trace = nullptr;  // MtpForward's (one entry), else null
};

// What one pass gives: the rows' normed outputs and, per entry, its logits or the error of a row that failed.
struct FastMtpResult {
  std::vector<float> normed;               // [rows, D] RMSNorm(r; shared_head.norm), the head's input
  std::vector<std::vector<float>> logits;  // [entries][wanted rows, V] on rank 0
  std::vector<Status> entry_errors;        // [entries] an expert read that failed for the entry's rows
};

namespace {

FastMtpPass MakeMtpPass(std::span<const MtpEntry> batch, Trace* trace) {
  FastMtpPass pass{batch, {}, 0, trace};
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t pairs = static_cast<int64_t>(batch[i].next_tokens.size());
    pass.segments.push_back({static_cast<int>(i), pass.rows, pairs, batch[i].state->mtp_dsa.tokens, 0, {}});
    pass.rows += pairs;
  }
  return pass;
}

// The rows of entry `s` that want logits: every pair, the last one, or none.
std::pair<int64_t, int64_t> LogitRows(const MtpEntry& entry, const Segment& s) {
  switch (entry.logits) {
    case LogitsWanted::kAll:
      return {s.row, s.count};
    case LogitsWanted::kLast:
      return {s.row + s.count - 1, 1};
    case LogitsWanted::kNone:
      break;
  }
  return {s.row, 0};
}

}  // namespace

// z = eh_proj · [RMSNorm(embed(x_{t+1}); enorm) ; RMSNorm(h_t; hnorm)] per row [rows, D], an image placeholder's
// embedding being the image row the trunk took there.
void FastModel::MtpInput(const FastMtpPass& pass, std::vector<float>& z) const {
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size;
  const FastMtpWeights& m = *weights_.mtp;
  std::vector<float> concat(pass.rows * 2 * d);  // [rows, 2D]
  for (const Segment& s : pass.segments) {
    const MtpEntry& entry = pass.batch[s.sequence];
    for (int64_t t = 0; t < s.count; ++t) {
      float* row = concat.data() + (s.row + t) * 2 * d;
      if (const float* image = ReplacedEmbedding(entry.replaced, t, d)) {
        std::copy(image, image + d, row);
      } else {
        weights_.embed.Row(entry.next_tokens[t], row);
      }
      vec::RmsNorm(row, m.enorm, d, c.rms_norm_eps, row);
      vec::RmsNorm(entry.hidden.data() + t * d, m.hnorm, d, c.rms_norm_eps, row + d);
    }
  }
  z.resize(pass.rows * d);
  context_->Linear(m.eh_proj, concat.data(), 2 * d, pass.rows, z.data(), d);
}

// r = z + DSA(RMSNorm(z; attn_norm)), each entry attending over its own MTP cache — plain residuals, no mHC.
Status FastModel::MtpAttention(const FastMtpPass& pass, std::vector<float>& z, DsaTrace* selections) const {
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size;
  const FastMtpWeights& m = *weights_.mtp;
  std::vector<float> normed(pass.rows * d), sublayer(pass.rows * d);  // [rows, D]
  for (int64_t t = 0; t < pass.rows; ++t) vec::RmsNorm(&z[t * d], m.attn_norm, d, c.rms_norm_eps, &normed[t * d]);
  std::vector<DsaCache> caches;  // [entries] views of the states' MTP caches; their lengths go back on success
  for (const MtpEntry& entry : pass.batch) caches.push_back(entry.state->mtp_dsa);
  GLINT_RETURN_IF_ERROR(
      FastDsa(*context_, m.dsa, normed.data(), pass.segments, caches, {}, sublayer.data(), selections));
  for (size_t i = 0; i < caches.size(); ++i) pass.batch[i].state->mtp_dsa.tokens = caches[i].tokens;
  GLINT_RETURN_IF_ERROR(SumOverTensorGroup(plan_.mla_split, sublayer.data(), pass.rows, "MTP MLA"));
  for (int64_t i = 0; i < pass.rows * d; ++i) z[i] += sublayer[i];
  return Status::Ok();
}

// r = r + MoE(RMSNorm(r; ffn_norm)). With an expert cache a failed read marks its rows (row_errors) instead of
// failing the call: the rank still joins the all-reduce, and only the entries of those rows fail.
Status FastModel::MtpFfn(const FastMtpPass& pass, std::vector<float>& z, std::vector<RouterChoice>* choices,
                         std::vector<Status>& row_errors) const {
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size;
  const FastMtpWeights& m = *weights_.mtp;
  FastContext& ctx = *context_;
  std::vector<float> normed(pass.rows * d), sublayer(pass.rows * d);  // [rows, D]
  for (int64_t t = 0; t < pass.rows; ++t) vec::RmsNorm(&z[t * d], m.ffn_norm, d, c.rms_norm_eps, &normed[t * d]);
  if (expert_cache_ != nullptr) ctx.row_errors.assign(pass.rows, Status::Ok());
  Status moe =
      FastMoe(ctx, m.moe, normed.data(), pass.rows, {}, sublayer.data(), choices, nullptr, plan_.local_experts());
  if (moe.ok()) {
    if (choices != nullptr) RecordRouting(c.num_hidden_layers, *choices);
    moe = SumMoeOverRanks(sublayer.data(), pass.rows);
  }
  row_errors = std::move(ctx.row_errors);
  ctx.row_errors.clear();
  GLINT_RETURN_IF_ERROR(moe);
  for (int64_t i = 0; i < pass.rows * d; ++i) z[i] += sublayer[i];
  return Status::Ok();
}

// logits = lm_head · RMSNorm(r; shared_head.norm) for the rows the entries want (lm_head shared with the trunk).
Status FastModel::MtpHead(const FastMtpPass& pass, const std::vector<float>& z, bool want_logits,
                          FastMtpResult& result) const {
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size;
  result.normed.resize(pass.rows * d);
  for (int64_t t = 0; t < pass.rows; ++t) {
    vec::RmsNorm(&z[t * d], weights_.mtp->head_norm, d, c.rms_norm_eps, &result.normed[t * d]);
  }
  result.logits.assign(pass.batch.size(), {});
  if (!want_logits || !(plan_.computes_logits() || plan_.head_split())) return Status::Ok();
  std::vector<float> gathered;  // [logit rows, D]
  for (const Segment& s : pass.segments) {
    const auto [first, count] = LogitRows(pass.batch[s.sequence], s);
    gathered.insert(gathered.end(), result.normed.begin() + first * d, result.normed.begin() + (first + count) * d);
  }
  const int64_t rows = static_cast<int64_t>(gathered.size()) / d;
  if (!plan_.computes_logits() && !plan_.splits_head(rows)) return Status::Ok();
  const bool receives = plan_.receives_logits();
  std::vector<float> out(rows * (receives ? c.vocab_size : weights_.lm_head.rows()));  // [rows, V or this rank's]
  GLINT_RETURN_IF_ERROR(LmHead(gathered.data(), rows, out.data(), out.data()));
  if (!receives) return Status::Ok();
  int64_t next = 0;
  for (const Segment& s : pass.segments) {
    const int64_t count = LogitRows(pass.batch[s.sequence], s).second;
    result.logits[s.sequence].assign(out.begin() + next * c.vocab_size, out.begin() + (next + count) * c.vocab_size);
    next += count;
  }
  return Status::Ok();
}

// The layer over one pass of checked entries. An entry whose rows lost an expert read gets its error in
// result.entry_errors and its MTP cache keeps its length from before the call (the rows it wrote past that length
// are written again before anything reads them, as after a rollback); every other entry advances.
Status FastModel::RunMtpPass(const FastMtpPass& pass, bool want_logits, FastMtpResult& result) const {
  const ModelConfig& c = config_;
  if (plan_.tensor_parallel()) GLINT_RETURN_IF_ERROR(TensorGroup().status());
  std::vector<int64_t> lengths;  // [entries] MTP cache lengths before the call
  for (const MtpEntry& entry : pass.batch) lengths.push_back(entry.state->mtp_dsa.tokens);
  std::vector<float> z;  // [rows, D] the residual r
  MtpInput(pass, z);
  DsaTrace selections;
  GLINT_RETURN_IF_ERROR(MtpAttention(pass, z, pass.trace != nullptr ? &selections : nullptr));
  std::vector<RouterChoice> choices;
  std::vector<Status> row_errors;
  GLINT_RETURN_IF_ERROR(MtpFfn(pass, z, pass.trace != nullptr || expert_trace_ ? &choices : nullptr, row_errors));
  GLINT_RETURN_IF_ERROR(MtpHead(pass, z, want_logits, result));
  result.entry_errors.assign(pass.batch.size(), Status::Ok());
  for (const Segment& s : pass.segments) {
    SequenceState& state = *pass.batch[s.sequence].state;
    for (int64_t t = 0; t < s.count && !row_errors.empty(); ++t) {
      if (row_errors[s.row + t].ok()) continue;
      result.entry_errors[s.sequence] = row_errors[s.row + t];
      result.logits[s.sequence].clear();
      break;
    }
    if (result.entry_errors[s.sequence].ok()) {
      state.mtp_tokens += s.count;
    } else {
      state.mtp_dsa.tokens = lengths[s.sequence];
    }
  }
  if (pass.trace != nullptr && pass.trace->Wants(0)) {
    pass.trace->Ints(0, "mtp.indexer_selected", PadSelections(selections.selected, c.DenseRegimeTokens()),
                     {pass.rows, c.DenseRegimeTokens()});
    std::vector<int32_t> experts;
    for (const RouterChoice& choice : choices)
      experts.insert(experts.end(), choice.experts.begin(), choice.experts.end());
    pass.trace->Ints(0, "mtp.moe_experts", experts, {pass.rows, c.num_experts_per_tok});
  }
  return Status::Ok();
}

Status FastModel::MtpForwardChecked(SequenceState& state, std::span<const float> hidden,
                                    std::span<const int32_t> next_tokens, std::vector<float>& logits,
                                    const ForwardOptions& options, Trace* trace, const MtpReplacedEmbeddings& replaced,
                                    std::vector<float>* normed) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const MtpEntry entry{&state, hidden, next_tokens, LogitsWanted::kAll, replaced};
  FastMtpResult result;
  GLINT_RETURN_IF_ERROR(RunMtpPass(MakeMtpPass({&entry, 1}, trace), options.mtp_logits, result));
  GLINT_RETURN_IF_ERROR(result.entry_errors[0]);
  logits = std::move(result.logits[0]);
  if (normed != nullptr) *normed = std::move(result.normed);
  return Status::Ok();
}

Status FastModel::MtpForwardBatch(std::span<const MtpEntry> batch, std::vector<std::vector<float>>& logits,
                                  const ForwardOptions& options, std::vector<Status>* entry_errors,
                                  std::vector<std::vector<float>>* last_hidden) const {
  GLINT_RETURN_IF_ERROR(CheckOptions(options));
  for (size_t i = 0; i < batch.size(); ++i) {  // every input checked before any state changes
    if (batch[i].state == nullptr) return InvalidArgument("MTP batch entry ", i, " has no sequence state");
    const MtpEntry& e = batch[i];
    GLINT_RETURN_IF_ERROR(
        CheckMtpInput(*this, *e.state, e.hidden, e.next_tokens, e.replaced).WithContext(StrCat("MTP batch entry ", i)));
    for (size_t j = 0; j < i; ++j) {
      if (batch[j].state == e.state) return InvalidArgument("MTP batch entries ", j, " and ", i, " share a state");
    }
  }
  logits.assign(batch.size(), {});
  if (entry_errors != nullptr) entry_errors->assign(batch.size(), Status::Ok());
  if (last_hidden != nullptr) last_hidden->assign(batch.size(), {});
  if (batch.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(mutex_);
  const FastMtpPass pass = MakeMtpPass(batch, nullptr);
  FastMtpResult result;
  GLINT_RETURN_IF_ERROR(RunMtpPass(pass, options.mtp_logits, result));
  logits = std::move(result.logits);
  const int64_t d = config_.hidden_size;
  for (size_t i = 0; last_hidden != nullptr && i < batch.size(); ++i) {
    const int64_t last = pass.segments[i].row + pass.segments[i].count - 1;
    (*last_hidden)[i].assign(result.normed.begin() + last * d, result.normed.begin() + (last + 1) * d);
  }
  size_t failed = 0, first = 0;
  for (size_t i = batch.size(); i-- > 0;) {
    if (!result.entry_errors[i].ok()) ++failed, first = i;
  }
  if (entry_errors != nullptr) *entry_errors = result.entry_errors;
  if (failed == 0) return Status::Ok();
  return result.entry_errors[first].WithContext(
      StrCat("MTP batch entry ", first, " (", failed, " of ", batch.size(), " MTP entries failed)"));
}

}  // namespace glint
