// Engine options and the start-up capacity report: how the cache memory budget splits into state slots, state
// checkpoints and blocks, and what that means in tokens and concurrent sequences (docs/engine.md "Capacity").
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "io/config.h"
#include "memory/checkpoint_policy.h"
#include "model/cache_layout.h"
#include "model/model.h"

namespace glint {

// Speculative decoding (docs/engine.md "Speculative decoding"): the most tokens the MTP layer drafts per step
// (--speculative-tokens; one trained layer chained, whose drafts grow worse with depth).
inline constexpr int64_t kMaxSpeculativeTokens = 4;
enum class SpeculativeMethod {
  kNone,
  kMtp,  // the model's MTP layer drafts 1 .. 4 tokens per step; the trunk verifies them in the same forward pass
};

// The prefix cache's disk tier (docs/engine.md "Disk tier"; memory/disk_tier.h). Off when `directory` is empty.
struct PrefixDiskOptions {
  std::string directory;           // --prefix-cache-disk
  int64_t size_bytes = 0;          // --prefix-cache-disk-size
  uint64_t model_fingerprint = 0;  // identifies the weights (FingerprintModelDirectory); required with a directory
  bool start_empty = false;        // delete the files a previous run left (benchmarks)
  double io_timeout_seconds = 2;   // --prefix-cache-disk-timeout: longest wait for one read or write
  std::function<void()> before_io = {};  // tests: runs on the disk tier's I/O thread before each operation
};

struct EngineOptions {
  int64_t memory_bytes = int64_t{1} << 30;  // --memory: the cache budget (blocks + slots + checkpoints), not weights
  int64_t max_seqs = 16;                    // --max-seqs: state slots = the most sequences in memory at once
  // glint batch without --max-seqs: max_seqs is a ceiling, lowered to what half of memory_bytes holds (PlanSlots).
  bool max_seqs_up_to_memory = false;
  int64_t max_model_len = 0;       // --max-model-len: prompt + generated; 0 = as much as the cache holds
                                   // (at most max_position_embeddings)
  int64_t max_batch_tokens = 512;  // tokens computed per step (the scheduler's budget)
  // --batch-prefill-beside-online: batch prefill tokens per step beside online sequences (SchedulerOptions)
  int64_t batch_prefill_beside_online = 64;
  int64_t block_tokens = 64;  // positions per cache block (a multiple of index_kpool)
  KdaStateStorage kda_state = KdaStateStorage::kFloat32;
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kFloat32;  // --kv-cache-dtype: MLA latents + pooled indexer keys
  bool prefix_caching = true;
  int64_t checkpoint_interval = 256;    // tokens between KDA state checkpoints (a multiple of block_tokens)
  double checkpoint_fraction = 0.2;     // of the memory left after the slots, for checkpoints (prefix caching)
  int64_t checkpoint_memory_bytes = 0;  // --prefix-checkpoint-memory: the checkpoints' budget; 0 = the fraction
  CheckpointPolicy checkpoint_policy = CheckpointPolicy::kTail;  // --prefix-checkpoint-policy
  double admission_watermark = 0.01;  // fraction of blocks admission leaves free for running sequences
  SpeculativeMethod speculative = SpeculativeMethod::kNone;  // --speculative
  // --speculative-tokens K (1 .. kMaxSpeculativeTokens): tokens the MTP layer drafts per step, chained (docs/engine.md
  // "Speculative decoding"); each needs a rollback copy of the KDA state per slot.
  int64_t speculative_tokens = 1;
  PrefixDiskOptions prefix_disk;
  std::optional<std::vector<int32_t>> end_token_ids;  // finish a sample on these; default: the config's eos ids
  ForwardOptions forward;                             // passed to Model::Forward
};

struct CapacityReport {
  int64_t block_tokens = 0, block_bytes = 0, slot_bytes = 0, checkpoint_bytes = 0;
  // Per slot: the KDA state kept while drafts are verified (speculative decoding), one copy of rollback_copy_bytes
  // per drafted token.
  int64_t rollback_bytes = 0, rollback_copy_bytes = 0, rollback_copies = 0;
  double bytes_per_token = 0;                            // per-token caches (DSA latents + pooled keys), all layers
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kFloat32;  // how they are stored
  int64_t num_blocks = 0, num_slots = 0, num_checkpoints = 0;
  int64_t cache_tokens = 0;  // positions the blocks hold, all sequences together
  int64_t checkpoint_interval = 0;
  CheckpointPolicy checkpoint_policy = CheckpointPolicy::kTail;
  bool checkpoint_budget_given = false;  // --prefix-checkpoint-memory rather than the fraction
  bool prefix_caching = false;
  int64_t memory_bytes = 0;  // the budget
  int64_t blocks_total_bytes = 0, slots_total_bytes = 0, checkpoints_total_bytes = 0, unused_bytes = 0;
  int64_t rollback_total_bytes = 0;
  bool speculative = false;
  int64_t weight_bytes = 0;  // 0 when the model does not say; this rank's under mpirun
  std::string shard;         // several ranks: how the weights are split (DescribeShard); empty for one
  // --dp-attention (docs/distributed.md "Attention data-parallel"): the number of ranks, each holding pools of the
  // sizes above for the sequences assigned to it alone (--memory is each rank's budget); 0: one set of pools,
  // replicated on every rank.
  int64_t attention_ranks = 0;
  int64_t max_model_len = 0;
  std::string disk_directory;  // the prefix cache's disk tier; empty: none
  int64_t disk_bytes = 0;
  std::vector<std::pair<int64_t, int64_t>> concurrency;  // (context length, most sequences of it at once)

  std::string ToString() const;  // the start-up report, a few lines
  std::string CheckpointSpacingLine() const;
};

// Splits options.memory_bytes: max_seqs slots first (each with a rollback snapshot of its KDA state when
// speculative decoding is on), then the checkpoints' budget (checkpoint_memory_bytes, or checkpoint_fraction of
// the rest; prefix caching of a model with recurrent state), then blocks. Fails with what to change when the budget
// cannot hold the slots, one block, a checkpoint, or max_model_len tokens.
Result<CapacityReport> PlanCapacity(const ModelConfig& config, const CacheLayout& layout, const EngineOptions& options,
                                    int64_t weight_bytes);

// "512", "64K", "1.5G", "2GiB", "100MB" → bytes (K, M, G, T are powers of 1024 with or without "iB"/"B").
Result<int64_t> ParseByteSize(std::string_view text);

}  // namespace glint
