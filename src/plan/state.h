// Per-sequence state of GLM-5.3-Flash (model-glm53.md §5.3, §6, §7.5, §16): what grows with context (MLA latent,
// pooled indexer keys) and what is fixed per sequence (KDA recurrent state, short-conv windows, the indexer's
// filling pool), in the storage the assumptions choose.
#pragma once

#include <cstdint>

#include "io/config.h"
#include "plan/assumptions.h"

namespace glint::plan {

struct StateModel {
  int cache_layers = 0;  // DSA layers holding caches: the trunk's, + MTP when cache_mtp_layer
  int trunk_dsa_layers = 0;
  int kda_layers = 0;

  // Per token, per DSA layer (bytes). The pooled key is one index_head_dim vector per index_kpool tokens.
  double latent_per_token_layer = 0;     // kv_lora_rank × cache_latent_bytes (+ fp8 scales)
  double index_key_per_token_layer = 0;  // (index_head_dim × cache_index_key_bytes + key scale) / index_kpool

  // Per sequence, fixed (bytes).
  double kda_state = 0;   // kda_layers × heads × head_dim × head_dim × kda_state_bytes
  double conv_state = 0;  // kda_layers × 3 (q,k,v) × heads·head_dim × (kernel − 1) × conv_state_bytes
  double index_tail = 0;  // cache_layers × (index_kpool − 1) raw (key, gate) pairs of index_head_dim

  int kda_heads = 0;

  double PerToken() const { return (latent_per_token_layer + index_key_per_token_layer) * cache_layers; }
  double Fixed() const { return kda_state + conv_state + index_tail; }
  double PerSequence(int64_t context) const { return PerToken() * static_cast<double>(context) + Fixed(); }
  // On one of `chips` tensor-parallel chips: the latent and pooled keys are shared by all heads, so every chip
  // holds them whole; the KDA state and conv windows split by head (at most one head per chip).
  double PerSequencePerChip(int64_t context, int chips) const;
};

StateModel BuildStateModel(const ModelConfig& config, const Assumptions& assumptions);

// Bytes of one MLA latent vector per token per layer at `value_bytes` per value (1 = fp8 with group scales).
double LatentBytesPerTokenLayer(const ModelConfig& config, const Assumptions& assumptions, int value_bytes);

}  // namespace glint::plan
