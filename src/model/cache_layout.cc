#include "model/cache_layout.h"

#include <cstring>

#include "memory/item_arena.h"

namespace glint {
namespace {

// Appends a segment of `bytes` to a region of `size` bytes and returns its offset.
int64_t Place(int64_t& size, int64_t bytes) {
  const int64_t offset = size;
  size += AlignItemBytes(bytes);
  return offset;
}

}  // namespace

int64_t StandaloneBlockTokens(const ModelConfig& config) { return 4 * std::max<int64_t>(config.index_kpool, 1); }

Result<CacheLayout> MakeCacheLayout(const ModelConfig& c, const CacheOptions& options) {
  const int64_t b = options.block_tokens;
  if (c.index_kpool <= 0 || b <= 0 || b % c.index_kpool != 0) {
    return InvalidArgument("block size ", b, " tokens must be a positive multiple of index_kpool (", c.index_kpool,
                           ") so that indexer pools never straddle blocks");
  }
  if (options.kda_state != KdaStateStorage::kFloat32 && options.kda_state != KdaStateStorage::kBfloat16) {
    return InvalidArgument("unknown KDA state storage ", static_cast<int>(options.kda_state));
  }
  if (KvCacheDtypeName(options.kv_dtype) == "unknown") {
    return InvalidArgument("unknown KV cache dtype ", static_cast<int>(options.kv_dtype), "; expected ",
                           kKvCacheDtypeNames);
  }
  if (options.mtp && !c.HasMtp()) {
    return InvalidArgument(
        "speculative decoding with MTP needs a model with an MTP layer "
        "(num_nextn_predict_layers ≥ 1); this config has none");
  }
  if (static_cast<int64_t>(c.attention_kinds.size()) != c.num_hidden_layers) {
    return InvalidArgument("the config lists ", c.attention_kinds.size(), " attention kinds for ", c.num_hidden_layers,
                           " layers");
  }
  CacheLayout layout;
  layout.options = options;
  layout.kv_lora_rank = c.kv_lora_rank;
  layout.index_head_dim = c.index_head_dim;
  layout.index_kpool = c.index_kpool;
  layout.kda_heads = c.kda_num_heads;
  layout.kda_head_dim = c.kda_head_dim;
  layout.kda_conv_kernel = c.kda_conv_kernel;
  layout.layers.resize(c.num_hidden_layers);
  const int64_t e = c.index_head_dim;
  const int64_t s_bytes = options.kda_state == KdaStateStorage::kFloat32 ? 4 : 2;
  layout.kda_conv_bytes = 3 * c.KdaWidth() * (c.kda_conv_kernel - 1) * 4;
  layout.kda_recurrent_bytes = c.kda_num_heads * c.kda_head_dim * c.kda_head_dim * s_bytes;
  // KDA state first: it is what a checkpoint keeps.
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    CacheLayout::Layer& layer = layout.layers[l];
    layer.kind = c.attention_kinds[l];
    if (layer.kind != AttentionKind::kKda) continue;
    layer.conv = Place(layout.slot_bytes, layout.kda_conv_bytes);
    layer.recurrent = Place(layout.slot_bytes, layout.kda_recurrent_bytes);
  }
  layout.checkpoint_bytes = layout.slot_bytes;
  const KvSegment latents = KvSegment::Make(options.kv_dtype, b, c.kv_lora_rank);
  const KvSegment pooled = KvSegment::Make(options.kv_dtype, b / c.index_kpool, e);
  layout.dsa_latents_bytes = latents.Bytes();
  layout.dsa_pooled_bytes = pooled.Bytes();
  layout.dsa_pending_bytes = 2 * (c.index_kpool - 1) * e * 4;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    CacheLayout::Layer& layer = layout.layers[l];
    if (layer.kind != AttentionKind::kDsa) continue;
    layer.latents = Place(layout.block_bytes, latents.Bytes());
    layer.pooled = Place(layout.block_bytes, pooled.Bytes());
    layer.pending = Place(layout.slot_bytes, layout.dsa_pending_bytes);
  }
  if (options.mtp) {  // the MTP layer is one more DSA layer with its own cache (model-glm53.md §10)
    layout.mtp_latents = Place(layout.block_bytes, latents.Bytes());
    layout.mtp_pooled = Place(layout.block_bytes, pooled.Bytes());
    layout.mtp_pending = Place(layout.slot_bytes, 2 * (c.index_kpool - 1) * e * 4);
  }
  // Pools need items of at least one alignment unit even for a model without one of the layer kinds.
  if (layout.block_bytes == 0) layout.block_bytes = kItemAlignment;
  if (layout.slot_bytes == 0) layout.slot_bytes = kItemAlignment;
  return layout;
}

std::vector<CacheRegion> LayerRegions(const CacheLayout& layout, int64_t layer) {
  const CacheLayout::Layer& l = layout.layers.at(layer);
  if (l.kind == AttentionKind::kKda) {
    return {{true, l.conv, layout.kda_conv_bytes}, {true, l.recurrent, layout.kda_recurrent_bytes}};
  }
  return {{true, l.pending, layout.dsa_pending_bytes},
          {false, l.latents, layout.dsa_latents_bytes},
          {false, l.pooled, layout.dsa_pooled_bytes}};
}

std::vector<CacheRegion> MtpRegions(const CacheLayout& layout) {
  if (!layout.has_mtp()) return {};
  return {{true, layout.mtp_pending, layout.dsa_pending_bytes},
          {false, layout.mtp_latents, layout.dsa_latents_bytes},
          {false, layout.mtp_pooled, layout.dsa_pooled_bytes}};
}

std::vector<SlotRun> KdaHeadRuns(const CacheLayout& layout, int64_t layer, int64_t first, int64_t count) {
  const CacheLayout::Layer& l = layout.layers.at(layer);
  if (l.kind != AttentionKind::kKda) return {};
  const int64_t head_channels = layout.kda_conv_bytes / (3 * layout.kda_heads);  // one head's d channels of a stream
  const int64_t head_state = layout.kda_recurrent_bytes / layout.kda_heads;
  std::vector<SlotRun> runs;
  for (int64_t stream = 0; stream < 3; ++stream) {  // q, k, v
    runs.push_back({l.conv + (stream * layout.kda_heads + first) * head_channels, count * head_channels});
  }
  runs.push_back({l.recurrent + first * head_state, count * head_state});
  return runs;
}

int64_t KdaHeadBytes(const CacheLayout& layout) {
  return (layout.kda_conv_bytes + layout.kda_recurrent_bytes) / layout.kda_heads;
}

void CopyWholeSlotToPart(const CacheLayout& whole, std::span<const std::byte> whole_slot, const CacheLayout& part,
                         int64_t first, std::byte* part_slot) {
  for (int64_t l = 0; l < static_cast<int64_t>(whole.layers.size()); ++l) {
    if (whole.layers[l].kind == AttentionKind::kDsa) {
      std::memcpy(part_slot + part.layers[l].pending, whole_slot.data() + whole.layers[l].pending,
                  whole.dsa_pending_bytes);
      continue;
    }
    const std::vector<SlotRun> from = KdaHeadRuns(whole, l, first, part.kda_heads);
    const std::vector<SlotRun> to = KdaHeadRuns(part, l, 0, part.kda_heads);
    for (size_t i = 0; i < from.size(); ++i) {
      std::memcpy(part_slot + to[i].offset, whole_slot.data() + from[i].offset, from[i].bytes);
    }
  }
  if (whole.has_mtp() && part.has_mtp()) {
    std::memcpy(part_slot + part.mtp_pending, whole_slot.data() + whole.mtp_pending, whole.dsa_pending_bytes);
  }
}

int64_t LayerStateBytes(const CacheLayout& layout, int64_t layer, int64_t blocks) {
  return RegionStateBytes(LayerRegions(layout, layer), blocks);
}

Status CacheLayout::CheckMatches(const ModelConfig& c) const {
  if (kv_lora_rank != c.kv_lora_rank || index_head_dim != c.index_head_dim || index_kpool != c.index_kpool ||
      kda_heads != c.kda_num_heads || kda_head_dim != c.kda_head_dim || kda_conv_kernel != c.kda_conv_kernel ||
      static_cast<int64_t>(layers.size()) != c.num_hidden_layers) {
    return FailedPrecondition("the cache layout was made for another model (kv_lora ", kv_lora_rank, ", index e ",
                              index_head_dim, ", kpool ", index_kpool, ", KDA ", kda_heads, "×", kda_head_dim, ", ",
                              layers.size(), " layers); make it with MakeCacheLayout(config)");
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (layers[l].kind != c.attention_kinds[l]) {
      return FailedPrecondition("the cache layout's layer ", l, " kind differs from the config's");
    }
  }
  return Status::Ok();
}

}  // namespace glint
