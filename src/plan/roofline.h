// Roofline estimates for one topology: decode step time (weights and caches read from HBM/DRAM, matmuls at the
// peak of the dtype used × mfu, collectives at a fixed latency each plus their bytes over the interconnect),
// prefill tokens/s at mfu, and the attention / indexer FLOPs behind them.
//
// Parallel layout assumed (printed in the report): non-expert weights split evenly over the chips (tensor
// parallel), routed experts expert-parallel with ceil(E / chips) experts of every MoE layer per chip; the MLA
// latent and pooled indexer keys replicated on every chip (all heads share them), the KDA state split by head.
// Collectives are not overlapped with compute.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "io/config.h"
#include "plan/assumptions.h"
#include "plan/hardware.h"
#include "plan/state.h"
#include "plan/weights.h"

namespace glint::plan {

// Attention and indexer work per token, per DSA layer, for a query at context `visible` tokens.
double SelectedTokens(const ModelConfig& config, double visible);  // min(visible, index_topk + index_kpool − 1)
double VisiblePools(const ModelConfig& config, double visible);    // floor(visible / index_kpool)
// Absorbed MLA decode: scores and weighted sum over the kv_lora_rank-wide latent of the selected tokens,
// 2 × 2 × heads × kv_lora_rank × selected. (The absorption matmuls are kv_b_proj's, counted with the weights.)
double DecodeAttentionFlops(const ModelConfig& config, double visible);
// Prefill (naive MLA over expanded K/V): 2 × heads × (qk_head_dim + v_head_dim) × selected, averaged over the
// positions 0..prompt−1.
double PrefillAttentionFlopsPerToken(const ModelConfig& config, int64_t prompt);
// Indexer scoring: 2 × index_n_heads × index_head_dim per pool (dot products) + 2 × index_n_heads per pool (ReLU,
// head weighting and sum). Its projections (wq_b, wk, weights_proj, compress gate) are counted with the weights.
double IndexerScoreFlops(const ModelConfig& config, double pools);
double MeanVisiblePools(const ModelConfig& config, int64_t prompt);  // mean of floor((p+1)/kpool), p < prompt
// KDA recurrence per token per layer: decay (d²), Sᵀk (2d²), rank-1 update (2d²), Sᵀq (2d²) per head = 7·H·d².
double KdaRecurrenceFlops(const ModelConfig& config);
// The indexer's own matmuls per token per DSA layer: 2 × (wq_b + wk + weights_proj + compress gate parameters).
double IndexerProjectionFlops(const ModelConfig& config);

// Expected number of distinct experts a batch of `batch` tokens routes to, each choosing k of E uniformly:
// E × (1 − (1 − k/E)^batch).
double ExpectedDistinctExperts(const ModelConfig& config, double batch);

struct DecodeEstimate {
  int batch = 0;
  double weight_bytes_per_chip = 0;
  double cache_bytes_per_chip = 0;
  double flops_per_chip = 0;
  double t_memory = 0;
  double t_compute = 0;  // 0 when the chip has no peak (CPU without --cpu-bf16-tflops)
  double t_collective = 0;
  int collectives = 0;
  double step = 0;          // max(t_memory, t_compute) + t_collective
  double tokens_per_s = 0;  // batch / step, whole topology
  std::string bound;        // "memory", "compute" or "collectives": the largest term
};

struct PrefillEstimate {
  double flops_per_token = 0;
  double tokens_per_s = 0;  // whole topology; 0 when no peak is known
  std::string dtypes;       // "int8 (native) + bf16", "int8 → bf16 (no faster int8)"
};

struct RooflineInputs {
  const ModelConfig* config;
  const SchemeFootprint* footprint;
  const StateModel* state;
  const Assumptions* assumptions;
  const Chip* chip;
  int chips;
};

DecodeEstimate EstimateDecode(const RooflineInputs& in, int batch, int64_t context);
PrefillEstimate EstimatePrefill(const RooflineInputs& in, int64_t prompt);
// Weights resident on one chip: non-expert weights / chips + ceil(E / chips) experts of every MoE layer (trunk and
// MTP). Vision and MTP weights are resident even when a step does not run them.
double WeightsPerChip(const SchemeFootprint& footprint, const ModelConfig& config, int chips);
// Smallest batch at which 99% of the experts are touched per step.
int BatchForExpertsHot(const ModelConfig& config, double fraction = 0.99);
// Collectives per decode step of the trunk: one all-reduce after each attention sublayer and each dense MLP, a
// dispatch and a combine all-to-all per MoE layer, the embedding all-reduce and the logits all-gather.
int CollectivesPerDecodeStep(const ModelConfig& config, int chips);

}  // namespace glint::plan
