#include "engine/capacity.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "base/table.h"
#include "memory/item_arena.h"

namespace glint {

Result<int64_t> ParseByteSize(std::string_view text) {
  const std::string original(text);
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) {
    ++digits;
  }
  const std::string number(text.substr(0, digits));
  std::string unit(text.substr(digits));
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(number, &used);
    if (used != number.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    return InvalidArgument("'", original, "' is not a size; expected a number with an optional K, M, G or T suffix");
  }
  double scale = 1;
  if (unit == "" || unit == "B") {
    scale = 1;
  } else if (unit == "K" || unit == "KB" || unit == "KIB") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "MB" || unit == "MIB") {
    scale = 1024.0 * 1024;
  } else if (unit == "G" || unit == "GB" || unit == "GIB") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "T" || unit == "TB" || unit == "TIB") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return InvalidArgument("'", original, "' has an unknown unit '", unit, "'; expected K, M, G or T");
  }
  const double bytes = value * scale;
  if (!(bytes >= 1) || bytes > 9.0e18) return InvalidArgument("size '", original, "' is out of range");
  return static_cast<int64_t>(bytes);
}

namespace {

Status CheckCapacityOptions(const CacheLayout& layout, const EngineOptions& o) {
  if (o.memory_bytes <= 0) return InvalidArgument("--memory must be positive, got ", o.memory_bytes, " bytes");
  if (o.max_seqs < 1 || o.max_seqs > kMaxItemsPerPool) {
    return InvalidArgument("--max-seqs must be in 1 .. 2^31 − 1 (slot ids are int32), got ", o.max_seqs);
  }
  if (o.max_batch_tokens < 1)
    return InvalidArgument("the batch token budget must be at least 1, got ", o.max_batch_tokens);
  if (o.speculative_tokens < 1 || o.speculative_tokens > kMaxSpeculativeTokens) {
    return InvalidArgument("--speculative-tokens must be in 1 .. ", kMaxSpeculativeTokens, ", got ",
                           o.speculative_tokens);
  }
  if (o.speculative_tokens > 1 && o.speculative == SpeculativeMethod::kNone) {
    return InvalidArgument("--speculative-tokens ", o.speculative_tokens,
                           " drafts tokens with the MTP layer: it needs --speculative mtp");
  }
  if (o.max_model_len < 0) return InvalidArgument("--max-model-len must be ≥ 0 (0 = automatic), got ", o.max_model_len);
  if (!(o.checkpoint_fraction >= 0 && o.checkpoint_fraction < 1)) {
    return InvalidArgument("the checkpoint memory fraction must be in [0, 1), got ", o.checkpoint_fraction);
  }
  if (!(o.admission_watermark >= 0 && o.admission_watermark < 1)) {
    return InvalidArgument("the admission watermark must be in [0, 1), got ", o.admission_watermark);
  }
  if (o.prefix_caching && (o.checkpoint_interval <= 0 || o.checkpoint_interval % layout.block_tokens() != 0)) {
    return InvalidArgument("the checkpoint interval (", o.checkpoint_interval,
                           " tokens) must be a positive multiple of the block size (", layout.block_tokens(), ")");
  }
  return Status::Ok();
}

// How many sequences fit at once at a few context lengths up to max_model_len: each needs a slot and the blocks
// of its length.
std::vector<std::pair<int64_t, int64_t>> ConcurrencyByLength(const CapacityReport& r) {
  std::vector<int64_t> lengths;
  for (int64_t length : {int64_t{1024}, int64_t{8192}, int64_t{32768}, int64_t{131072}}) {
    if (length < r.max_model_len) lengths.push_back(length);
  }
  lengths.push_back(r.max_model_len);
  std::vector<std::pair<int64_t, int64_t>> concurrency;
  for (int64_t length : lengths) {
    const int64_t blocks = (length + r.block_tokens - 1) / r.block_tokens;
    concurrency.emplace_back(length, std::min(r.num_slots, r.num_blocks / blocks));
  }
  return concurrency;
}

}  // namespace

namespace {

// The layout's figures and the options the report repeats.
CapacityReport DescribeLayout(const CacheLayout& layout, const EngineOptions& o, int64_t weight_bytes) {
  CapacityReport r;
  r.block_tokens = layout.block_tokens();
  r.block_bytes = layout.block_bytes;
  r.slot_bytes = layout.slot_bytes;
  r.checkpoint_bytes = layout.checkpoint_bytes;
  r.bytes_per_token = layout.BytesPerToken();
  r.kv_cache_dtype = layout.options.kv_dtype;
  r.memory_bytes = o.memory_bytes;
  r.weight_bytes = weight_bytes;
  r.prefix_caching = o.prefix_caching;
  r.checkpoint_interval = o.prefix_caching ? o.checkpoint_interval : 0;
  r.checkpoint_policy = o.checkpoint_policy;
  if (o.prefix_caching) {
    r.disk_directory = o.prefix_disk.directory;
    r.disk_bytes = o.prefix_disk.size_bytes;
  }
  return r;
}

// One state slot per sequence, each with its speculative-decoding rollback copies. Returns the memory left.
Result<int64_t> PlanSlots(const CacheLayout& layout, const EngineOptions& o, CapacityReport& r) {
  r.speculative = o.speculative != SpeculativeMethod::kNone;
  // A rollback snapshot is a copy of the slot's KDA part (aligned, at least one alignment unit), one per drafted
  // token: a verification of K drafts can be cut after any of them.
  r.rollback_copies = r.speculative ? o.speculative_tokens : 0;
  r.rollback_copy_bytes = r.speculative ? AlignItemBytes(std::max<int64_t>(layout.checkpoint_bytes, 1)) : 0;
  r.rollback_bytes = r.rollback_copies * r.rollback_copy_bytes;
  const int64_t per_sequence = layout.slot_bytes + r.rollback_bytes;
  // Half, so that as many sequences' contexts (blocks) and the prefix cache's checkpoints fit beside their states.
  r.num_slots =
      o.max_seqs_up_to_memory ? std::clamp<int64_t>(o.memory_bytes / 2 / per_sequence, 1, o.max_seqs) : o.max_seqs;
  if (r.num_slots > o.memory_bytes / per_sequence) {
    return ResourceExhausted("--memory ", FormatBinaryBytes(o.memory_bytes), " holds at most ",
                             o.memory_bytes / per_sequence, " sequence states of ", FormatBinaryBytes(per_sequence),
                             " each", r.speculative ? " (with the speculative-decoding rollback copy)" : "",
                             ", but --max-seqs is ", o.max_seqs, "; lower --max-seqs or raise --memory");
  }
  r.slots_total_bytes = r.num_slots * layout.slot_bytes;
  r.rollback_total_bytes = r.num_slots * r.rollback_bytes;
  return o.memory_bytes - r.slots_total_bytes - r.rollback_total_bytes;
}

// The prefix cache's KDA state checkpoints out of `rest` (the memory after the slots). Returns what is left.
Result<int64_t> PlanCheckpoints(const CacheLayout& layout, const EngineOptions& o, int64_t rest, CapacityReport& r) {
  if (!o.prefix_caching || layout.checkpoint_bytes <= 0) return rest;
  r.checkpoint_budget_given = o.checkpoint_memory_bytes > 0;
  if (r.checkpoint_budget_given && o.checkpoint_memory_bytes >= rest) {
    return ResourceExhausted("--prefix-checkpoint-memory ", FormatBinaryBytes(o.checkpoint_memory_bytes),
                             " leaves nothing for cache blocks: the memory left after the slots is ",
                             FormatBinaryBytes(rest), "; lower it or raise --memory");
  }
  const int64_t budget =
      r.checkpoint_budget_given ? o.checkpoint_memory_bytes : static_cast<int64_t>(rest * o.checkpoint_fraction);
  r.num_checkpoints = std::min(budget / layout.checkpoint_bytes, kMaxItemsPerPool);
  if (r.num_checkpoints < 1) {
    return ResourceExhausted(
        "prefix caching needs room for at least one KDA state checkpoint of ",
        FormatBinaryBytes(layout.checkpoint_bytes), " but the checkpoint budget is ", FormatBinaryBytes(budget),
        r.checkpoint_budget_given ? " (--prefix-checkpoint-memory)"
                                  : StrCat(" (", o.checkpoint_fraction, " of the memory left after the slots)"),
        "; raise --memory or --prefix-checkpoint-memory, or turn prefix caching off");
  }
  r.checkpoints_total_bytes = r.num_checkpoints * layout.checkpoint_bytes;
  return rest - r.checkpoints_total_bytes;
}

// The cache blocks out of `rest`, and the context length they allow.
Status PlanBlocks(const ModelConfig& config, const CacheLayout& layout, const EngineOptions& o, int64_t rest,
                  CapacityReport& r) {
  // Block ids are int32: memory past 2^31 − 1 blocks stays unused (it would take blocks of ≥ 64 B and 128 GiB).
  r.num_blocks = std::min(rest / layout.block_bytes, kMaxItemsPerPool);
  if (r.num_blocks < 1) {
    return ResourceExhausted("--memory ", FormatBinaryBytes(o.memory_bytes), " leaves ", FormatBinaryBytes(rest),
                             " for cache blocks after the sequence states, less than one block of ",
                             FormatBinaryBytes(layout.block_bytes), "; raise --memory or lower --max-seqs");
  }
  r.blocks_total_bytes = r.num_blocks * layout.block_bytes;
  r.unused_bytes = rest - r.blocks_total_bytes;
  r.cache_tokens = r.num_blocks * r.block_tokens;
  if (o.max_model_len > r.cache_tokens) {
    return ResourceExhausted("--max-model-len ", o.max_model_len, " can never fit: the cache holds ", r.cache_tokens,
                             " tokens (", r.num_blocks, " blocks of ", r.block_tokens,
                             "); raise --memory or lower --max-model-len");
  }
  if (o.max_model_len > config.max_position_embeddings) {
    return InvalidArgument("--max-model-len ", o.max_model_len, " exceeds the model's max_position_embeddings ",
                           config.max_position_embeddings);
  }
  r.max_model_len = o.max_model_len > 0 ? o.max_model_len : std::min(r.cache_tokens, config.max_position_embeddings);
  return Status::Ok();
}

}  // namespace

// --memory is spent in this order: the sequences' state slots (and rollback copies), the prefix cache's
// checkpoints, then cache blocks; each step refuses what cannot fit, naming the flag to change.
Result<CapacityReport> PlanCapacity(const ModelConfig& config, const CacheLayout& layout, const EngineOptions& o,
                                    int64_t weight_bytes) {
  GLINT_RETURN_IF_ERROR(CheckCapacityOptions(layout, o));
  CapacityReport r = DescribeLayout(layout, o, weight_bytes);
  GLINT_ASSIGN_OR_RETURN(const int64_t after_slots, PlanSlots(layout, o, r));
  GLINT_ASSIGN_OR_RETURN(const int64_t after_checkpoints, PlanCheckpoints(layout, o, after_slots, r));
  GLINT_RETURN_IF_ERROR(PlanBlocks(config, layout, o, after_checkpoints, r));
  r.concurrency = ConcurrencyByLength(r);
  return r;
}

std::string CapacityReport::CheckpointSpacingLine() const {
  if (checkpoint_policy == CheckpointPolicy::kUniform) {
    return "uniform (every checkpoint kept, least recently used evicted first)";
  }
  // What one chain of the longest context keeps under the tail policy, and how many such chains the pool holds.
  const int64_t newest = std::max<int64_t>(max_model_len / std::max<int64_t>(checkpoint_interval, 1), 1);
  const int64_t kept = TailPolicyKeptCount(newest, kDefaultDenseCheckpoints);
  return StrCat("tail (", kDefaultDenseCheckpoints, " newest at full density, geometric behind): a ", max_model_len,
                "-token chain keeps ", kept, " = ", FormatBinaryBytes(kept * checkpoint_bytes), "; the pool holds ",
                num_checkpoints / kept, " such chains");
}

std::string CapacityReport::ToString() const {
  std::ostringstream out;
  out << "cache memory " << FormatBinaryBytes(memory_bytes) << ":\n";
  out << "  per token   " << FormatBinaryBytes(bytes_per_token) << " (MLA latents + indexer keys of every DSA layer, "
      << KvCacheDtypeName(kv_cache_dtype) << (KvCacheDtypeHasScale(kv_cache_dtype) ? " + an fp32 scale per row" : "")
      << ")\n";
  out << "  per sequence " << FormatBinaryBytes(slot_bytes) << " of state (KDA S + conv windows, indexer tails)\n";
  out << "  blocks      " << num_blocks << " × " << block_tokens << " tokens × " << FormatBinaryBytes(block_bytes)
      << " = " << FormatBinaryBytes(blocks_total_bytes) << " → " << cache_tokens << " tokens of cache\n";
  out << "  slots       " << num_slots << " × " << FormatBinaryBytes(slot_bytes) << " = "
      << FormatBinaryBytes(slots_total_bytes) << "\n";
  if (speculative) {
    out << "  rollback    " << num_slots << " × " << FormatBinaryBytes(rollback_bytes) << " = "
        << FormatBinaryBytes(rollback_total_bytes)
        << " (KDA state kept while drafted tokens are verified: " << rollback_copies
        << (rollback_copies == 1 ? " copy" : " copies") << " per slot)\n";
  }
  if (prefix_caching) {
    out << "  checkpoints " << num_checkpoints << " × " << FormatBinaryBytes(checkpoint_bytes) << " = "
        << FormatBinaryBytes(checkpoints_total_bytes) << ", one every " << checkpoint_interval << " tokens ("
        << num_checkpoints * checkpoint_interval << " tokens of prefix reach)"
        << (checkpoint_budget_given ? ", --prefix-checkpoint-memory" : "") << "\n";
    if (num_checkpoints > 0) out << "  spacing     " << CheckpointSpacingLine() << "\n";
  } else {
    out << "  checkpoints none (prefix caching off)\n";
  }
  out << "  unused      " << FormatBinaryBytes(unused_bytes) << "\n";
  if (!disk_directory.empty()) {
    out << "prefix cache disk " << disk_directory << ", " << FormatBinaryBytes(disk_bytes)
        << " (blocks and checkpoints evicted from memory; not part of the cache budget)\n";
  }
  if (weight_bytes > 0) out << "weights " << FormatBinaryBytes(weight_bytes) << " (not part of the cache budget)\n";
  if (!shard.empty() && attention_ranks > 0) {
    out << "shard " << shard << "; each of the " << attention_ranks
        << " ranks holds cache pools of the sizes above for its own sequences (--memory is per rank): "
        << FormatBinaryBytes(memory_bytes - unused_bytes) << " of cache per rank, "
        << FormatBinaryBytes((memory_bytes - unused_bytes) * attention_ranks) << " in all\n";
  } else if (!shard.empty()) {
    out << "shard " << shard << "; every rank holds these cache pools (attention is replicated at --tp 1)\n";
  }
  const auto sequences_at = [&](int64_t times) {
    for (const auto& [length, sequences] : concurrency) out << "  " << sequences * times << " at " << length;
  };
  out << "max model length " << max_model_len << " tokens; concurrent sequences"
      << (attention_ranks > 0 ? " per rank:" : ":");
  sequences_at(1);
  if (attention_ranks > 0) {
    out << "; on all " << attention_ranks << " ranks:";
    sequences_at(attention_ranks);
  }
  out << "\n";
  return out.str();
}

}  // namespace glint
