#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "dist/lm_head_split.h"
#include "io/checkpoint_schema.h"
#include "io/safetensors.h"
#include "kernels/reference.h"
#include "model/forward_common.h"
#include "model/mhc.h"
#include "model/tensor_parallel.h"

namespace glint {
namespace {

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

ReferenceModel::ReferenceModel(ModelConfig config, ModelWeights weights, ShardPlan plan, Communicator* comm,
                               std::unique_ptr<Communicator> tp_comm)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      plan_(std::move(plan)),
      comm_(comm),
      tp_comm_(std::move(tp_comm)) {
  if (plan_.experts_of_rank.empty()) plan_ = SingleRankPlan(config_);
  local_ = LocalConfig(config_, plan_);
  GLINT_CHECK(!plan_.distributed() || (comm_ != nullptr && comm_->size() == plan_.ranks && comm_->rank() == plan_.rank))
      << "a plan for rank " << plan_.rank << " of " << plan_.ranks << " needs that rank's communicator";
  GLINT_CHECK(!plan_.tensor_parallel() ||
              (tp_comm_ != nullptr && tp_comm_->size() == plan_.tp && tp_comm_->rank() == plan_.tp_rank()))
      << "a plan with --tp " << plan_.tp << " needs the communicator of the rank's tp group";
}

Result<std::unique_ptr<ReferenceModel>> ReferenceModel::Load(const std::string& dir, const LoadOptions& options,
                                                             const ModelParallel& parallel) {
  if (parallel.dp_attention) {
    return Unimplemented("--dp-attention runs on the fast path only, not --path reference");
  }
  GLINT_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  GLINT_ASSIGN_OR_RETURN(ShardPlan plan, MakeShardPlan(config, parallel));
  // The reference keeps lm_head whole on rank 0 at --tp 1 (--lm-head-split-rows is the fast path's).
  plan.head_split_rows = 0;
  plan.head_rows_of_rank.clear();
  GLINT_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(dir));
  LoadOptions sharded = options;
  sharded.experts = plan.local_experts();
  sharded.regions = TensorParallelRegions(config, plan);  // only this rank's slices are read
  GLINT_ASSIGN_OR_RETURN(ModelWeights weights, LoadModelWeights(checkpoint, config, sharded));
  std::unique_ptr<Communicator> tp_comm;
  if (plan.tensor_parallel()) {
    // Collective over every rank: the groups are the ep ranks, each ordered by tp rank.
    GLINT_ASSIGN_OR_RETURN(tp_comm, parallel.comm->Split(plan.ep_rank(), plan.tp_rank()));
  }
  return std::make_unique<ReferenceModel>(std::move(config), std::move(weights), std::move(plan), parallel.comm,
                                          std::move(tp_comm));
}

Status ReferenceModel::SumMoeOverRanks(std::span<float> partial) const {
  if (!plan_.distributed()) return Status::Ok();
  return comm_->AllReduceSum(partial).WithContext("summing the MoE outputs over the ranks");
}

Status ReferenceModel::SumOverTensorGroup(bool split, std::span<float> partial, const char* what) const {
  if (!split || !plan_.tensor_parallel()) return Status::Ok();
  return tp_comm_->AllReduceSum(partial).WithContext(StrCat("summing the ", what, " outputs over the tp group"));
}

int64_t ReferenceModel::weight_bytes() const {
  // Only what this rank holds: its experts and slices; the reference dequantizes everything to fp32.
  return CountWeightValues(weights_) * static_cast<int64_t>(sizeof(float));
}

// The reference runs each sequence alone: batching is an optimisation of the fast path, and the equivalence
// "batched = one by one" is what the fast path is tested against.
Status ReferenceModel::ForwardBatch(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                                    const ForwardOptions& options, Trace* trace, const ForcedChoices* forced) const {
  for (size_t i = 0; i < batch.size(); ++i) {
    GLINT_RETURN_IF_ERROR(ForwardOne(batch[i], static_cast<int>(i), outputs[i], options, trace, forced));
  }
  return Status::Ok();
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
                          std::span<const std::pair<int64_t, std::byte*>> state_copies, const float* in, int64_t tokens,
                          KdaAlgorithm algorithm, float* out) {
  const int64_t d = c.hidden_size;
  const KdaStateView view = KdaLayerState(state, layer);
  int64_t done = 0;
  for (const auto& [end, destination] : state_copies) {
    if (end > done)
      GLINT_RETURN_IF_ERROR(KdaForward(kda, c, in + done * d, end - done, view, algorithm, out + done * d));
    if (destination != nullptr) CopyKdaLayerState(state, layer, destination);  // null: a split only
    done = end;
  }
  if (done < tokens)
    GLINT_RETURN_IF_ERROR(KdaForward(kda, c, in + done * d, tokens - done, view, algorithm, out + done * d));
  return Status::Ok();
}

}  // namespace

ReferenceActivations::ReferenceActivations(int64_t tokens, int64_t hc, int64_t d)
    : streams(tokens * hc * d), sublayer_in(tokens * d), sublayer_out(tokens * d), collapsed(d), site(tokens) {}

void ReferenceModel::Embed(const ReferencePass& pass, ReferenceActivations& act) const {
  const int64_t d = config_.hidden_size, hc = config_.hc_mult;
  // X: [T, hc, D], every stream starts as the token embedding (no scaling, no positions: NoPE).
  for (int64_t t = 0; t < pass.tokens; ++t) {
    const float* replaced = ReplacedEmbedding(pass.entry, t, d);
    const float* embedding = replaced != nullptr ? replaced : weights_.embed_tokens.Row(pass.entry.tokens[t]);
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
    GLINT_RETURN_IF_ERROR(KdaWithStateCopies(layer.kda, local_, *pass.entry.state, l, pass.state_copies,
                                             act.sublayer_in.data(), pass.tokens, pass.options.kda_algorithm,
                                             act.sublayer_out.data()));
    return SumOverTensorGroup(plan_.kda_split, act.sublayer_out, "KDA");
  }
  DsaOptions dsa_options = pass.options.dsa;
  if (const auto* attended = ForcedAttended(pass.forced, l)) {
    dsa_options.selection = KeySelection::kForced;
    dsa_options.forced_positions = attended;
  }
  DsaTrace dsa_trace;
  DsaCache cache = DsaLayerCache(*pass.entry.state, l);
  GLINT_RETURN_IF_ERROR(DsaForward(layer.dsa, local_, act.sublayer_in.data(), pass.tokens, cache, dsa_options,
                                   act.sublayer_out.data(), pass.trace != nullptr ? &dsa_trace : nullptr));
  GLINT_RETURN_IF_ERROR(SumOverTensorGroup(plan_.mla_split, act.sublayer_out, "MLA"));
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
          MoeForward(layer.moe, local_, in, out, ForcedRouterChoice(pass.forced, l, t), plan_.local_experts()));
    }
  }
  if (layer.mlp_kind == MlpKind::kMoe) return SumMoeOverRanks(act.sublayer_out);
  return SumOverTensorGroup(plan_.mlp_split, act.sublayer_out, "dense MLP");
}

void ReferenceModel::TraceSublayer(const ReferencePass& pass, const std::string& name,
                                   const ReferenceActivations& act) const {
  if (pass.trace == nullptr) return;
  const int64_t d = config_.hidden_size;
  pass.trace->Floats(pass.sequence, name + "_in", act.sublayer_in, {pass.tokens, d});
  pass.trace->Floats(pass.sequence, name + "_out", act.sublayer_out, {pass.tokens, d});
}

Status ReferenceModel::LmHead(const float* normed, int64_t rows, std::vector<float>& logits) const {
  const int64_t vocab = config_.vocab_size, d = config_.hidden_size;
  logits.clear();
  if (rows == 0 || !plan_.computes_logits()) return Status::Ok();  // not rank 0's group: only rank 0 samples
  if (plan_.receives_logits()) logits.resize(rows * vocab);
  if (!plan_.vocab_split) {
    ref::Linear(normed, rows, weights_.lm_head.data.data(), vocab, d, logits.data());
    return Status::Ok();
  }
  const int64_t width = weights_.lm_head.rows;  // this rank's vocabulary rows
  std::vector<float> local(rows * width);       // [rows, width]
  ref::Linear(normed, rows, weights_.lm_head.data.data(), width, d, local.data());
  return GatherLogitRows(plan_, vocab, tp_comm_.get(), local, rows, logits.data());
}

Status ReferenceModel::Head(const ReferencePass& pass, ReferenceActivations& act, EntryOutput& output) const {
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
  GLINT_RETURN_IF_ERROR(LmHead(&normed[first_row * d], rows, output.logits));
  if (pass.entry.want_hidden) output.hidden = std::move(normed);
  return Status::Ok();
}

// The trunk, as the model card draws it (docs/model-glm53.md §2–§4): embed into hc streams; per layer an attention
// site and an FFN site, each "mHC read → RMSNorm → sublayer → mHC write"; then the head.
Status ReferenceModel::ForwardOne(const BatchEntry& entry, int sequence, EntryOutput& output,
                                  const ForwardOptions& options, Trace* trace, const ForcedChoices* forced) const {
  const ModelConfig& c = config_;
  const bool tracing = trace != nullptr && trace->Wants(sequence);
  const ReferencePass pass{entry,
                           sequence,
                           options,
                           tracing ? trace : nullptr,
                           forced,
                           static_cast<int64_t>(entry.tokens.size()),
                           EntryStateCopies(entry)};
  ReferenceActivations act(pass.tokens, c.hc_mult, c.hidden_size);
  Embed(pass, act);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& layer = weights_.layers[l];
    const std::string prefix = "layer." + std::to_string(l) + ".";

    MhcSiteRead(layer.hc_attn, layer.input_layernorm, c, pass.tokens, act);  // attention site: KDA | DSA
    GLINT_RETURN_IF_ERROR(Attention(pass, l, prefix, act));
    entry.layer_done(l);  // layer l's caches hold their final rows for this call
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
  return Head(pass, act, output);
}

Status ReferenceModel::MtpForwardChecked(SequenceState& state, std::span<const float> hidden,
                                         std::span<const int32_t> next_tokens, std::vector<float>& logits,
                                         const ForwardOptions& options, Trace* trace,
                                         const MtpReplacedEmbeddings& replaced, std::vector<float>* normed_out) const {
  const ModelConfig& c = config_;
  const int64_t pairs = static_cast<int64_t>(next_tokens.size());
  const int64_t d = c.hidden_size;
  const MtpWeights& m = *weights_.mtp;
  const bool tracing = trace != nullptr && trace->Wants(0);
  // z = eh_proj · [RMSNorm(embed(x_{t+1}); enorm) ; RMSNorm(h_t; hnorm)] — the embedding half first; at an image
  // placeholder the embedding is the image row the trunk took there.
  std::vector<float> concat(2 * d), z(pairs * d), normed(pairs * d), sublayer(pairs * d);  // z, normed: [T, D]
  for (int64_t t = 0; t < pairs; ++t) {
    const float* image = ReplacedEmbedding(replaced, t, d);
    const float* embedding = image != nullptr ? image : weights_.embed_tokens.Row(next_tokens[t]);
    ref::RmsNorm(embedding, m.enorm.data(), d, c.rms_norm_eps, concat.data());
    ref::RmsNorm(&hidden[t * d], m.hnorm.data(), d, c.rms_norm_eps, concat.data() + d);
    ref::Linear(concat.data(), 1, m.eh_proj.data.data(), d, 2 * d, &z[t * d]);
  }
  if (tracing) trace->Floats(0, "mtp.eh_out", z, {pairs, d});
  // r = z + DSA(RMSNorm(z)) — plain residuals, no mHC (pitfall 12).
  for (int64_t t = 0; t < pairs; ++t)
    ref::RmsNorm(&z[t * d], m.input_layernorm.data(), d, c.rms_norm_eps, &normed[t * d]);
  DsaTrace dsa_trace;
  GLINT_RETURN_IF_ERROR(DsaForward(m.dsa, local_, normed.data(), pairs, state.mtp_dsa, options.dsa, sublayer.data(),
                                   tracing ? &dsa_trace : nullptr));
  GLINT_RETURN_IF_ERROR(SumOverTensorGroup(plan_.mla_split, sublayer, "MTP MLA"));
  if (tracing) {
    trace->Floats(0, "mtp.attn_out", sublayer, {pairs, d});
    TraceSelection(*trace, 0, "mtp.", dsa_trace, c.DenseRegimeTokens());
  }
  for (int64_t i = 0; i < pairs * d; ++i) z[i] += sublayer[i];
  // r = r + MoE(RMSNorm(r))
  std::vector<RouterChoice> choices;
  for (int64_t t = 0; t < pairs; ++t) {
    ref::RmsNorm(&z[t * d], m.post_attention_layernorm.data(), d, c.rms_norm_eps, &normed[t * d]);
    choices.push_back(MoeForward(m.moe, local_, &normed[t * d], &sublayer[t * d], nullptr, plan_.local_experts()));
  }
  GLINT_RETURN_IF_ERROR(SumMoeOverRanks(sublayer));
  if (tracing) {
    trace->Floats(0, "mtp.ffn_out", sublayer, {pairs, d});
    TraceRouting(*trace, 0, "mtp.", choices, c.num_experts_per_tok);
  }
  for (int64_t i = 0; i < pairs * d; ++i) z[i] += sublayer[i];
  // logits = lm_head · RMSNorm(r; shared_head.norm), sharing the trunk's lm_head.
  for (int64_t t = 0; t < pairs; ++t)
    ref::RmsNorm(&z[t * d], m.shared_head_norm.data(), d, c.rms_norm_eps, &normed[t * d]);
  state.mtp_tokens += pairs;
  logits.clear();
  if (options.mtp_logits) GLINT_RETURN_IF_ERROR(LmHead(normed.data(), pairs, logits));
  if (normed_out != nullptr) *normed_out = std::move(normed);
  return Status::Ok();
}

}  // namespace glint
