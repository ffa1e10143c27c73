#include "plan/state.h"

#include <algorithm>
#include <cmath>

namespace glint::plan {

double LatentBytesPerTokenLayer(const ModelConfig& config, const Assumptions& assumptions, int value_bytes) {
  const double values = static_cast<double>(config.kv_lora_rank);
  if (value_bytes != 1) return values * value_bytes;
  // fp8 latent: one scale per cache_fp8_group_size values, as FP8 MLA caches store them.
  const double groups = std::ceil(values / assumptions.Get("cache_fp8_group_size"));
  return values + groups * assumptions.Get("cache_fp8_scale_bytes");
}

StateModel BuildStateModel(const ModelConfig& config, const Assumptions& assumptions) {
  StateModel state;
  state.trunk_dsa_layers = config.NumLayersOf(AttentionKind::kDsa);
  state.kda_layers = config.NumLayersOf(AttentionKind::kKda);
  const bool mtp_cache = config.HasMtp() && assumptions.Get("cache_mtp_layer") > 0;
  state.cache_layers = state.trunk_dsa_layers + (mtp_cache ? 1 : 0);
  state.kda_heads = static_cast<int>(config.kda_num_heads);

  const int latent_bytes = static_cast<int>(assumptions.Get("cache_latent_bytes"));
  state.latent_per_token_layer = LatentBytesPerTokenLayer(config, assumptions, latent_bytes);
  const double key_bytes = assumptions.Get("cache_index_key_bytes");
  state.index_key_per_token_layer =
      (static_cast<double>(config.index_head_dim) * key_bytes + assumptions.Get("cache_index_key_scale_bytes")) /
      static_cast<double>(config.index_kpool);

  const double head_dim = static_cast<double>(config.kda_head_dim);
  state.kda_state = state.kda_layers * static_cast<double>(config.kda_num_heads) * head_dim * head_dim *
                    assumptions.Get("kda_state_bytes");
  state.conv_state = state.kda_layers * 3.0 * static_cast<double>(config.KdaWidth()) *
                     static_cast<double>(config.kda_conv_kernel - 1) * assumptions.Get("conv_state_bytes");
  // Until a pool of index_kpool tokens completes, its raw key and gate rows are kept (§7.5).
  state.index_tail = state.cache_layers * static_cast<double>(config.index_kpool - 1) * 2.0 *
                     static_cast<double>(config.index_head_dim) * key_bytes;
  return state;
}

double StateModel::PerSequencePerChip(int64_t context, int chips) const {
  const double head_shards = static_cast<double>(std::max(1, std::min(chips, std::max(1, kda_heads))));
  return PerToken() * static_cast<double>(context) + index_tail + (kda_state + conv_state) / head_shards;
}

}  // namespace glint::plan
