// The --model flag shared by every command that loads a model: a checkpoint directory, or the embedded tiny
// default model (generated once into the cache directory) when none is given.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "base/status.h"
#include "base/worker_pool.h"
#include "cli/distributed.h"
#include "fast/fast_model.h"
#include "model/model.h"

namespace glint::cli {

struct ModelFlag {
  std::string dir;  // empty: the embedded default model
};

void AddModelFlag(CLI::App& command, ModelFlag& flag);
// The directory to load: flag.dir, or the default model's cache directory (generated on first use).
Result<std::string> ResolveModelDir(const ModelFlag& flag);
// Loads the fp32 reference model (FP8 weights dequantized in memory) and logs what and how long it took.
// `parallel`: this rank's shard under mpirun (--tp / --ep); none loads every weight.
Result<std::unique_ptr<ReferenceModel>> LoadReferenceModel(const ModelFlag& flag, const ModelParallel& parallel = {});
// --experts int8|int4 (routed experts' weight format, docs/fast-path.md "int4 experts") into `experts`; empty when
// not given (a container loads as stored, a checkpoint converts to int8).
void AddExpertsFlag(CLI::App& command, std::string& experts);
// --mla-attention fp32|bf16 (the DSA layers' attention kernel, docs/fast-path.md "MLA attention in bf16") into
// `precision`; empty when not given (fp32).
void AddMlaAttentionFlag(CLI::App& command, std::string& precision);
// --keep-small-pages: FastModelOptions::reread_small_pages off.
void AddKeepSmallPagesFlag(CLI::App& command, bool& keep);
// The routed-expert cache's flags (docs/expert-cache.md): --expert-memory SIZE (routed experts read from the
// container into a RAM cache of SIZE), --expert-io pread|uring, --expert-policy, --expert-trace FILE.
struct ExpertCacheFlags {
  std::string memory;               // empty: every expert resident
  std::string io = "pread";         // how misses are read
  std::string policy = "weighted";  // eviction: lru, lfu, weighted
  std::string trace;                // empty: no routing trace
  std::string prefetch = "off";     // --expert-prefetch: off or next-layer
  std::string profile;              // --expert-profile: a trace whose hottest experts are kept in the cache
  bool given() const { return !memory.empty() || !trace.empty(); }
};
void AddExpertMemoryFlag(CLI::App& command, ExpertCacheFlags& flags);
// --expert-memory in bytes: 0 when empty (every expert resident); a bad size is an error naming the flag.
Result<uint64_t> ParseExpertMemory(const std::string& expert_memory);
// Sets the expert cache's fields of `options` from the flags (errors name the flag).
Status ApplyExpertCacheFlags(const ExpertCacheFlags& flags, FastModelOptions& options);
// Loads the fast int8/bf16 model (a `glint convert` container, or a checkpoint converted in memory) on `pool`.
// `experts`: the --experts value (empty: as stored / int8); `expert_memory`: the --expert-memory value (empty:
// every expert resident); with it, the expert cache's capacity report is logged.
// `mla_attention`: the --mla-attention value (empty: fp32).
Result<std::unique_ptr<Model>> LoadFastModel(const ModelFlag& flag, WorkerPool& pool, const std::string& experts = "",
                                             const ExpertCacheFlags& expert_cache = {},
                                             const ModelParallel& parallel = {}, const std::string& mla_attention = "",
                                             bool keep_small_pages = false);
// The capacity report of a model with an expert cache (start-up): resident bytes, cache slots, a short O_DIRECT read
// probe and the expected disk bytes and tokens/s per token at a hit rate of 0. Nothing without a cache.
Status LogExpertCacheReport(const Model& model, WorkerPool& pool);

// How much of a loaded container sits on 2 MB pages, for the load line: "; 7.7 of 7.7 GB resident on 2 MB pages"
// (with a hint when under half are: pages cached earlier as 4 KB pages stay so); "" for a checkpoint.
std::string DescribeHugePages(const FastLoadReport& load);

// Which forward pass a serving command runs: the int8/bf16 fast path (docs/fast-path.md; the default) or the fp32
// reference (the oracle: exact to the golden outputs, slow, fp32 weights in memory).
struct ForwardPathFlags {
  std::string path = "fast";      // "fast" | "reference" (checked by the flag)
  int threads = 0;                // fast path worker threads; 0: all cores
  std::string experts;            // fast path: --experts int8|int4, empty when not given (AddExpertsFlag)
  ExpertCacheFlags expert_cache;  // fast path: --expert-memory SIZE, --expert-io, --expert-trace
  std::string mla_attention;      // fast path: --mla-attention fp32|bf16, empty when not given (AddMlaAttentionFlag)
  ParallelFlags parallel;         // --tp / --ep (under mpirun)
  bool keep_small_pages = false;  // fast path: --keep-small-pages (FastModelOptions::reread_small_pages off)
};
void AddForwardPathFlags(CLI::App& command, ForwardPathFlags& flags);

// A loaded model with the worker pool it runs on (declared first, so it outlives the model).
struct LoadedModel {
  std::unique_ptr<WorkerPool> pool;  // null on the reference path
  std::unique_ptr<Model> model;
  std::string description;  // e.g. "int8/bf16 fast path, avx512-vnni, 2 threads" or "fp32 reference"
};
// Under mpirun every rank loads its shard and the ranks join (JoinRanks): rank 0 gets the model wrapped in a
// LockstepLeader, the other ranks follow its plans and then get the error FollowerFinished() marks.
Result<LoadedModel> LoadModel(const ModelFlag& flag, const ForwardPathFlags& path);

}  // namespace glint::cli
