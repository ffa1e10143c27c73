#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "io/checkpoint_schema.h"
#include "io/safetensors.h"
#include "kernels/reference.h"
#include "model/mhc.h"

namespace glint {
namespace {

// Writes selected positions [T, width] padded with −1, the golden `indexer_selected` layout.
std::vector<int32_t> PadSelections(const std::vector<std::vector<int64_t>>& selected, int64_t width) {
  std::vector<int32_t> out(selected.size() * width, -1);
  for (size_t t = 0; t < selected.size(); ++t) {
    const int64_t count = std::min<int64_t>(width, static_cast<int64_t>(selected[t].size()));
    for (int64_t i = 0; i < count; ++i) out[t * width + i] = static_cast<int32_t>(selected[t][i]);
  }
  return out;
}

void TraceRouting(Trace& trace, int sequence, const std::string& prefix, const std::vector<RouterChoice>& choices,
                  int64_t k) {
  std::vector<int32_t> experts;
  std::vector<float> weights, margins;
  for (const RouterChoice& choice : choices) {
    experts.insert(experts.end(), choice.experts.begin(), choice.experts.end());
    weights.insert(weights.end(), choice.weights.begin(), choice.weights.end());
    margins.push_back(choice.margin);
  }
  const int64_t tokens = static_cast<int64_t>(choices.size());
  trace.Ints(sequence, prefix + "moe_experts", experts, {tokens, k});
  trace.Floats(sequence, prefix + "moe_weights", weights, {tokens, k});
  trace.Floats(sequence, prefix + "moe_margin", margins, {tokens});
}

void TraceSelection(Trace& trace, int sequence, const std::string& prefix, const DsaTrace& dsa, int64_t width) {
  const int64_t tokens = static_cast<int64_t>(dsa.selected.size());
  trace.Ints(sequence, prefix + "indexer_selected", PadSelections(dsa.selected, width), {tokens, width});
  trace.Floats(sequence, prefix + "indexer_margin", dsa.margin, {tokens});
}

}  // namespace

ReferenceModel::ReferenceModel(ModelConfig config, ModelWeights weights, ShardPlan plan, Communicator* comm)
    : config_(std::move(config)), weights_(std::move(weights)), plan_(std::move(plan)), comm_(comm) {
  if (plan_.experts_of_rank.empty()) plan_ = SingleRankPlan(config_);
  GLINT_CHECK(!plan_.distributed() || (comm_ != nullptr && comm_->size() == plan_.ranks && comm_->rank() == plan_.rank))
      << "a plan for rank " << plan_.rank << " of " << plan_.ranks << " needs that rank's communicator";
}

Result<std::unique_ptr<ReferenceModel>> ReferenceModel::Load(const std::string& dir, const LoadOptions& options,
                                                             const ModelParallel& parallel) {
  GLINT_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  GLINT_ASSIGN_OR_RETURN(ShardPlan plan, MakeShardPlan(config, parallel));
  GLINT_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(dir));
  LoadOptions sharded = options;
  sharded.experts = plan.local_experts();
  GLINT_ASSIGN_OR_RETURN(ModelWeights weights, LoadModelWeights(checkpoint, config, sharded));
  return std::make_unique<ReferenceModel>(std::move(config), std::move(weights), std::move(plan), parallel.comm);
}

Status ReferenceModel::SumMoeOverRanks(std::span<float> partial) const {
  if (!plan_.distributed()) return Status::Ok();
  return comm_->AllReduceSum(partial).WithContext("summing the MoE outputs over the ranks");
}

SequenceState Model::NewSequence() const {
  const ModelConfig& c = config();
  CacheOptions options;
  options.block_tokens = StandaloneBlockTokens(c);
  Result<CacheLayout> layout = CacheLayoutFor(options);
  SequenceState state;
  state.owner = this;
  // A config whose sizes cannot be laid out gets a state without memory; Forward refuses it with the reason.
  if (!layout.ok()) return state;
  state.layout = std::make_shared<const CacheLayout>(std::move(layout).value());
  Result<std::unique_ptr<OwnedSequenceMemory>> owned =
      OwnedSequenceMemory::Create(options.block_tokens, state.layout->block_bytes, state.layout->slot_bytes);
  GLINT_CHECK(owned.ok()) << owned.status().ToString();
  state.owned = std::move(owned).value();
  state.memory = {&state.owned->blocks, &state.owned->block_table, state.owned->slot.Item(0)};
  if (c.HasMtp()) state.mtp_dsa = NewDsaCache(c);
  return state;
}

SequenceState Model::BindSequence(std::shared_ptr<const CacheLayout> layout, SequenceMemory memory, int64_t tokens,
                                  int64_t mtp_tokens) const {
  SequenceState state;
  state.owner = this;
  state.tokens = tokens;
  state.layout = std::move(layout);
  state.memory = memory;
  if (state.layout != nullptr && state.layout->has_mtp() && memory.slot != nullptr) {
    // The MTP layer's cache: its own segments of the same blocks (position p of the block table) and slot.
    const CacheLayout& l = *state.layout;
    DsaCache& cache = state.mtp_dsa;
    cache.kv_lora_rank = l.kv_lora_rank;
    cache.index_head_dim = l.index_head_dim;
    cache.kpool = l.index_kpool;
    cache.block_tokens = l.block_tokens();
    cache.blocks = memory.blocks;
    cache.block_table = memory.block_table;
    cache.latents_offset = l.mtp_latents;
    cache.pooled_offset = l.mtp_pooled;
    cache.pending = reinterpret_cast<float*>(memory.slot + l.mtp_pending);
    state.mtp_tokens = cache.tokens = mtp_tokens < 0 ? tokens : mtp_tokens;
  }
  return state;
}

int64_t ReferenceModel::weight_bytes() const {
  int64_t values = 0;
  for (const TensorSpec& spec : ExpectedTensors(config_)) {
    if (spec.layer == config_.MtpLayerIndex() && weights_.mtp == nullptr) continue;
    int64_t count = 1;
    for (int64_t dim : spec.shape) count *= dim;
    values += count;
  }
  // Experts of other ranks are not held (expert parallel).
  const int64_t moe_layers = std::count(config_.mlp_kinds.begin(), config_.mlp_kinds.end(), MlpKind::kMoe) +
                             (weights_.mtp != nullptr ? 1 : 0);
  const int64_t expert_values = 3 * config_.moe_intermediate_size * config_.hidden_size;
  values -= moe_layers * (config_.n_routed_experts - plan_.experts().count()) * expert_values;
  if (config_.n_shared_experts > 0 && !plan_.holds_shared_expert()) {
    values -= moe_layers * 3 * config_.SharedIntermediate() * config_.hidden_size;
  }
  return values * static_cast<int64_t>(sizeof(float));  // the reference dequantizes everything to fp32
}

Status Model::MtpForwardBatch(std::span<const MtpEntry> batch, std::vector<std::vector<float>>& logits,
                              const ForwardOptions& options, std::vector<Status>* entry_errors) const {
  logits.assign(batch.size(), {});
  if (entry_errors != nullptr) entry_errors->assign(batch.size(), Status::Ok());
  const int64_t vocab = config().vocab_size;
  Status first;
  size_t failed = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const MtpEntry& entry = batch[i];
    if (entry.state == nullptr) return InvalidArgument("MTP batch entry ", i, " has no sequence state");
    Status status = MtpForward(*entry.state, entry.hidden, entry.next_tokens, logits[i], options);
    if (!status.ok() && entry_errors == nullptr) return status.WithContext(StrCat("MTP batch entry ", i));
    if (!status.ok()) {  // this entry alone (an expert read): the others go on
      (*entry_errors)[i] = status;
      if (failed++ == 0) first = status.WithContext(StrCat("MTP batch entry ", i));
      logits[i].clear();
      continue;
    }
    const int64_t rows = static_cast<int64_t>(logits[i].size()) / vocab;
    if (entry.logits == LogitsWanted::kNone) {
      logits[i].clear();
    } else if (entry.logits == LogitsWanted::kLast && rows > 1) {
      logits[i].erase(logits[i].begin(), logits[i].end() - vocab);
    }
  }
  if (failed > 0) return first.WithContext(StrCat(failed, " of ", batch.size(), " MTP entries failed"));
  return Status::Ok();
}

Status FailedEntriesStatus(std::span<const EntryOutput> outputs) {
  size_t failed = 0, first = 0;
  for (size_t i = outputs.size(); i-- > 0;) {
    if (!outputs[i].error.ok()) ++failed, first = i;
  }
  if (failed == 0) return Status::Ok();
  return outputs[first].error.WithContext(StrCat("batch entry ", first, " (", failed, " of ", outputs.size(),
                                                 " entries failed; the others were computed)"));
}

Status CheckEntryMemory(const BatchEntry& entry, const ModelConfig& config) {
  const SequenceState& state = *entry.state;
  if (state.broken) {
    return FailedPrecondition("the sequence state was left inconsistent by a failed forward pass; start a new one");
  }
  if (state.layout == nullptr || state.memory.blocks == nullptr || state.memory.block_table == nullptr ||
      state.memory.slot == nullptr) {
    return FailedPrecondition("the sequence state has no cache memory (make it with NewSequence or BindSequence)");
  }
  GLINT_RETURN_IF_ERROR(state.layout->CheckMatches(config));
  if (state.memory.blocks->item_bytes() != state.layout->block_bytes) {
    return FailedPrecondition("the sequence's blocks are ", state.memory.blocks->item_bytes(),
                              " bytes; its layout needs ", state.layout->block_bytes);
  }
  if (state.tokens < 0) return FailedPrecondition("the sequence state has ", state.tokens, " positions");
  const int64_t total = entry.state->tokens + static_cast<int64_t>(entry.tokens.size());
  if (total > config.max_position_embeddings) {
    return OutOfRange("the sequence would reach ", total, " tokens; the model's maximum is ",
                      config.max_position_embeddings, " (max_position_embeddings)");
  }
  // Blocks for every position this call writes: the state's own memory grows (after all checks, in Forward);
  // an engine's must already be reserved.
  const int64_t capacity = static_cast<int64_t>(state.memory.block_table->size()) * state.layout->block_tokens();
  if (state.owned == nullptr && capacity < total) {
    return FailedPrecondition("the sequence's block table covers ", capacity, " positions but this call needs ",
                              total, "; reserve blocks before the forward pass");
  }
  int64_t previous = state.tokens;
  for (const StateCheckpoint& checkpoint : entry.checkpoints) {
    if (checkpoint.position <= previous || checkpoint.position > total) {
      return InvalidArgument("state checkpoint at position ", checkpoint.position,
                             " is not within this call's positions ", state.tokens + 1, " .. ", total, ", ascending");
    }
    if (checkpoint.position % state.layout->block_tokens() != 0) {
      return InvalidArgument("state checkpoint at position ", checkpoint.position, " is not at a block boundary (",
                             state.layout->block_tokens(), " tokens): the indexer's filling pool would be lost");
    }
    previous = checkpoint.position;
  }
  const StateCheckpoint& rollback = entry.rollback;
  if (rollback.data != nullptr || rollback.position != 0) {
    if (rollback.data == nullptr || rollback.position <= state.tokens || rollback.position >= total) {
      return InvalidArgument("the rollback snapshot at position ", rollback.position,
                             " is not strictly inside this call's positions ", state.tokens, " .. ", total,
                             " with memory to write to");
    }
  }
  for (int32_t block : *state.memory.block_table) {
    if (block < 0 || block >= state.memory.blocks->count()) {
      return FailedPrecondition("the sequence's block table names block ", block, " of ",
                                state.memory.blocks->count());
    }
  }
  return Status::Ok();
}

void PrepareEntryMemory(const BatchEntry& entry) {
  SequenceState& state = *entry.state;
  if (state.owned != nullptr) state.owned->Reserve(state.tokens + static_cast<int64_t>(entry.tokens.size()));
}

KdaStateView KdaLayerStateIn(const CacheLayout& layout, int64_t layer, std::byte* slot_like) {
  const CacheLayout::Layer& at = layout.layers[layer];
  KdaStateView view;
  view.conv_window = reinterpret_cast<float*>(slot_like + at.conv);
  view.recurrent = slot_like + at.recurrent;
  view.storage = layout.options.kda_state;
  return view;
}

KdaStateView KdaLayerState(const SequenceState& state, int64_t layer) {
  return KdaLayerStateIn(*state.layout, layer, state.memory.slot);
}

std::vector<std::pair<int64_t, std::byte*>> EntryStateCopies(const BatchEntry& entry) {
  std::vector<std::pair<int64_t, std::byte*>> copies;
  for (const StateCheckpoint& checkpoint : entry.checkpoints) {
    copies.emplace_back(checkpoint.position - entry.state->tokens, checkpoint.data);
  }
  if (entry.rollback.data != nullptr) {
    copies.emplace_back(entry.rollback.position - entry.state->tokens, entry.rollback.data);
  }
  std::stable_sort(copies.begin(), copies.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return copies;
}

void RollBack(SequenceState& state, const std::byte* snapshot, int64_t position) {
  GLINT_CHECK(state.memory.slot != nullptr && snapshot != nullptr && position >= 0 && position <= state.tokens)
      << "rollback to " << position << " of a sequence at " << state.tokens;
  std::memcpy(state.memory.slot, snapshot, state.layout->checkpoint_bytes);
  state.tokens = position;
}

void CopyKdaLayerState(const SequenceState& state, int64_t layer, std::byte* checkpoint) {
  const CacheLayout::Layer& at = state.layout->layers[layer];
  std::memcpy(checkpoint + at.conv, state.memory.slot + at.conv, state.layout->kda_conv_bytes);
  std::memcpy(checkpoint + at.recurrent, state.memory.slot + at.recurrent, state.layout->kda_recurrent_bytes);
}

DsaCache DsaLayerCache(const SequenceState& state, int64_t layer) {
  const CacheLayout& layout = *state.layout;
  const CacheLayout::Layer& at = layout.layers[layer];
  DsaCache cache;
  cache.kv_lora_rank = layout.kv_lora_rank;
  cache.index_head_dim = layout.index_head_dim;
  cache.kpool = layout.index_kpool;
  cache.block_tokens = layout.block_tokens();
  cache.tokens = state.tokens;
  cache.blocks = state.memory.blocks;
  cache.block_table = state.memory.block_table;
  cache.latents_offset = at.latents;
  cache.pooled_offset = at.pooled;
  cache.pending = reinterpret_cast<float*>(state.memory.slot + at.pending);
  return cache;
}

namespace {

Status CheckEntry(const Model& model, const BatchEntry& entry) {
  const ModelConfig& config = model.config();
  if (entry.state == nullptr) return InvalidArgument("batch entry has no sequence state");
  if (entry.state->owner != &model) {
    return InvalidArgument("the sequence state was not created by this model (call NewSequence on it)");
  }
  if (entry.tokens.empty()) return InvalidArgument("a batch entry has no tokens; expected at least one");
  for (size_t i = 0; i < entry.tokens.size(); ++i) {
    if (entry.tokens[i] < 0 || entry.tokens[i] >= config.vocab_size) {
      return InvalidArgument("token id ", entry.tokens[i], " at index ", i, " is out of range; expected 0 ≤ id < ",
                             config.vocab_size);
    }
  }
  return CheckEntryMemory(entry, config);
}

}  // namespace

Status CheckBatch(const Model& model, std::span<const BatchEntry> batch) {
  for (size_t i = 0; i < batch.size(); ++i) {
    Status status = CheckEntry(model, batch[i]);
    if (!status.ok()) return status.WithContext(StrCat("batch entry ", i));
    for (size_t j = 0; j < i; ++j) {
      if (batch[j].state == batch[i].state) return InvalidArgument("batch entries ", j, " and ", i, " share a state");
    }
  }
  return Status::Ok();
}

Status ReferenceModel::Forward(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                               const ForwardOptions& options, Trace* trace, const ForcedChoices* forced) const {
  GLINT_RETURN_IF_ERROR(CheckBatch(*this, batch));
  outputs.assign(batch.size(), EntryOutput{});
  for (const BatchEntry& entry : batch) PrepareEntryMemory(entry);
  // The reference runs each sequence alone: batching is an optimisation of the fast path, and the equivalence
  // "batched = one by one" is what the fast path is tested against.
  for (size_t i = 0; i < batch.size(); ++i) {
    GLINT_RETURN_IF_ERROR(ForwardOneOrBreak(batch[i], static_cast<int>(i), outputs[i], options, trace, forced));
  }
  return Status::Ok();
}

Status ReferenceModel::ForwardOneOrBreak(const BatchEntry& entry, int sequence, EntryOutput& output,
                                         const ForwardOptions& options, Trace* trace,
                                         const ForcedChoices* forced) const {
  Status status = ForwardOne(entry, sequence, output, options, trace, forced);
  if (!status.ok()) entry.state->broken = true;  // some layers may have written: the caches are now unknown
  return status;
}

namespace {

// The forced choices of one layer (tests replay another path's routing and selection), or null: choose.
const RouterChoice* ForcedRouterChoice(const ForcedChoices* forced, int64_t layer, int64_t token) {
  if (forced == nullptr || layer >= static_cast<int64_t>(forced->router.size())) return nullptr;
  if (token >= static_cast<int64_t>(forced->router[layer].size())) return nullptr;
  return &forced->router[layer][token];
}
const std::vector<std::vector<int64_t>>* ForcedAttended(const ForcedChoices* forced, int64_t layer) {
  if (forced == nullptr || layer >= static_cast<int64_t>(forced->attended.size())) return nullptr;
  return forced->attended[layer].empty() ? nullptr : &forced->attended[layer];
}

// Site read (§3): per token, the mHC coefficients of this site, the collapse of the streams, RMSNorm.
void MhcSiteRead(const MhcWeights& hc, const std::vector<float>& norm, const ModelConfig& c, int64_t tokens,
                 ReferenceActivations& act) {
  const int64_t d = c.hidden_size, hc_mult = c.hc_mult;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* x = &act.streams[t * hc_mult * d];
    act.site[t] = MhcComputeCoefficients(hc, c, x);
    MhcRead(act.site[t], x, hc_mult, d, act.collapsed.data());
    ref::RmsNorm(act.collapsed.data(), norm.data(), d, c.rms_norm_eps, &act.sublayer_in[t * d]);
  }
}

// Site write (§3): the sublayer's output mixed back into the streams with this site's coefficients.
void MhcSiteWrite(const ModelConfig& c, int64_t tokens, ReferenceActivations& act) {
  const int64_t d = c.hidden_size, hc_mult = c.hc_mult;
  for (int64_t t = 0; t < tokens; ++t) {
    MhcWrite(act.site[t], &act.sublayer_out[t * d], hc_mult, d, &act.streams[t * hc_mult * d]);
  }
}

// KDA over the chunk, split at the state checkpoints and the rollback snapshot: the layer's state at each of them
// is copied out on the way (each part computed as a call of its own would be, so checkpoints are exact).
Status KdaWithStateCopies(const KdaWeights& kda, const ModelConfig& c, const SequenceState& state, int64_t layer,
                          std::span<const std::pair<int64_t, std::byte*>> state_copies, const float* in,
                          int64_t tokens, KdaAlgorithm algorithm, float* out) {
  const int64_t d = c.hidden_size;
  const KdaStateView view = KdaLayerState(state, layer);
  int64_t done = 0;
  for (const auto& [end, destination] : state_copies) {
    if (end > done) GLINT_RETURN_IF_ERROR(KdaForward(kda, c, in + done * d, end - done, view, algorithm, out + done * d));
    if (destination != nullptr) CopyKdaLayerState(state, layer, destination);  // null: a split only
    done = end;
  }
  if (done < tokens) GLINT_RETURN_IF_ERROR(KdaForward(kda, c, in + done * d, tokens - done, view, algorithm, out + done * d));
  return Status::Ok();
}

}  // namespace

ReferenceActivations::ReferenceActivations(int64_t tokens, int64_t hc, int64_t d)
    : streams(tokens * hc * d), sublayer_in(tokens * d), sublayer_out(tokens * d), collapsed(d), site(tokens) {}

void ReferenceModel::Embed(const ReferencePass& pass, ReferenceActivations& act) const {
  const int64_t d = config_.hidden_size, hc = config_.hc_mult;
  // X: [T, hc, D], every stream starts as the token embedding (no scaling, no positions: NoPE).
  for (int64_t t = 0; t < pass.tokens; ++t) {
    const float* embedding = weights_.embed_tokens.Row(pass.entry.tokens[t]);
    for (int64_t s = 0; s < hc; ++s) std::copy_n(embedding, d, &act.streams[(t * hc + s) * d]);
  }
  if (pass.trace != nullptr) {
    std::vector<float> embedded(pass.tokens * d);
    for (int64_t t = 0; t < pass.tokens; ++t) std::copy_n(&act.streams[t * hc * d], d, &embedded[t * d]);
    pass.trace->Floats(pass.sequence, "hidden.emb", embedded, {pass.tokens, d});
  }
}

Status ReferenceModel::Attention(const ReferencePass& pass, int64_t l, const std::string& prefix,
                                 ReferenceActivations& act) const {
  const LayerWeights& layer = weights_.layers[l];
  if (layer.attention_kind == AttentionKind::kKda) {
    return KdaWithStateCopies(layer.kda, config_, *pass.entry.state, l, pass.state_copies, act.sublayer_in.data(),
                              pass.tokens, pass.options.kda_algorithm, act.sublayer_out.data());
  }
  DsaOptions dsa_options = pass.options.dsa;
  if (const auto* attended = ForcedAttended(pass.forced, l)) {
    dsa_options.selection = KeySelection::kForced;
    dsa_options.forced_positions = attended;
  }
  DsaTrace dsa_trace;
  DsaCache cache = DsaLayerCache(*pass.entry.state, l);
  GLINT_RETURN_IF_ERROR(DsaForward(layer.dsa, config_, act.sublayer_in.data(), pass.tokens, cache, dsa_options,
                                   act.sublayer_out.data(), pass.trace != nullptr ? &dsa_trace : nullptr));
  if (pass.trace != nullptr) TraceSelection(*pass.trace, pass.sequence, prefix, dsa_trace, config_.DenseRegimeTokens());
  return Status::Ok();
}

Status ReferenceModel::Ffn(const ReferencePass& pass, int64_t l, ReferenceActivations& act,
                           std::vector<RouterChoice>& choices) const {
  const LayerWeights& layer = weights_.layers[l];
  const int64_t d = config_.hidden_size;
  for (int64_t t = 0; t < pass.tokens; ++t) {
    const float* in = &act.sublayer_in[t * d];
    float* out = &act.sublayer_out[t * d];
    if (layer.mlp_kind == MlpKind::kDense) {
      SwiGluMlp(layer.mlp, config_.swiglu_limit, in, out);
    } else {
      choices.push_back(
          MoeForward(layer.moe, config_, in, out, ForcedRouterChoice(pass.forced, l, t), plan_.local_experts()));
    }
  }
  if (layer.mlp_kind == MlpKind::kMoe) GLINT_RETURN_IF_ERROR(SumMoeOverRanks(act.sublayer_out));
  return Status::Ok();
}

void ReferenceModel::TraceSublayer(const ReferencePass& pass, const std::string& name,
                                   const ReferenceActivations& act) const {
  if (pass.trace == nullptr) return;
  const int64_t d = config_.hidden_size;
  pass.trace->Floats(pass.sequence, name + "_in", act.sublayer_in, {pass.tokens, d});
  pass.trace->Floats(pass.sequence, name + "_out", act.sublayer_out, {pass.tokens, d});
}

void ReferenceModel::Head(const ReferencePass& pass, ReferenceActivations& act, EntryOutput& output) const {
  const ModelConfig& c = config_;
  const int64_t tokens = pass.tokens, d = c.hidden_size, hc = c.hc_mult;
  // Mean of the streams → RMSNorm → lm_head (only the rows asked for).
  std::vector<float> normed(tokens * d);  // [T, D]
  for (int64_t t = 0; t < tokens; ++t) {
    MhcCollapseMean(&act.streams[t * hc * d], hc, d, act.collapsed.data());
    ref::RmsNorm(act.collapsed.data(), weights_.final_norm.data(), d, c.rms_norm_eps, &normed[t * d]);
  }
  if (pass.trace != nullptr) pass.trace->Floats(pass.sequence, "final.normed", normed, {tokens, d});
  const int64_t first_row = pass.entry.logits == LogitsWanted::kAll ? 0 : tokens - 1;
  const int64_t rows = pass.entry.logits == LogitsWanted::kNone ? 0 : tokens - first_row;
  output.logits.resize(rows * c.vocab_size);
  ref::Linear(&normed[first_row * d], rows, weights_.lm_head.data.data(), c.vocab_size, d, output.logits.data());
  if (pass.entry.want_hidden) output.hidden = std::move(normed);
}

// The trunk, as the model card draws it (docs/model-glm53.md §2–§4): embed into hc streams; per layer an attention
// site and an FFN site, each "mHC read → RMSNorm → sublayer → mHC write"; then the head.
Status ReferenceModel::ForwardOne(const BatchEntry& entry, int sequence, EntryOutput& output,
                                  const ForwardOptions& options, Trace* trace, const ForcedChoices* forced) const {
  const ModelConfig& c = config_;
  const bool tracing = trace != nullptr && trace->Wants(sequence);
  const ReferencePass pass{entry, sequence, options, tracing ? trace : nullptr, forced,
                           static_cast<int64_t>(entry.tokens.size()), EntryStateCopies(entry)};
  ReferenceActivations act(pass.tokens, c.hc_mult, c.hidden_size);
  Embed(pass, act);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& layer = weights_.layers[l];
    const std::string prefix = "layer." + std::to_string(l) + ".";

    MhcSiteRead(layer.hc_attn, layer.input_layernorm, c, pass.tokens, act);  // attention site: KDA | DSA
    GLINT_RETURN_IF_ERROR(Attention(pass, l, prefix, act));
    TraceSublayer(pass, prefix + "attn", act);
    MhcSiteWrite(c, pass.tokens, act);

    MhcSiteRead(layer.hc_ffn, layer.post_attention_layernorm, c, pass.tokens, act);  // FFN site: dense MLP | MoE
    std::vector<RouterChoice> choices;
    GLINT_RETURN_IF_ERROR(Ffn(pass, l, act, choices));
    MhcSiteWrite(c, pass.tokens, act);
    TraceSublayer(pass, prefix + "ffn", act);
    if (tracing) {
      trace->Floats(sequence, prefix + "streams", act.streams, {pass.tokens, c.hc_mult, c.hidden_size});
      if (layer.mlp_kind == MlpKind::kMoe) TraceRouting(*trace, sequence, prefix, choices, c.num_experts_per_tok);
    }
  }
  entry.state->tokens += pass.tokens;
  Head(pass, act, output);
  return Status::Ok();
}

Status ReferenceModel::MtpForward(SequenceState& state, std::span<const float> hidden,
                                  std::span<const int32_t> next_tokens, std::vector<float>& logits,
                                  const ForwardOptions& options, Trace* trace) const {
  const ModelConfig& c = config_;
  if (weights_.mtp == nullptr) return FailedPrecondition("the model has no MTP layer loaded");
  if (state.owner != this) return InvalidArgument("the sequence state was not created by this model");
  if (state.mtp_dsa.blocks == nullptr) {
    return FailedPrecondition("this sequence has no MTP cache: bind it with a cache layout made with "
                              "CacheOptions::mtp (speculative decoding), or use NewSequence");
  }
  const int64_t pairs = static_cast<int64_t>(next_tokens.size());
  const int64_t d = c.hidden_size;
  if (pairs == 0) return InvalidArgument("MTP needs at least one (hidden, next token) pair");
  if (static_cast<int64_t>(hidden.size()) != pairs * d) {
    return InvalidArgument("MTP hidden has ", hidden.size(), " values; expected ", pairs, " × ", d);
  }
  for (int32_t token : next_tokens) {
    if (token < 0 || token >= c.vocab_size) return InvalidArgument("MTP token id ", token, " is out of range");
  }
  const MtpWeights& m = *weights_.mtp;
  const bool tracing = trace != nullptr && trace->Wants(0);
  // z = eh_proj · [RMSNorm(embed(x_{t+1}); enorm) ; RMSNorm(h_t; hnorm)] — the embedding half first.
  std::vector<float> concat(2 * d), z(pairs * d), normed(pairs * d), sublayer(pairs * d);  // z, normed: [T, D]
  for (int64_t t = 0; t < pairs; ++t) {
    ref::RmsNorm(weights_.embed_tokens.Row(next_tokens[t]), m.enorm.data(), d, c.rms_norm_eps, concat.data());
    ref::RmsNorm(&hidden[t * d], m.hnorm.data(), d, c.rms_norm_eps, concat.data() + d);
    ref::Linear(concat.data(), 1, m.eh_proj.data.data(), d, 2 * d, &z[t * d]);
  }
  if (tracing) trace->Floats(0, "mtp.eh_out", z, {pairs, d});
  // r = z + DSA(RMSNorm(z)) — plain residuals, no mHC (pitfall 12).
  for (int64_t t = 0; t < pairs; ++t) ref::RmsNorm(&z[t * d], m.input_layernorm.data(), d, c.rms_norm_eps, &normed[t * d]);
  DsaTrace dsa_trace;
  GLINT_RETURN_IF_ERROR(DsaForward(m.dsa, c, normed.data(), pairs, state.mtp_dsa, options.dsa, sublayer.data(),
                                   tracing ? &dsa_trace : nullptr));
  if (tracing) {
    trace->Floats(0, "mtp.attn_out", sublayer, {pairs, d});
    TraceSelection(*trace, 0, "mtp.", dsa_trace, c.DenseRegimeTokens());
  }
  for (int64_t i = 0; i < pairs * d; ++i) z[i] += sublayer[i];
  // r = r + MoE(RMSNorm(r))
  std::vector<RouterChoice> choices;
  for (int64_t t = 0; t < pairs; ++t) {
    ref::RmsNorm(&z[t * d], m.post_attention_layernorm.data(), d, c.rms_norm_eps, &normed[t * d]);
    choices.push_back(MoeForward(m.moe, c, &normed[t * d], &sublayer[t * d], nullptr, plan_.local_experts()));
  }
  GLINT_RETURN_IF_ERROR(SumMoeOverRanks(sublayer));
  if (tracing) {
    trace->Floats(0, "mtp.ffn_out", sublayer, {pairs, d});
    TraceRouting(*trace, 0, "mtp.", choices, c.num_experts_per_tok);
  }
  for (int64_t i = 0; i < pairs * d; ++i) z[i] += sublayer[i];
  // logits = lm_head · RMSNorm(r; shared_head.norm), sharing the trunk's lm_head.
  for (int64_t t = 0; t < pairs; ++t) ref::RmsNorm(&z[t * d], m.shared_head_norm.data(), d, c.rms_norm_eps, &normed[t * d]);
  logits.resize(pairs * c.vocab_size);
  ref::Linear(normed.data(), pairs, weights_.lm_head.data.data(), c.vocab_size, d, logits.data());
  state.mtp_tokens += pairs;
  return Status::Ok();
}

}  // namespace glint
