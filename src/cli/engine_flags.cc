#include "cli/engine_flags.h"

#include "engine/prefix_disk.h"

namespace glint::cli {

void AddEngineFlags(CLI::App& command, EngineFlags& flags) {
  command
      .add_option("--memory", flags.memory,
                  "cache memory budget: blocks + state slots + checkpoints (e.g. 8G); under --dp-attention each "
                  "rank's")
      ->capture_default_str();
  command
      .add_option("--max-seqs", flags.max_seqs,
                  "most sequences in memory at once (state slots; under --dp-attention on each rank)")
      ->capture_default_str();
  command
      .add_option("--max-model-len", flags.max_model_len,
                  "prompt + generated tokens per sequence (0: what the cache holds, at most the model's limit)")
      ->capture_default_str();
  command.add_option("--max-batch-tokens", flags.max_batch_tokens, "tokens computed per step (the scheduler budget)")
      ->capture_default_str();
  command
      .add_option("--batch-prefill-beside-online", flags.batch_prefill_beside_online,
                  "batch-job prefill tokens per step while online requests run or wait (keeps their steps short; "
                  "0: none until they are done)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  command.add_option("--block-size", flags.block_size, "tokens per cache block (a multiple of index_kpool)")
      ->capture_default_str();
  command.add_option("--kda-state", flags.kda_state, "storage of the KDA recurrent state: fp32 or bf16")
      ->capture_default_str();
  command
      .add_option("--kv-cache-dtype", flags.kv_cache_dtype,
                  "storage of the MLA latents and the indexer's pooled keys: fp32 (as computed), bf16, fp8 "
                  "(e4m3) or int8, fp8 and int8 with an fp32 scale per row (docs/long-context.md)")
      ->capture_default_str();
  command.add_flag("--no-prefix-caching", flags.no_prefix_caching, "turn prefix caching off");
  command
      .add_option("--checkpoint-interval", flags.checkpoint_interval,
                  "tokens between KDA state checkpoints of the prefix cache (a multiple of --block-size)")
      ->capture_default_str();
  command
      .add_option("--checkpoint-fraction", flags.checkpoint_fraction,
                  "share of the memory left after the state slots that holds checkpoints")
      ->capture_default_str();
  command.add_option("--prefix-checkpoint-memory", flags.checkpoint_memory,
                     "memory for the prefix cache's KDA state checkpoints (e.g. 4G; default: --checkpoint-fraction "
                     "of the memory left after the state slots)");
  command
      .add_option("--prefix-checkpoint-policy", flags.checkpoint_policy,
                  "which checkpoints are evicted first: tail (the newest of each cached prefix dense, spaced "
                  "geometrically behind) or uniform (plain least recently used)")
      ->capture_default_str();
  command.add_option("--prefix-cache-disk", flags.prefix_cache_disk,
                     "a directory for the prefix cache's disk tier: full blocks and checkpoints evicted from memory "
                     "are written there and read back on a hit (needs --prefix-cache-disk-size)");
  command.add_option("--prefix-cache-disk-size", flags.prefix_cache_disk_size,
                     "size budget of --prefix-cache-disk (e.g. 64G); least recently used files are deleted past it");
  command
      .add_option("--prefix-cache-disk-timeout", flags.prefix_cache_disk_timeout,
                  "seconds the engine waits for one --prefix-cache-disk read or write (done on the tier's own "
                  "thread); past it the item is a miss, and the tier is bypassed until that operation returns")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command
      .add_option("--speculative", flags.speculative,
                  "speculative decoding: none, or mtp (the model's MTP layer drafts tokens, the model verifies "
                  "them in the same forward pass; outputs are unchanged)")
      ->capture_default_str();
  command
      .add_option("--speculative-tokens", flags.speculative_tokens,
                  "with --speculative mtp: tokens drafted per step, 1 .. 4 (the MTP layer applied to its own "
                  "output; each adds a row per sequence to the verification and a KDA state copy per slot)")
      ->capture_default_str();
}

Result<EngineOptions> ToEngineOptions(const EngineFlags& flags) {
  EngineOptions options;
  GLINT_ASSIGN_OR_RETURN(options.memory_bytes, ParseByteSize(flags.memory));
  options.max_seqs = flags.max_seqs;
  options.max_seqs_up_to_memory = flags.max_seqs_up_to_memory;
  options.max_model_len = flags.max_model_len;
  options.max_batch_tokens = flags.max_batch_tokens;
  options.batch_prefill_beside_online = flags.batch_prefill_beside_online;
  options.block_tokens = flags.block_size;
  if (flags.kda_state == "fp32") {
    options.kda_state = KdaStateStorage::kFloat32;
  } else if (flags.kda_state == "bf16") {
    options.kda_state = KdaStateStorage::kBfloat16;
  } else {
    return InvalidArgument("--kda-state is '", flags.kda_state, "'; expected fp32 or bf16");
  }
  Result<KvCacheDtype> kv_dtype = ParseKvCacheDtype(flags.kv_cache_dtype);
  if (!kv_dtype.ok())
    return InvalidArgument("--kv-cache-dtype is '", flags.kv_cache_dtype, "'; expected ", kKvCacheDtypeNames);
  options.kv_cache_dtype = kv_dtype.value();
  options.prefix_caching = !flags.no_prefix_caching;
  options.checkpoint_interval = flags.checkpoint_interval;
  options.checkpoint_fraction = flags.checkpoint_fraction;
  if (!flags.checkpoint_memory.empty()) {
    Result<int64_t> bytes = ParseByteSize(flags.checkpoint_memory);
    if (!bytes.ok()) return InvalidArgument("--prefix-checkpoint-memory: ", bytes.status().message());
    options.checkpoint_memory_bytes = *bytes;
  }
  {
    Result<CheckpointPolicy> policy = ParseCheckpointPolicy(flags.checkpoint_policy);
    if (!policy.ok()) return InvalidArgument("--prefix-checkpoint-policy: ", policy.status().message());
    options.checkpoint_policy = *policy;
  }
  if (flags.prefix_cache_disk.empty() != flags.prefix_cache_disk_size.empty()) {
    return InvalidArgument("--prefix-cache-disk and --prefix-cache-disk-size go together; got only ",
                           flags.prefix_cache_disk.empty() ? "--prefix-cache-disk-size" : "--prefix-cache-disk");
  }
  if (!flags.prefix_cache_disk.empty()) {
    Result<int64_t> bytes = ParseByteSize(flags.prefix_cache_disk_size);
    if (!bytes.ok()) return InvalidArgument("--prefix-cache-disk-size: ", bytes.status().message());
    options.prefix_disk.directory = flags.prefix_cache_disk;
    options.prefix_disk.size_bytes = *bytes;
    options.prefix_disk.io_timeout_seconds = flags.prefix_cache_disk_timeout;
  }
  if (flags.speculative == "none") {
    options.speculative = SpeculativeMethod::kNone;
  } else if (flags.speculative == "mtp") {
    options.speculative = SpeculativeMethod::kMtp;
  } else {
    return InvalidArgument("--speculative is '", flags.speculative, "'; expected none or mtp");
  }
  options.speculative_tokens = flags.speculative_tokens;  // checked with the other limits (PlanCapacity)
  return options;
}

Status SetPrefixDiskModel(const std::string& model_dir, EngineOptions& options) {
  if (options.prefix_disk.directory.empty()) return Status::Ok();
  GLINT_ASSIGN_OR_RETURN(options.prefix_disk.model_fingerprint, FingerprintModelDirectory(model_dir));
  return Status::Ok();
}

}  // namespace glint::cli
