#include "cli/model_flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "base/file.h"
#include "base/log.h"
#include "base/timer.h"
#include "fast/fast_model.h"
#include "io/extent_reader.h"
#include "kernels/machine_limits.h"
#include "modelgen/make_tiny.h"
#include "plan/expert_cache.h"

namespace glint::cli {
namespace {

// The load lines' words for the MLA attention kernel: "fp32 MLA attention", "bf16 MLA attention", "bf16 MLA attention
// on AMX tiles".
std::string MlaAttentionWords(mla::AttentionPrecision precision) {
  return precision == mla::AttentionPrecision::kBf16Amx
             ? "bf16 MLA attention on AMX tiles"
             : StrCat(mla::AttentionPrecisionName(precision), " MLA attention");
}

}  // namespace

void AddModelFlag(CLI::App& command, ModelFlag& flag) {
  command.add_option("--model", flag.dir,
                     "checkpoint directory (config.json + safetensors); default: $GLINT_DEFAULT_MODEL, else the "
                     "trained tiny model glint-tiny shipped in the source tree (models/glint-tiny)");
}

Result<std::string> ResolveModelDir(const ModelFlag& flag) {
  if (!flag.dir.empty()) return flag.dir;
  if (const char* chosen = std::getenv("GLINT_DEFAULT_MODEL"); chosen != nullptr && *chosen != '\0') {
    return std::string(chosen);
  }
  // The trained tiny model (docs/training.md) ships with the sources; its path is fixed at build time.
  const std::string shipped = std::string(GLINT_SOURCE_DIR) + "/models/glint-tiny";
  if (IsDirectory(shipped)) return shipped;
  // A binary moved away from its source tree: say so, and use the generated random tiny model instead.
  LogWarning("the trained default model is not at ", shipped, "; using the random tiny model (its text is noise). ",
             "Pass --model DIR or set GLINT_DEFAULT_MODEL.");
  return EnsureDefaultModel();
}

Result<std::unique_ptr<ReferenceModel>> LoadReferenceModel(const ModelFlag& flag, const ModelParallel& parallel) {
  GLINT_ASSIGN_OR_RETURN(std::string dir, ResolveModelDir(flag));
  Stopwatch watch;
  auto model = ReferenceModel::Load(dir, {}, parallel);
  if (!model.ok()) return model.status();
  const ModelConfig& c = (*model)->config();
  LogInfo("loaded ", dir, " (", c.num_hidden_layers, " layers, hidden ", c.hidden_size, ", vocab ", c.vocab_size,
          ") as fp32 in ", watch.Seconds(), " s");
  return model;
}

void AddExpertsFlag(CLI::App& command, std::string& experts) {
  command
      .add_option("--experts", experts,
                  "fast path: routed experts' weights, int8 (W8A8) or int4 (W4A8, half the bytes); a checkpoint is "
                  "converted to it, a glint convert container must hold it (default: as stored, int8 when "
                  "converting)")
      ->check(CLI::IsMember({"int8", "int4"}));
}

void AddMlaAttentionFlag(CLI::App& command, std::string& precision) {
  command
      .add_option("--mla-attention", precision,
                  "fast path: the DSA layers' attention over the selected latents in fp32, or bf16 — q, latents and "
                  "probabilities rounded to bf16, sums in fp32: the attention ≈ 1.8× faster; needs AVX512-BF16 "
                  "(docs/fast-path.md \"MLA attention in bf16\"; default: fp32)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
}

void AddKeepSmallPagesFlag(CLI::App& command, bool& keep) {
  command.add_flag("--keep-small-pages", keep,
                   "fast path: map a container's pages as the page cache holds them; by default a load that finds "
                   "under 90% of them on 2 MB pages (the file was cached in 4 KB pages: copied or read moments ago) "
                   "reads them again from disk as 2 MB pages, once (a cold read of the model; on the bench model "
                   "prefill 1.05x, batched decode 1.03x after it: docs/performance.md \"Reading the container again "
                   "for 2 MB pages\")");
}

void AddExpertMemoryFlag(CLI::App& command, ExpertCacheFlags& flags) {
  command.add_option(
      "--expert-memory", flags.memory,
      "fast path: keep routed experts in the glint convert container on disk and read them (O_DIRECT) "
      "into a RAM cache of this size, e.g. 512M, 24G (binary units); everything else stays resident. "
      "At least one layer's top-k experts; under mpirun a budget per rank for its own experts. Default: every "
      "expert resident (docs/expert-cache.md)");
  command
      .add_option("--expert-io", flags.io,
                  "with --expert-memory: how missing experts are read: pread (a pool of threads) or uring (io_uring, "
                  "one thread); `glint bench-expert-io` measures both")
      ->check(CLI::IsMember({"pread", "uring"}))
      ->capture_default_str();
  command
      .add_option("--expert-policy", flags.policy,
                  "with --expert-memory: which cached expert to evict: weighted (fewest rows routed to it, decayed "
                  "with a half-life of 4 steps), lru (least recently used) or lfu (fewest uses, aged); chosen by "
                  "replaying routing traces (docs/expert-cache.md \"Policy\")")
      ->check(CLI::IsMember({"weighted", "lru", "lfu"}))
      ->capture_default_str();
  command
      .add_option("--expert-prefetch", flags.prefetch,
                  "with --expert-memory: off, or next-layer: after each MoE layer, its input through the next MoE "
                  "layer's router names experts to start reading early (a guess; never changes the output)")
      ->check(CLI::IsMember({"off", "next-layer"}))
      ->capture_default_str();
  command
      .add_option("--expert-profile", flags.profile,
                  "with --expert-memory: a trace written by --expert-trace (e.g. of a serving run); its most used "
                  "experts are read at start-up and kept in the cache for good (at most half of it)")
      ->check(CLI::ExistingFile);
  command.add_option("--expert-trace", flags.trace,
                     "fast path: append the routed experts of every MoE layer pass to FILE (one line per row: step, "
                     "layer, row, experts) for `glint replay-expert-trace`");
}

Status ApplyExpertCacheFlags(const ExpertCacheFlags& flags, FastModelOptions& options) {
  GLINT_ASSIGN_OR_RETURN(options.expert_memory, ParseExpertMemory(flags.memory));
  GLINT_ASSIGN_OR_RETURN(options.expert_io, ParseExpertIo(flags.io));
  GLINT_ASSIGN_OR_RETURN(options.expert_policy, ParseExpertPolicy(flags.policy));
  options.expert_trace = flags.trace;
  options.expert_profile = flags.profile;
  options.expert_prefetch = flags.prefetch == "next-layer";
  if (options.expert_prefetch && flags.memory.empty()) {
    return InvalidArgument(
        "--expert-prefetch reads experts into the cache of --expert-memory; give --expert-memory too");
  }
  if (flags.prefetch != "off" && flags.prefetch != "next-layer") {
    return InvalidArgument("--expert-prefetch '", flags.prefetch, "' is not one of off, next-layer");
  }
  if (!flags.profile.empty() && flags.memory.empty()) {
    return InvalidArgument("--expert-profile keeps experts in the cache of --expert-memory; give --expert-memory too");
  }
  return Status::Ok();
}

Result<uint64_t> ParseExpertMemory(const std::string& expert_memory) {
  if (expert_memory.empty()) return uint64_t{0};
  GLINT_ASSIGN_OR_RETURN(const uint64_t bytes, ParseByteSize(expert_memory, "--expert-memory"));
  if (bytes == 0)
    return InvalidArgument("--expert-memory must be more than 0 (leave it out to keep every expert resident)");
  return bytes;
}

Result<std::unique_ptr<Model>> LoadFastModel(const ModelFlag& flag, WorkerPool& pool, const std::string& experts,
                                             const ExpertCacheFlags& expert_cache, const ModelParallel& parallel,
                                             const std::string& mla_attention, bool keep_small_pages) {
  GLINT_ASSIGN_OR_RETURN(std::string dir, ResolveModelDir(flag));
  FastModelOptions options;
  options.parallel = parallel;
  if (!mla_attention.empty()) {
    GLINT_ASSIGN_OR_RETURN(options.mla_attention, mla::ParseAttentionPrecision(mla_attention));
  }
  if (!experts.empty()) {
    GLINT_ASSIGN_OR_RETURN(options.experts, ParseExpertWeights(experts));
  }
  GLINT_RETURN_IF_ERROR(ApplyExpertCacheFlags(expert_cache, options));
  options.reread_small_pages = !keep_small_pages;
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<FastModel> model, FastModel::Load(dir, pool, options));
  const FastLoadReport& load = model->load_report();
  LogInfo("loaded ", dir, " as int8/bf16 (", load.from_container ? "container" : "converted at load", ", ",
          ExpertWeightsName(model->weights().experts), " routed experts, ", load.weight_bytes / 1e9, " GB, ",
          IsaName(model->isa()), " kernels, ", MlaAttentionWords(model->mla_attention()), ", ", pool.size(),
          " threads) in ", load.seconds, " s",
          load.verified_bytes > 0
              ? StrCat("; checksums of ", load.verified_bytes / 1e9, " GB checked in ", load.verify_seconds, " s")
              : std::string(),
          DescribeHugePages(load));
  GLINT_RETURN_IF_ERROR(LogExpertCacheReport(*model, pool));
  return std::unique_ptr<Model>(std::move(model));
}

Status LogExpertCacheReport(const Model& model, WorkerPool& pool) {
  const auto* fast = dynamic_cast<const FastModel*>(&model);
  const DiskExpertCache* cache = fast != nullptr ? fast->expert_cache() : nullptr;
  if (cache == nullptr) return Status::Ok();
  const FastLoadReport& load = fast->load_report();
  const ModelConfig& c = model.config();
  const int64_t main_moe_layers = cache->moe_layers() - (fast->has_mtp() ? 1 : 0);
  if (cache->slot_bytes() == 0) {  // more ranks (or groups) than experts: nothing to cache, probe or read
    LogInfo("expert cache: this rank holds no routed expert (", model.shard_plan().ranks, " ranks for ",
            c.n_routed_experts, " experts): no slots and no reads; it runs the rest of each layer and adds zeros");
    return Status::Ok();
  }
  GLINT_ASSIGN_OR_RETURN(const double disk_gbps, cache->ProbeReadGbps(uint64_t{256} << 20));
  // The memory probe's array stays inside --expert-memory: at most half the slots' bytes (the slots are not touched
  // yet; --expert-profile filled at most the other half), so the start-up peak RSS is within the reported budget.
  const int64_t memory_probe_bytes = std::min<int64_t>(int64_t{64} << 20, load.expert_cache_bytes / 2);
  const double memory_gbps = MeasureReadGbps(pool, pool.size(), memory_probe_bytes, 2);
  // Per token (decode, one sequence): every MoE layer's top-k experts from disk at hit rate 0, and roughly every
  // resident byte from memory (an upper bound: the embedding is read one row at a time).
  const double miss_bytes = static_cast<double>(main_moe_layers) * c.num_experts_per_tok * cache->slot_bytes();
  const double resident = static_cast<double>(load.resident_bytes);
  const double roofline = 1.0 / (miss_bytes / (disk_gbps * 1e9) + resident / (memory_gbps * 1e9));
  LogInfo("expert cache: ", load.resident_bytes / 1e9, " GB resident + ", load.expert_cache_bytes / 1e9, " GB for ",
          cache->slots(), " experts of ", cache->slot_bytes() / 1e6, " MB + ", load.expert_read_buffer_bytes / 1024.0,
          " KiB read buffers (", ExpertIoName(cache->io()),
          "; reads land in the slots) = ", (load.expert_cache_bytes + load.expert_read_buffer_bytes) / 1e9,
          " GB of --expert-memory (", cache->routed_bytes() / 1e9, " GB of routed experts on disk; ",
          static_cast<double>(cache->slots()) / cache->moe_layers(), " experts per MoE layer of ", c.n_routed_experts,
          ")");
  LogInfo("expert cache: reads ", cache->direct() ? "O_DIRECT" : "through the page cache (no O_DIRECT)", " at ",
          disk_gbps, " GB/s (probe), memory ", memory_gbps, " GB/s (", memory_probe_bytes >> 20,
          " MiB probe; below the last-level cache's size it overstates); at hit rate 0 a token reads ",
          miss_bytes / 1e9, " GB from disk: at most ", roofline,
          " tokens/s at one sequence (1 / (disk bytes / disk bandwidth + ", "resident bytes / memory bandwidth))");
  // The same model at the hit rate uniform routing gives this cache (its share of the experts); a trained router
  // does better (measure it: --expert-trace, glint replay-expert-trace).
  const plan::ExpertCacheEstimate uniform = plan::EstimateExpertCache(
      {static_cast<double>(cache->routed_bytes()), miss_bytes, resident, resident,
       static_cast<double>(load.expert_cache_bytes), disk_gbps * 1e9, memory_gbps * 1e9, std::nullopt});
  LogInfo("expert cache: at the hit rate of uniform routing (", uniform.hit_rate * 100, " %: the cache's share of ",
          "the experts) a token reads ", uniform.disk_bytes_per_token / 1e9, " GB from disk: at most ",
          uniform.tokens_per_second, " tokens/s at one sequence (", uniform.disk_share * 100, " % of it reading)");
  return Status::Ok();
}

void AddForwardPathFlags(CLI::App& command, ForwardPathFlags& flags) {
  command
      .add_option("--path", flags.path,
                  "forward pass: fast (int8/bf16 kernels) or reference (fp32, exact to the golden outputs, slow)")
      ->check(CLI::IsMember({"fast", "reference"}))
      ->capture_default_str();
  command.add_option("--threads", flags.threads, "fast path worker threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  AddExpertsFlag(command, flags.experts);
  AddExpertMemoryFlag(command, flags.expert_cache);
  AddMlaAttentionFlag(command, flags.mla_attention);
  AddParallelFlags(command, flags.parallel);
  AddKeepSmallPagesFlag(command, flags.keep_small_pages);
}

Result<LoadedModel> LoadModel(const ModelFlag& flag, const ForwardPathFlags& path) {
  GLINT_ASSIGN_OR_RETURN(const std::string dir, ResolveModelDir(flag));
  GLINT_ASSIGN_OR_RETURN(const ModelParallel parallel, ToModelParallel(path.parallel));
  LoadedModel loaded;
  Result<std::unique_ptr<Model>> model = [&]() -> Result<std::unique_ptr<Model>> {
    if (path.path == "reference") {
      if (!path.experts.empty()) return InvalidArgument("--experts applies to the fast path, not --path reference");
      if (!path.mla_attention.empty()) {
        return InvalidArgument("--mla-attention applies to the fast path, not --path reference");
      }
      if (path.keep_small_pages)
        return InvalidArgument("--keep-small-pages applies to the fast path, not --path reference");
      if (path.expert_cache.given()) {
        return InvalidArgument("--expert-memory and --expert-trace apply to the fast path, not --path reference");
      }
      GLINT_ASSIGN_OR_RETURN(std::unique_ptr<ReferenceModel> reference, LoadReferenceModel({dir}, parallel));
      loaded.description = "fp32 reference";
      return std::unique_ptr<Model>(std::move(reference));
    }
    const int threads = path.threads > 0 ? path.threads : static_cast<int>(std::thread::hardware_concurrency());
    loaded.pool = std::make_unique<WorkerPool>(std::max(1, threads));
    GLINT_ASSIGN_OR_RETURN(std::unique_ptr<Model> fast_model,
                           LoadFastModel({dir}, *loaded.pool, path.experts, path.expert_cache, parallel,
                                         path.mla_attention, path.keep_small_pages));
    const auto& fast = static_cast<const FastModel&>(*fast_model);
    loaded.description = StrCat(
        "int8/bf16 fast path, ", ExpertWeightsName(fast.weights().experts), " experts",
        fast.expert_cache() != nullptr ? StrCat(" (", fast.expert_cache()->slots(), " cached from disk)") : "", ", ",
        IsaName(fast.isa()), " kernels, ",
        fast.mla_attention() == mla::AttentionPrecision::kFp32 ? ""
                                                               : StrCat(MlaAttentionWords(fast.mla_attention()), ", "),
        loaded.pool->size(), " threads");
    return fast_model;
  }();
  GLINT_ASSIGN_OR_RETURN(loaded.model, JoinRanks(std::move(model), dir));
  if (Distributed()) {
    const ShardPlan plan = loaded.model->shard_plan();
    loaded.description += StrCat(", ", World().size(), " ranks (--tp ", plan.tp, " --ep ", plan.ep, ")");
  }
  return loaded;
}

}  // namespace glint::cli

namespace glint::cli {

std::string DescribeHugePages(const FastLoadReport& load) {
  if (!load.from_container || load.container_resident_bytes == 0) return "";
  const double share = static_cast<double>(load.container_huge_page_bytes) / load.container_resident_bytes;
  char text[96];
  std::snprintf(text, sizeof text, "; %.2f of %.2f GB resident on 2 MB pages (%.0f%%)",
                load.container_huge_page_bytes / 1e9, load.container_resident_bytes / 1e9, 100 * share);
  using SmallPages = FastLoadReport::SmallPages;
  std::string note = text;
  if (load.small_pages == SmallPages::kReadAgain) {
    char reread[128];
    std::snprintf(reread, sizeof reread,
                  " after reading it again from disk in %.1f s (it was %.0f%%: the page cache held it in small pages)",
                  load.reread_seconds, 100 * load.huge_page_share_before_reread);
    note += reread;
  }
  if (share >= kHugePageShareGoal) return note;
  // Below FastModel::Load's goal: say why, and what would change it (docs/performance.md "Weights on 2 MB pages").
  switch (load.small_pages) {
    case SmallPages::kNoneForThisFile:
      return StrCat(note,
                    " — the kernel or the filesystem maps this file in 4 KB pages only (transparent huge "
                    "pages off, or no large folios on its filesystem)");
    case SmallPages::kReadAgain:
      return StrCat(note, " — some came back in small pages (mapped by another process, or read in smaller folios)");
    case SmallPages::kKept:
      return StrCat(note, " — the page cache holds part of the file in 4 KB pages, kept (--keep-small-pages)");
    case SmallPages::kNotChecked:
    case SmallPages::kOnHugePages:
      break;
  }
  if (share >= 0.5) return note;
  return StrCat(note,
                " — the page cache holds the file in 4 KB pages; once it leaves the cache (after a reboot, or "
                "`echo 1 > /proc/sys/vm/drop_caches`) a load reads it as 2 MB pages where the kernel and "
                "filesystem support them");
}

}  // namespace glint::cli
