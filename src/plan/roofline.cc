#include "plan/roofline.h"

#include <algorithm>
#include <cmath>

namespace glint::plan {
namespace {

double ExpertSlotsPerChip(const ModelConfig& config, int chips) {
  return std::ceil(static_cast<double>(config.n_routed_experts) / chips);
}

// Bytes of one expert id across every trunk MoE layer (all routed experts have the same shape).
double TrunkExpertSlotBytes(const RooflineInputs& in) {
  return in.footprint->routed_trunk_bytes / static_cast<double>(in.config->n_routed_experts);
}

// Per-token work that is not a weight matmul, at context `visible` (decode) — computed in bf16.
double DecodeCoreFlops(const ModelConfig& config, double visible) {
  const double dsa = config.NumLayersOf(AttentionKind::kDsa);
  const double kda = config.NumLayersOf(AttentionKind::kKda);
  return dsa * (DecodeAttentionFlops(config, visible) + IndexerScoreFlops(config, VisiblePools(config, visible))) +
         kda * KdaRecurrenceFlops(config);
}

// Seconds to run `flops` (whole topology) of matmuls per stored dtype + `core_flops` in bf16, at mfu.
struct ComputeTime {
  double seconds = 0;
  bool known = true;
  std::string dtypes;
};

ComputeTime MatmulTime(const RooflineInputs& in, double tokens, double core_flops_per_token) {
  ComputeTime result;
  const double mfu = in.assumptions->Get("mfu");
  const double bf16 = in.chip->peak.at(ComputeDType::kBf16).value;
  if (!(bf16 > 0)) {
    result.known = false;
    result.dtypes = "no peak given";
    return result;
  }
  for (const auto& [stored, flops] : in.footprint->matmul_flops_per_token) {
    const auto [used, peak] = in.chip->EffectivePeak(stored);
    result.seconds += tokens * flops / (in.chips * peak * mfu);
    if (stored != ComputeDType::kBf16) {
      const std::string text = used == stored ? std::string(ComputeDTypeName(stored))
                                              : StrCat(ComputeDTypeName(stored), "→", ComputeDTypeName(used));
      result.dtypes += (result.dtypes.empty() ? "" : " + ") + text;
    }
  }
  result.dtypes += (result.dtypes.empty() ? "" : " + ") + std::string("bf16");
  result.seconds += tokens * core_flops_per_token / (in.chips * bf16 * mfu);
  return result;
}

}  // namespace

double SelectedTokens(const ModelConfig& config, double visible) {
  return std::min(visible, static_cast<double>(config.DenseRegimeTokens()));
}

double VisiblePools(const ModelConfig& config, double visible) {
  return std::floor(visible / static_cast<double>(config.index_kpool));
}

double DecodeAttentionFlops(const ModelConfig& config, double visible) {
  return 2.0 * 2.0 * static_cast<double>(config.num_attention_heads) * static_cast<double>(config.kv_lora_rank) *
         SelectedTokens(config, visible);
}

double PrefillAttentionFlopsPerToken(const ModelConfig& config, int64_t prompt) {
  // Mean over positions p of min(p + 1, W), W = index_topk + index_kpool − 1.
  const double w = static_cast<double>(config.DenseRegimeTokens());
  const double n = static_cast<double>(prompt);
  const double dense_part = std::min(n, w);
  const double mean_selected = (dense_part * (dense_part + 1) / 2 + std::max(0.0, n - w) * w) / n;
  return 2.0 * static_cast<double>(config.num_attention_heads) *
         static_cast<double>(config.qk_head_dim + config.v_head_dim) * mean_selected;
}

double IndexerScoreFlops(const ModelConfig& config, double pools) {
  const double heads = static_cast<double>(config.index_n_heads);
  return 2.0 * heads * static_cast<double>(config.index_head_dim) * pools + 2.0 * heads * pools;
}

double MeanVisiblePools(const ModelConfig& config, int64_t prompt) {
  // Σ_{m=1..L} floor(m / k) = k·q(q − 1)/2 + q·(r + 1), with L = q·k + r.
  const int64_t k = config.index_kpool;
  const double q = static_cast<double>(prompt / k);
  const double r = static_cast<double>(prompt % k);
  return (static_cast<double>(k) * q * (q - 1) / 2 + q * (r + 1)) / static_cast<double>(prompt);
}

double KdaRecurrenceFlops(const ModelConfig& config) {
  const double d = static_cast<double>(config.kda_head_dim);
  return 7.0 * static_cast<double>(config.kda_num_heads) * d * d;
}

double IndexerProjectionFlops(const ModelConfig& config) {
  const double d = static_cast<double>(config.hidden_size);
  const double params = static_cast<double>(config.index_n_heads * config.index_head_dim * config.q_lora_rank) +
                        static_cast<double>(config.index_head_dim) * d + static_cast<double>(config.index_n_heads) * d +
                        static_cast<double>(config.index_head_dim) * d;
  return 2.0 * params;
}

double ExpectedDistinctExperts(const ModelConfig& config, double batch) {
  const double e = static_cast<double>(config.n_routed_experts);
  const double k = static_cast<double>(config.num_experts_per_tok);
  return e * (1.0 - std::pow(1.0 - k / e, batch));
}

int BatchForExpertsHot(const ModelConfig& config, double fraction) {
  const double e = static_cast<double>(config.n_routed_experts);
  const double k = static_cast<double>(config.num_experts_per_tok);
  if (k >= e) return 1;
  return static_cast<int>(std::ceil(std::log(1.0 - fraction) / std::log(1.0 - k / e)));
}

int CollectivesPerDecodeStep(const ModelConfig& config, int chips) {
  if (chips <= 1) return 0;
  const int layers = static_cast<int>(config.num_hidden_layers);
  const int dense = config.NumLayersOf(MlpKind::kDense);
  const int moe = config.NumLayersOf(MlpKind::kMoe);
  return layers /* attention all-reduce */ + dense /* MLP all-reduce */ + 2 * moe /* dispatch + combine */ +
         2 /* embedding all-reduce, logits all-gather */;
}

DecodeEstimate EstimateDecode(const RooflineInputs& in, int batch, int64_t context) {
  const ModelConfig& config = *in.config;
  const int n = in.chips;
  DecodeEstimate estimate;
  estimate.batch = batch;
  const double b = batch;

  // Weights: the dense part split evenly; of the experts, the distinct ones the batch touches, spread over the
  // chips as evenly as expert placement allows (at best).
  const double distinct = ExpectedDistinctExperts(config, b);
  const double touched_per_chip = std::min(ExpertSlotsPerChip(config, n), std::ceil(distinct / n - 1e-9));
  estimate.weight_bytes_per_chip = in.footprint->decode_dense_bytes / n + touched_per_chip * TrunkExpertSlotBytes(in);

  // Caches of the trunk (the MTP layer is not run in a plain decode step): the selected latents and every pooled
  // key per DSA layer (replicated reads), the KDA state read and written and the conv windows (split by head).
  const StateModel& state = *in.state;
  const double visible = static_cast<double>(context);
  const double pool_key_bytes = state.index_key_per_token_layer * static_cast<double>(config.index_kpool);
  const double replicated = state.trunk_dsa_layers * (SelectedTokens(config, visible) * state.latent_per_token_layer +
                                                      VisiblePools(config, visible) * pool_key_bytes);
  const double head_shards = std::max(1, std::min(n, state.kda_heads));
  const double sharded = (2.0 * state.kda_state + 2.0 * state.conv_state) / head_shards;
  estimate.cache_bytes_per_chip = b * (replicated + sharded);

  const double bandwidth = in.chip->memory_bandwidth.value * in.assumptions->Get("bandwidth_efficiency");
  estimate.t_memory = (estimate.weight_bytes_per_chip + estimate.cache_bytes_per_chip) / bandwidth;

  double matmul_flops = 0;
  for (const auto& [dtype, flops] : in.footprint->matmul_flops_per_token) matmul_flops += flops;
  const double core = DecodeCoreFlops(config, visible);
  estimate.flops_per_chip = b * (matmul_flops + core) / n;
  const ComputeTime compute = MatmulTime(in, b, core);
  estimate.t_compute = compute.known ? compute.seconds : 0;

  // Collectives: a fixed latency each, plus the bytes leaving a chip at its outgoing share of the interconnect.
  estimate.collectives = CollectivesPerDecodeStep(config, n);
  if (estimate.collectives > 0) {
    const double a = in.assumptions->Get("activation_bytes");
    const double share = static_cast<double>(n - 1) / n;
    const double d = static_cast<double>(config.hidden_size);
    const double width = in.assumptions->Get("collective_width_multiple") * d;
    const double all_reduce = 2.0 * share * b * width * a;  // ring: reduce-scatter + all-gather
    const double all_to_all = share * b * static_cast<double>(config.num_experts_per_tok) * d * a;
    const double logits = share * b * static_cast<double>(config.vocab_size) * a;
    const int all_reduces = static_cast<int>(config.num_hidden_layers) + config.NumLayersOf(MlpKind::kDense) + 1;
    const int all_to_alls = 2 * config.NumLayersOf(MlpKind::kMoe);
    const double bytes = all_reduces * all_reduce + all_to_alls * all_to_all + logits;
    const double link = in.chip->interconnect_bandwidth.value * in.assumptions->Get("interconnect_direction_fraction");
    estimate.t_collective =
        estimate.collectives * in.assumptions->Get("collective_latency_us") * 1e-6 + (link > 0 ? bytes / link : 0);
  }
  estimate.step = std::max(estimate.t_memory, estimate.t_compute) + estimate.t_collective;
  estimate.tokens_per_s = b / estimate.step;
  if (estimate.t_collective > std::max(estimate.t_memory, estimate.t_compute)) {
    estimate.bound = "collectives";
  } else {
    estimate.bound = estimate.t_compute > estimate.t_memory ? "compute" : "memory";
  }
  return estimate;
}

PrefillEstimate EstimatePrefill(const RooflineInputs& in, int64_t prompt) {
  const ModelConfig& config = *in.config;
  PrefillEstimate estimate;
  const double dsa = config.NumLayersOf(AttentionKind::kDsa);
  const double kda = config.NumLayersOf(AttentionKind::kKda);
  const double core = dsa * (PrefillAttentionFlopsPerToken(config, prompt) +
                             IndexerScoreFlops(config, MeanVisiblePools(config, prompt))) +
                      kda * KdaRecurrenceFlops(config);
  double matmul = 0;
  for (const auto& [dtype, flops] : in.footprint->matmul_flops_per_token) matmul += flops;
  estimate.flops_per_token = matmul + core;
  const ComputeTime time = MatmulTime(in, 1.0, core);
  estimate.dtypes = time.dtypes;
  estimate.tokens_per_s = time.known ? 1.0 / time.seconds : 0;
  return estimate;
}

double WeightsPerChip(const SchemeFootprint& footprint, const ModelConfig& config, int chips) {
  const double e = static_cast<double>(config.n_routed_experts);
  return footprint.other_bytes / chips + ExpertSlotsPerChip(config, chips) * footprint.routed_bytes / e;
}

}  // namespace glint::plan
