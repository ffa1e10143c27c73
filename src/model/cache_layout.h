// How one sequence's caches are laid out in memory (docs/engine.md "Memory"). The engine sizes its pools with it;
// the model's cache views address bytes with it.
//
//   block (B = block_tokens positions, a multiple of index_kpool), for each DSA layer in layer order:
//     latents      [B, kv_lora]            kv_dtype   MLA latent c_j after kv_a_layernorm
//     pooled keys  [B / kpool, e]          kv_dtype   the indexer's pk_m of the pools that lie in the block
//     with CacheOptions::mtp, then the MTP layer's own DSA cache, where position p holds the pair (h_p, x_{p+1}):
//     MTP latents  [B, kv_lora]            kv_dtype
//     MTP pooled   [B / kpool, e]          kv_dtype
//   (kv_dtype fp32 by default; fp8 and int8 segments end with their rows' fp32 scales: quant/kv_rows.h KvSegment)
//   slot (one per live sequence):
//     for each KDA layer: conv window [3, width, K−1] fp32, recurrent S [H, d, d] fp32 or bf16
//     for each DSA layer: pending rows [2, kpool − 1, e] fp32 (ik then ig of the filling pool)
//     with CacheOptions::mtp: the MTP layer's pending rows [2, kpool − 1, e] fp32
//   checkpoint = the slot's KDA part, which comes first. At a block boundary the filling pools are empty, so a
//   checkpoint taken there plus the blocks before it is the whole sequence state. (The MTP rows of a block's last
//   position depend on the token after the block: docs/engine.md "Speculative decoding" says how the prefix cache
//   keys them.)
// Every segment starts on a 64-byte boundary (kItemAlignment).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "io/config.h"
#include "model/kda.h"
#include "quant/kv_rows.h"

namespace glint {

struct CacheOptions {
  int64_t block_tokens = 64;
  KdaStateStorage kda_state = KdaStateStorage::kFloat32;
  bool mtp = false;  // also lay out the MTP layer's cache (speculative decoding); needs a config with an MTP layer
  KvCacheDtype kv_dtype = KvCacheDtype::kFloat32;  // latents and pooled keys (--kv-cache-dtype)
};

struct CacheLayout {
  CacheOptions options;
  int64_t block_bytes = 0;       // one block, every DSA layer
  int64_t slot_bytes = 0;        // one sequence's state
  int64_t checkpoint_bytes = 0;  // the leading KDA part of a slot

  struct Layer {
    AttentionKind kind = AttentionKind::kKda;
    int64_t latents = -1;    // DSA: byte offset in a block
    int64_t pooled = -1;     // DSA: byte offset in a block
    int64_t pending = -1;    // DSA: byte offset in the slot
    int64_t conv = -1;       // KDA: byte offset in the slot
    int64_t recurrent = -1;  // KDA: byte offset in the slot
  };
  std::vector<Layer> layers;  // [num_hidden_layers]
  // options.mtp: the MTP layer's DSA cache (latents and pooled keys: byte offsets in a block; pending rows: in the
  // slot). −1 without.
  int64_t mtp_latents = -1, mtp_pooled = -1, mtp_pending = -1;

  int64_t kda_conv_bytes = 0;       // one KDA layer's conv window
  int64_t kda_recurrent_bytes = 0;  // one KDA layer's S as stored
  int64_t dsa_latents_bytes = 0;    // one DSA layer's latents in a block (with their scales)
  int64_t dsa_pooled_bytes = 0;     // one DSA layer's pooled keys in a block (with their scales)
  int64_t dsa_pending_bytes = 0;    // one DSA layer's filling-pool rows in the slot

  // The config sizes the layout was made for (checked before every use).
  int64_t kv_lora_rank = 0, index_head_dim = 0, index_kpool = 0;
  int64_t kda_heads = 0, kda_head_dim = 0, kda_conv_kernel = 0;

  int64_t block_tokens() const { return options.block_tokens; }
  bool has_mtp() const { return options.mtp; }
  // Cache bytes one position adds (all DSA layers and the MTP layer; pooled keys amortised over their pool).
  double BytesPerToken() const { return static_cast<double>(block_bytes) / options.block_tokens; }
  Status CheckMatches(const ModelConfig& config) const;
};

// Where layer l's state lies: byte ranges of the slot and of every block (prefill/decode disaggregation sends a
// layer's state as soon as the prompt's last chunk has passed it, docs/disaggregation.md).
struct CacheRegion {
  bool in_slot = true;  // false: at `offset` inside each block
  int64_t offset = 0, bytes = 0;
};
// KDA: the conv window and S in the slot; DSA: the filling-pool rows in the slot, then the latents and the pooled
// keys in each block. The MTP layer's cache is no layer's (MtpRegions).
std::vector<CacheRegion> LayerRegions(const CacheLayout& layout, int64_t layer);
// The MTP layer's cache, laid out as a DSA layer's: its filling-pool rows in the slot, then its latents and pooled
// keys in each block. Empty for a layout without it (CacheOptions::mtp false).
std::vector<CacheRegion> MtpRegions(const CacheLayout& layout);
// Bytes of `regions` for a sequence whose positions lie in `blocks` blocks: the slot ranges + blocks × the block
// ranges. (Inline: the transfer plane's frame parsers use it without the rest of the layout code.)
inline int64_t RegionStateBytes(std::span<const CacheRegion> regions, int64_t blocks) {
  int64_t bytes = 0;
  for (const CacheRegion& region : regions) bytes += region.bytes * (region.in_slot ? 1 : blocks);
  return bytes;
}
// RegionStateBytes of layer l's regions.
int64_t LayerStateBytes(const CacheLayout& layout, int64_t layer, int64_t blocks);

// Tensor parallelism (docs/distributed.md) splits the KDA heads over the ranks of a group: a rank's slot, laid out
// for its LocalConfig, holds heads [first, first + count) of each KDA layer — their conv channels of q, k and v and
// their S — beside the DSA layers' filling-pool rows, which every rank holds whole. A run of bytes of one layer in a
// slot of `layout`: heads [first, first + count) of that layout's own heads (`layout.kda_heads` of them, numbered
// from 0: the whole model's, or a rank's own with first = 0), in the order q, k, v conv channels ([3, width, K − 1],
// channel = head · d + i), then S ([H, d, d]). Empty for a DSA layer.
struct SlotRun {
  int64_t offset = 0, bytes = 0;
};
std::vector<SlotRun> KdaHeadRuns(const CacheLayout& layout, int64_t layer, int64_t first, int64_t count);
// Bytes of one KDA head in one layer's slot state (its conv channels and its S).
int64_t KdaHeadBytes(const CacheLayout& layout);
// Copies `whole_slot`, a slot of the whole model's layout `whole`, into `part_slot`, a slot of `part` that holds KDA
// heads [first, first + part.kda_heads): those heads' runs of every KDA layer, and every DSA layer's filling-pool rows
// whole, and the MTP layer's too when both layouts have it (every rank holds them whole, as a DSA layer's).
void CopyWholeSlotToPart(const CacheLayout& whole, std::span<const std::byte> whole_slot, const CacheLayout& part,
                         int64_t first, std::byte* part_slot);

// The layout for `config`. Fails when block_tokens is not a positive multiple of index_kpool, or when the MTP
// cache is asked for and the config has no MTP layer.
Result<CacheLayout> MakeCacheLayout(const ModelConfig& config, const CacheOptions& options = {});

// The block size standalone sequences use (NewSequence, NewDsaCache): small, so tests cross block boundaries.
int64_t StandaloneBlockTokens(const ModelConfig& config);

}  // namespace glint
