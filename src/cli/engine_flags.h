// The engine's flags, shared by every command that starts an engine (bench-engine, and the server): the cache
// memory budget and limits of docs/engine.md "Capacity".
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "engine/capacity.h"

namespace glint::cli {

struct EngineFlags {
  std::string memory = "1G";
  int64_t max_seqs = 16;
  int64_t max_model_len = 0;
  bool max_seqs_up_to_memory = false;  // EngineOptions::max_seqs_up_to_memory (glint batch's default)
  int64_t max_batch_tokens = 512;
  int64_t batch_prefill_beside_online = 64;
  int64_t block_size = 64;
  std::string kda_state = "fp32";
  std::string kv_cache_dtype = "fp32";
  bool no_prefix_caching = false;
  int64_t checkpoint_interval = 256;
  double checkpoint_fraction = 0.2;
  std::string checkpoint_memory;  // --prefix-checkpoint-memory; empty: checkpoint_fraction
  std::string checkpoint_policy = "tail";
  std::string prefix_cache_disk;         // --prefix-cache-disk DIR; empty: no disk tier
  std::string prefix_cache_disk_size;    // --prefix-cache-disk-size SIZE (required with the directory)
  double prefix_cache_disk_timeout = 2;  // --prefix-cache-disk-timeout SECONDS: longest wait for one read or write
  std::string speculative = "none";
  int64_t speculative_tokens = 1;  // --speculative-tokens K
};

void AddEngineFlags(CLI::App& command, EngineFlags& flags);
Result<EngineOptions> ToEngineOptions(const EngineFlags& flags);
// With --prefix-cache-disk: the model directory's fingerprint into options.prefix_disk (the disk tier's files are
// only read back by an engine of the same weights). Nothing without it.
Status SetPrefixDiskModel(const std::string& model_dir, EngineOptions& options);

}  // namespace glint::cli
