// glint bench-model: end-to-end figures of the fast path on a model directory, each beside this machine's limits
// measured in the same run (docs/performance.md explains the figures and the targets they are judged by):
//   machine   triad and read bandwidth, int8 VNNI peak and (where the CPU has it) AMX int8 peak (one thread and
//             all threads)
//   load      time and GB/s to load the weights (a `glint convert` container maps with no conversion)
//   prefill   tokens/s for each prompt length (the first, cold run apart when there are more); GOPS of the int8
//             products and their ratio to the peak of the kernel level (AMX at --isa amx, VNNI otherwise), the
//             dense products' and the experts' apart; the share of the time in each part of the fast path
//             (fast/pass_profile.h), so that each optimisation is chosen from a measured share
//   decode    tokens/s at each batch size; weight bytes streamed per step and their ratio to the triad bandwidth;
//             the 16-sequence bound 1.25 × (dense + union of active experts) / bandwidth; the roofline, and the
//             bound by part (dense products, experts, other weights) with what issue 36's target leaves for the
//             rest of the step; the step's profile
//   memory    peak RSS against 1.1 × weight bytes + caches
// It prints figures and never fails on a time.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <span>
#include <sstream>
#include <thread>

#include "base/file.h"
#include "base/log.h"
#include "base/timer.h"
#include "base/worker_pool.h"
#include "bench/stats.h"
#include "cli/collective_report.h"
#include "cli/command.h"
#include "cli/distributed.h"
#include "cli/host_info.h"
#include "cli/model_flags.h"
#include "cli/progress_bar.h"
#include "fast/fast_model.h"
#include "kernels/gemm_i8.h"
#include "kernels/machine_limits.h"

namespace glint::cli {
namespace {

struct ModelBenchFlags {
  std::string model;
  int threads = 0;
  std::string isa;
  std::string experts;            // --experts int8|int4 (empty: as stored)
  std::string mla_attention;      // --mla-attention fp32|bf16 (empty: fp32)
  ExpertCacheFlags expert_cache;  // --expert-memory SIZE (empty: every expert resident), --expert-io, --expert-trace
  std::vector<int64_t> prompts = {512, 4096};
  std::vector<int64_t> batches = {1, 4, 16};
  int64_t context = 64;
  int64_t steps = 8;
  int repetitions = 3;
  int64_t pass_tokens = 512;
  int64_t probe_mib = 256;
  std::string kv_cache_dtype = "fp32";  // --kv-cache-dtype: the MLA latents and pooled indexer keys
  bool profile = true;                  // --profile / --no-profile: prefill and decode time by part
  bool keep_small_pages = false;        // --keep-small-pages: FastModelOptions::reread_small_pages off
  ParallelFlags parallel;               // --tp / --ep under mpirun
};

using bench::Median;

// kB value of a /proc/self/status field (VmHWM, VmRSS), in bytes.
uint64_t ProcStatusBytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  }
  return 0;
}

// User + system CPU seconds of this process so far.
double ProcessCpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + 1e-6 * (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// Resets VmHWM to the current RSS (Linux ≥ 4.0: "5" written to /proc/self/clear_refs).
void ResetPeakRss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

std::vector<int32_t> SeededRandomTokens(int64_t count, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> tokens(count);
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int32_t& token : tokens) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    token = static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(vocab));
  }
  return tokens;
}

// Cache memory of the sequences: each one's slot (KDA states, pending indexer rows) and its blocks (latents and
// pooled keys of the DSA layers).
// Under --dp-attention: per rank ([attention rank]), each held-elsewhere sequence counted as its rank holds it (its
// slot and the blocks covering its positions, in the layout of rank 0's sequences, which every rank shares at --tp 1).
std::vector<uint64_t> CacheBytesByRank(const std::vector<SequenceState>& states) {
  std::vector<uint64_t> bytes(1, 0);
  const CacheLayout* layout = nullptr;
  for (const SequenceState& s : states) layout = s.HeldElsewhere() || layout != nullptr ? layout : s.layout.get();
  for (const SequenceState& s : states) {
    const size_t rank = static_cast<size_t>(std::max(0, s.attention_rank));
    if (bytes.size() <= rank) bytes.resize(rank + 1, 0);
    if (!s.HeldElsewhere()) {
      bytes[rank] += s.layout->slot_bytes + s.memory.block_table->size() * s.layout->block_bytes;
    } else if (layout != nullptr) {
      const int64_t blocks = (s.tokens + layout->block_tokens() - 1) / layout->block_tokens();
      bytes[rank] += layout->slot_bytes + blocks * layout->block_bytes;
    }
  }
  return bytes;
}

uint64_t CacheBytes(const std::vector<SequenceState>& states) {
  const std::vector<uint64_t> by_rank = CacheBytesByRank(states);
  if (by_rank.size() > 1) {
    std::string line = "cache per rank (--dp-attention):";
    for (size_t r = 0; r < by_rank.size(); ++r) line += StrCat(" rank ", r, " ", by_rank[r] / 1e9, " GB");
    std::printf("%s\n", line.c_str());
  }
  uint64_t bytes = 0;
  for (uint64_t rank_bytes : by_rank) bytes = std::max(bytes, rank_bytes);
  return bytes;  // the most any rank holds
}

// The machine's limits, measured once before the model loads; the figures below are judged against them.
struct MachineFigures {
  MachineLimits limits;
  double int8_peak = 0;  // GOPS of the kernel level the model runs (AMX at --isa amx, VNNI otherwise)
  const char* peak_name = "";
  double bandwidth = 0;  // bytes/s: triad, all threads
};

// What every phase of the benchmark reads.
struct BenchRun {
  const ModelBenchFlags& flags;
  int threads = 0;
  MachineFigures machine;
  const Model* runner = nullptr;
  const FastModel* fast = nullptr;  // the runner's fast model: its step statistics
  KvCacheDtype kv_dtype = KvCacheDtype::kFloat32;

  // fp32 keeps NewSequence (mirrored to the other ranks under mpirun).
  SequenceState NewSequence() const {
    return kv_dtype == KvCacheDtype::kFloat32 ? runner->NewSequence() : runner->NewStandaloneSequence(kv_dtype);
  }
};

Result<FastModelOptions> FastOptionsFromFlags(const ModelBenchFlags& flags) {
  FastModelOptions options;
  if (!flags.isa.empty()) {
    GLINT_ASSIGN_OR_RETURN(options.isa, ParseIsa(flags.isa));
  }
  options.max_tokens_per_pass = flags.pass_tokens;
  if (!flags.experts.empty()) {
    GLINT_ASSIGN_OR_RETURN(options.experts, ParseExpertWeights(flags.experts));
  }
  if (!flags.mla_attention.empty()) {
    GLINT_ASSIGN_OR_RETURN(options.mla_attention, mla::ParseAttentionPrecision(flags.mla_attention));
  }
  GLINT_RETURN_IF_ERROR(ApplyExpertCacheFlags(flags.expert_cache, options));
  options.reread_small_pages = !flags.keep_small_pages;
  GLINT_ASSIGN_OR_RETURN(options.parallel, ToModelParallel(flags.parallel));
  return options;
}

MachineFigures MeasureMachine(WorkerPool& pool, const ModelBenchFlags& flags, Isa isa, int threads) {
  std::printf("== machine: %s, %d threads, kernels %s%s; load average %s on %u CPUs\n", CpuName().c_str(), threads,
              std::string(IsaName(isa)).c_str(), CpuHasAvx512Bf16() ? " (CPU also has AVX512-BF16)" : "",
              LoadAverageText().c_str(), std::thread::hardware_concurrency());
  std::printf(
      "   (cpu share = this process's CPU time ÷ (wall time × threads): below 100%% the OS ran other work on "
      "our cores)\n");
  MachineProbeOptions probe;
  probe.array_bytes = flags.probe_mib << 20;
  MachineFigures machine;
  const MachineLimits& limits = machine.limits = MeasureMachineLimits(pool, probe);
  std::printf(
      "   triad %.1f GB/s (1 thread %.1f), read %.1f GB/s (1 thread %.1f), int8 VNNI peak %.0f GOPS "
      "(1 thread %.0f)",
      limits.triad_gbps_all_threads, limits.triad_gbps_one_thread, limits.read_gbps_all_threads,
      limits.read_gbps_one_thread, limits.int8_gops_all_threads, limits.int8_gops_one_thread);
  if (IsaSupported(Isa::kAmx)) {
    std::printf(", AMX int8 peak %.0f GOPS (1 thread %.0f)\n", limits.amx_int8_gops_all_threads,
                limits.amx_int8_gops_one_thread);
  } else {
    std::printf("; no AMX: %s\n", std::string(AmxUnavailableReason()).c_str());
  }
  machine.int8_peak = Int8PeakFor(limits, isa, /*one_thread=*/false);
  machine.peak_name = isa == Isa::kAmx ? "AMX" : "VNNI";
  machine.bandwidth = limits.triad_gbps_all_threads * 1e9;
  return machine;
}

// Loads twice: the second load of a container reads from the page cache. Under mpirun every rank loads its shard
// and the ranks join (a load error on one rank becomes an error on all of them). `weight_bytes`: this rank's.
Result<std::unique_ptr<Model>> LoadTwice(const ModelBenchFlags& flags, WorkerPool& pool, FastModelOptions options,
                                         uint64_t& weight_bytes) {
  std::unique_ptr<FastModel> model;
  const Status loaded = [&]() -> Status {
    for (int run = 0; run < 2; ++run) {
      model.reset();
      ProgressBar bar("convert at load");
      options.progress = [&bar](const ConvertProgress& p) { bar.Update(p.done_bytes, p.total_bytes, p.tensor); };
      GLINT_ASSIGN_OR_RETURN(model, FastModel::Load(flags.model, pool, options));
      const FastLoadReport& load = model->load_report();
      std::printf("== load %d: %s, %s experts, %.3f GB in %.2f s = %.2f GB/s%s\n", run + 1,
                  load.from_container ? "container (mmap, no conversion)" : "checkpoint (converted in memory)",
                  std::string(ExpertWeightsName(model->weights().experts)).c_str(), load.weight_bytes / 1e9,
                  load.seconds, load.weight_bytes / 1e9 / load.seconds, DescribeHugePages(load).c_str());
      if (!load.from_container) break;  // converting twice teaches nothing new
      if (run == 0) ResetPeakRss();     // only one copy of the weights is ever mapped at a time
    }
    weight_bytes = model->load_report().weight_bytes;
    return LogExpertCacheReport(*model, pool);
  }();
  Result<std::unique_ptr<Model>> joined =
      loaded.ok() ? Result<std::unique_ptr<Model>>(std::unique_ptr<Model>(std::move(model))) : loaded;
  return JoinRanks(std::move(joined), flags.model);
}

// One Forward: its wall seconds, and this process's CPU share of the threads over it.
struct TimedForward {
  double seconds = 0;
  double cpu_share = 0;
};
Result<TimedForward> TimeForward(const BenchRun& run, std::span<const BatchEntry> entries,
                                 std::vector<EntryOutput>& outputs) {
  Stopwatch watch;
  const double cpu_before = ProcessCpuSeconds();
  GLINT_RETURN_IF_ERROR(run.runner->Forward(entries, outputs));
  TimedForward timed;
  timed.seconds = watch.Seconds();
  timed.cpu_share = (ProcessCpuSeconds() - cpu_before) / (timed.seconds * run.threads);
  return timed;
}

// Under mpirun: the collectives of a step on rank 0 beside glint plan's count for the same step.
void ReportCollectives(const BenchRun& run, const CollectiveStats& since, int64_t steps, double step_seconds,
                       const plan::StepShape& shape) {
  if (!Distributed()) return;
  std::printf("   %s\n",
              DescribeStepCollectives(since, steps, step_seconds, run.runner->config(), run.runner->shard_plan(), shape)
                  .c_str());
}

// Where a prefill's (or decode step's) wall time went, by part (fast/pass_profile.h): each part's median share
// over the repetitions (steps), largest first, the parts adding to 100 % of the profiled forward calls.
void PrintProfile(const char* what, const std::vector<PassProfile::Seconds>& runs) {
  std::vector<std::pair<double, PassPart>> shares;
  for (int p = 0; p < kPassParts; ++p) {
    std::vector<double> share;
    for (const PassProfile::Seconds& run : runs) {
      double total = 0;
      for (double s : run) total += s;
      share.push_back(total > 0 ? run[p] / total : 0.0);
    }
    shares.emplace_back(Median(share), static_cast<PassPart>(p));
  }
  std::sort(shares.rbegin(), shares.rend());
  std::printf("   %s profile (share of the forward's wall time):", what);
  for (const auto& [share, part] : shares) std::printf(" %s %.1f%%;", PassPartName(part), 100 * share);
  std::printf("\n");
}

Status BenchPrefill(const BenchRun& run) {
  const ModelConfig& c = run.runner->config();
  run.fast->SetProfiling(run.flags.profile);
  for (int64_t prompt : run.flags.prompts) {
    std::vector<double> seconds, gops, dense_gops, expert_gops, expert_share, int8_share, cpu_share;
    std::vector<PassProfile::Seconds> parts;
    const CollectiveStats prefill_start = World().stats_with_splits();
    for (int rep = 0; rep < run.flags.repetitions; ++rep) {
      SequenceState state = run.NewSequence();
      const std::vector<int32_t> tokens = SeededRandomTokens(prompt, c.vocab_size, 100 + rep);
      std::vector<EntryOutput> outputs;
      const BatchEntry entry{tokens, &state, LogitsWanted::kLast, false};
      GLINT_ASSIGN_OR_RETURN(const TimedForward timed, TimeForward(run, {&entry, 1}, outputs));
      seconds.push_back(timed.seconds);
      cpu_share.push_back(timed.cpu_share);
      const FastStepStats& stats = run.fast->last_step();
      const ProductTime products = stats.products();
      gops.push_back(products.Gops());
      dense_gops.push_back(stats.dense_products.Gops());
      expert_gops.push_back(stats.expert_products.Gops());
      expert_share.push_back(products.macs ? static_cast<double>(stats.expert_products.macs) / products.macs : 0.0);
      int8_share.push_back(products.seconds / seconds.back());
      parts.push_back(stats.part_seconds);
    }
    // The first run of a prompt length is the first to touch its pass's buffers (activations, attention scratch, the
    // new sequence's caches): the pages are faulted in and zeroed then, which cost the 2-core VM of 2026-12-06 ≈ 1.3–2
    // s at 512 tokens, as long as the pass itself (its threads off the CPU a quarter of the time: the host's faults).
    // With more runs it is reported apart and left out of the medians, which are the steady state a server sees after
    // its first request.
    const double first = seconds.front();
    if (seconds.size() > 1) {
      for (auto* values : {&seconds, &gops, &dense_gops, &expert_gops, &expert_share, &int8_share, &cpu_share}) {
        values->erase(values->begin());
      }
      parts.erase(parts.begin());
    }
    const double s = Median(seconds), g = Median(gops);
    std::printf(
        "== prefill %lld tokens: %.2f s = %.1f tokens/s; int8 products %.0f GOPS = %.0f%% of the %s peak "
        "(%.0f%% of the time); cpu share %.0f%%  [median of %zu%s]\n",
        static_cast<long long>(prompt), s, prompt / s, g, 100 * g / run.machine.int8_peak, run.machine.peak_name,
        100 * Median(int8_share), 100 * Median(cpu_share), seconds.size(),
        run.flags.repetitions > 1 ? " after the first run" : "; the first run, with its buffers' first touch");
    if (run.flags.repetitions > 1) {
      std::printf("   first run %.2f s = %.1f tokens/s (%.2f× the median: its buffers touched for the first time)\n",
                  first, prompt / first, first / s);
    }
    // Dense products run over the whole pass; each expert over its few routed rows (≈ tokens × top-k / experts),
    // whose weights stream from memory with fewer reuses: the two efficiencies apart say which one to work on.
    const double peak = run.machine.int8_peak;
    std::printf(
        "   int8 products: dense %.0f GOPS = %.0f%% of peak; experts %.0f GOPS = %.0f%% (%.0f%% of the "
        "multiply-adds)\n",
        Median(dense_gops), 100 * Median(dense_gops) / peak, Median(expert_gops), 100 * Median(expert_gops) / peak,
        100 * Median(expert_share));
    if (run.flags.profile) PrintProfile("prefill", parts);
    ReportCollectives(run, World().stats_with_splits().Since(prefill_start), run.flags.repetitions, s,
                      {1, prompt, 1, run.flags.pass_tokens, 0, 0, 0, run.fast->expert_cache() != nullptr});
  }
  run.fast->SetProfiling(false);
  return Status::Ok();
}

// --expert-memory: the cache's hit rate and disk reads over the decode steps, and what prefetching did.
void ReportExpertCache(const DiskExpertCache& cache, double wall, int64_t steps) {
  const ExpertCacheStats cs = cache.stats();
  std::printf(
      "   expert cache: hit rate %.1f%% (%lld hits, %lld misses), %.3f GB read from disk = %.2f GB/s over "
      "the %lld steps\n",
      100.0 * cs.hits / std::max<int64_t>(1, cs.hits + cs.misses), static_cast<long long>(cs.hits),
      static_cast<long long>(cs.misses), cs.bytes_read / 1e9, cs.bytes_read / 1e9 / wall,
      static_cast<long long>(steps));
  if (cs.prefetch_issued > 0 || cs.prefetch_cancelled > 0) {
    std::printf(
        "   expert prefetch: %lld reads issued, %lld used by the next pass, %lld cancelled unread, "
        "%lld failed; %.3f GB read and evicted unused (wasted)\n",
        static_cast<long long>(cs.prefetch_issued), static_cast<long long>(cs.prefetch_used),
        static_cast<long long>(cs.prefetch_cancelled), static_cast<long long>(cs.prefetch_failed),
        cs.prefetch_wasted_bytes / 1e9);
  }
}

// The decode step's bound by part. The dense products and the experts' run one after the other (a barrier between
// phases), so neither hides behind the other: each is bounded alone by the larger of its weights ÷ triad and its
// multiply-adds ÷ the int8 peak, and the step by their sum plus the other weights (bf16 products, mHC) at triad —
// tighter than the whole step's roofline above, which lets the dense products' arithmetic overlap the experts'
// streaming. At B sequences the dense products do 2·B ops per weight byte, so on a machine whose peak ÷ triad is
// under 2·B they are compute-bound while the experts (a few rows each) stay memory-bound. Then the issue-36 target
// (weights ÷ step ≥ 0.8 × triad batched, 0.9 × for one sequence) leaves what the figures say for everything that is
// not a product.
void PrintDecodeBoundByPart(const BenchRun& run, int64_t batch_size, const ProductTime& dense,
                            const ProductTime& experts, double bytes_per_step, double step_seconds,
                            double other_seconds) {
  const double bandwidth = run.machine.bandwidth;
  const DecodeStepBound parts = BoundDecodeStep(dense, experts, bytes_per_step, bandwidth, run.machine.int8_peak * 1e9);
  const auto kind = [](const ProductBound& b) { return b.compute_bound() ? "compute" : "memory"; };
  const double bound = parts.seconds();
  std::printf(
      "   bound by part: dense products %.1f ms (%s; weights %.1f ms at triad, %.1f ms at the peak), experts %.1f ms "
      "(%s; %.1f / %.1f ms), other weights %.1f ms: %.1f ms; the step at %.0f%% of it\n",
      1e3 * parts.dense.seconds(), kind(parts.dense), 1e3 * parts.dense.memory_seconds,
      1e3 * parts.dense.compute_seconds, 1e3 * parts.experts.seconds(), kind(parts.experts),
      1e3 * parts.experts.memory_seconds, 1e3 * parts.experts.compute_seconds, 1e3 * parts.other_weights_seconds,
      1e3 * bound, step_seconds > 0 ? 100 * bound / step_seconds : 0.0);
  const bool batched = batch_size > 1;
  const double target_ratio = batched ? 0.8 : 0.9, target = bytes_per_step / (target_ratio * bandwidth);
  if (target < bound) {
    std::printf(
        "   %.1f × triad (issue 36's %s target) is a step of %.1f ms, under the products' bound alone: out of "
        "reach on this machine\n",
        target_ratio, batched ? "batched" : "one-sequence", 1e3 * target);
  } else {
    // The rest holds memory traffic of its own that the target's bytes leave out: each sequence's KDA recurrent
    // states (fp32 here, [heads, d_k, d_v] per KDA layer), read and written once a step by the fused delta rule.
    const ModelConfig& c = run.runner->config();
    const double kda_state_bytes = 2.0 * static_cast<double>(batch_size) * c.NumLayersOf(AttentionKind::kKda) *
                                   static_cast<double>(c.kda_num_heads) * static_cast<double>(c.kda_head_dim) *
                                   static_cast<double>(c.kda_head_dim) * sizeof(float);
    std::printf(
        "   %.1f × triad (issue 36's %s target) is a step of %.1f ms: with every product at its bound it leaves "
        "%.1f ms for the rest of the step, which takes %.1f ms now; of it the KDA states read and written, %.0f MB, "
        "take %.1f ms at triad\n",
        target_ratio, batched ? "batched" : "one-sequence", 1e3 * target, 1e3 * (target - bound), 1e3 * other_seconds,
        kda_state_bytes / 1e6, 1e3 * kda_state_bytes / bandwidth);
  }
}

// Decode steps of one batch size after a prefill of --context tokens each; returns the sequences' cache bytes.
Result<uint64_t> BenchDecodeBatch(const BenchRun& run, int64_t batch_size) {
  const ModelConfig& c = run.runner->config();
  const ModelBenchFlags& flags = run.flags;
  std::vector<SequenceState> states;
  for (int64_t i = 0; i < batch_size; ++i) states.push_back(run.NewSequence());
  std::vector<std::vector<int32_t>> contexts(batch_size);
  std::vector<BatchEntry> entries;
  for (int64_t i = 0; i < batch_size; ++i) {
    contexts[i] = SeededRandomTokens(flags.context, c.vocab_size, 1000 + i);
    entries.push_back({contexts[i], &states[i], LogitsWanted::kLast, false});
  }
  std::vector<EntryOutput> outputs;
  GLINT_RETURN_IF_ERROR(run.runner->Forward(entries, outputs));
  if (run.fast->expert_cache() != nullptr) const_cast<DiskExpertCache*>(run.fast->expert_cache())->ResetStats();
  Stopwatch decode_clock;
  const CollectiveStats decode_start = World().stats_with_splits();
  std::vector<double> seconds, bandwidth_ratio, cpu_share;
  std::vector<PassProfile::Seconds> parts;
  std::vector<double> dense_seconds, dense_gops, expert_seconds, expert_gops;
  run.fast->SetProfiling(flags.profile);
  double bytes_per_step = 0, experts_per_layer = 0, int8_ops_per_step = 0;
  ProductTime last_dense, last_experts;  // the last step's (bytes and multiply-adds are the same every step)
  int moe_layers = 0;
  for (int64_t step = 0; step < flags.steps; ++step) {
    std::vector<std::vector<int32_t>> next(batch_size);
    entries.clear();
    for (int64_t i = 0; i < batch_size; ++i) {
      next[i] = SeededRandomTokens(1, c.vocab_size, 5000 + step * 100 + i);
      entries.push_back({next[i], &states[i], LogitsWanted::kLast, false});
    }
    GLINT_ASSIGN_OR_RETURN(const TimedForward timed, TimeForward(run, entries, outputs));
    seconds.push_back(timed.seconds);
    cpu_share.push_back(timed.cpu_share);
    const FastStepStats& stats = run.fast->last_step();
    bandwidth_ratio.push_back(stats.weight_bytes_read / seconds.back() / run.machine.bandwidth);
    parts.push_back(stats.part_seconds);
    dense_seconds.push_back(stats.dense_products.seconds), dense_gops.push_back(stats.dense_products.Gops());
    expert_seconds.push_back(stats.expert_products.seconds), expert_gops.push_back(stats.expert_products.Gops());
    last_dense = stats.dense_products, last_experts = stats.expert_products;
    bytes_per_step = static_cast<double>(stats.weight_bytes_read);
    int8_ops_per_step = 2.0 * static_cast<double>(stats.products().macs);
    experts_per_layer = 0, moe_layers = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      if (c.mlp_kinds[l] == MlpKind::kMoe) experts_per_layer += stats.experts_active[l], ++moe_layers;
    }
  }
  const double s = Median(seconds), bandwidth = run.machine.bandwidth;
  std::printf(
      "== decode %lld sequence%s (context %lld): %.1f ms/step = %.2f tokens/s; %.3f GB of weights per step "
      "(%.1f routed experts per MoE layer) = %.1f GB/s = %.0f%% of triad; bound 1.25 × bytes/bandwidth = "
      "%.1f ms: %s; cpu share %.0f%%  [median of %lld steps]\n",
      static_cast<long long>(batch_size), batch_size > 1 ? "s" : "", static_cast<long long>(flags.context), 1e3 * s,
      batch_size / s, bytes_per_step / 1e9, moe_layers ? experts_per_layer / moe_layers : 0.0, bytes_per_step / s / 1e9,
      100 * Median(bandwidth_ratio), 1e3 * 1.25 * bytes_per_step / bandwidth,
      s <= 1.25 * bytes_per_step / bandwidth ? "within" : "over", 100 * Median(cpu_share),
      static_cast<long long>(flags.steps));
  // Each weight byte serves every sequence: at B sequences the int8 products do 2·B ops per byte, and past
  // peak / (2 · triad) sequences (≈ 13 on a 2-core AVX-512 machine, far more with AMX) the step is bound by the
  // kernel's peak, not by memory. The roofline is the larger of the two times.
  const double memory_bound = bytes_per_step / bandwidth,
               compute_bound = int8_ops_per_step / (run.machine.int8_peak * 1e9);
  const double roofline = std::max(memory_bound, compute_bound);
  std::printf(
      "   roofline: int8 products %.1f GOPS a step = %.1f ms at the %s peak, weights %.1f ms at triad: bound "
      "%.1f ms (%s); the step at %.0f%% of it\n",
      int8_ops_per_step / 1e9, 1e3 * compute_bound, run.machine.peak_name, 1e3 * memory_bound, 1e3 * roofline,
      compute_bound > memory_bound ? "compute" : "memory", 100 * roofline / s);
  std::printf("   int8 products a step: dense %.1f ms (%.0f GOPS), experts %.1f ms (%.0f GOPS)\n",
              1e3 * Median(dense_seconds), Median(dense_gops), 1e3 * Median(expert_seconds), Median(expert_gops));
  PrintDecodeBoundByPart(run, batch_size, last_dense, last_experts, bytes_per_step, s,
                         s - Median(dense_seconds) - Median(expert_seconds));
  run.fast->SetProfiling(false);
  if (flags.profile) PrintProfile("decode", parts);
  ReportCollectives(
      run, World().stats_with_splits().Since(decode_start), flags.steps, s,
      {batch_size, batch_size, batch_size, flags.pass_tokens, 0, 0, 0, run.fast->expert_cache() != nullptr});
  if (const DiskExpertCache* cache = run.fast->expert_cache(); cache != nullptr) {
    ReportExpertCache(*cache, decode_clock.Seconds(), flags.steps);
  }
  return CacheBytes(states);
}

Status RunBenchModel(const ModelBenchFlags& flags) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each figure as soon as it is measured, also into a file or pipe
  const int threads = flags.threads > 0 ? flags.threads : static_cast<int>(std::thread::hardware_concurrency());
  WorkerPool pool(threads);
  GLINT_ASSIGN_OR_RETURN(const FastModelOptions options, FastOptionsFromFlags(flags));
  BenchRun run{flags, threads, MeasureMachine(pool, flags, options.isa, threads)};
  ResetPeakRss();  // the probes' buffers (≈1 GB) are not the model's
  uint64_t weight_bytes = 0;
  GLINT_ASSIGN_OR_RETURN(const std::unique_ptr<Model> runner, LoadTwice(flags, pool, options, weight_bytes));
  run.runner = runner.get();
  run.fast = &static_cast<const FastModel&>(Unwrapped(*runner));
  GLINT_ASSIGN_OR_RETURN(run.kv_dtype, ParseKvCacheDtype(flags.kv_cache_dtype));
  if (run.kv_dtype != KvCacheDtype::kFloat32 && &Unwrapped(*runner) != runner.get()) {
    return Unimplemented("bench-model --kv-cache-dtype ", flags.kv_cache_dtype,
                         " runs on one rank only (its "
                         "standalone sequences are not mirrored under mpirun yet); use bench-engine there");
  }
  std::printf("== kv cache %s (MLA latents and indexer keys); MLA attention %s\n", flags.kv_cache_dtype.c_str(),
              std::string(mla::AttentionPrecisionName(run.fast->mla_attention())).c_str());
  GLINT_RETURN_IF_ERROR(BenchPrefill(run));
  uint64_t peak_cache_bytes = 0;
  for (int64_t batch_size : flags.batches) {
    GLINT_ASSIGN_OR_RETURN(const uint64_t cache_bytes, BenchDecodeBatch(run, batch_size));
    peak_cache_bytes = std::max(peak_cache_bytes, cache_bytes);
  }
  const uint64_t peak_rss = ProcStatusBytes("VmHWM");
  const double budget = 1.1 * weight_bytes + peak_cache_bytes;
  std::printf("== memory: peak RSS %.3f GB; budget 1.1 × %.3f GB weights + %.3f GB caches = %.3f GB: %s\n",
              peak_rss / 1e9, weight_bytes / 1e9, peak_cache_bytes / 1e9, budget / 1e9,
              peak_rss <= budget ? "within" : "over");
  return Status::Ok();
}

GLINT_REGISTER_COMMAND(
    "bench-model", "Benchmark the fast path end to end (prefill, decode, load, memory) against machine limits", 85,
    [](CLI::App& command) -> std::function<Status()> {
      auto flags = std::make_shared<ModelBenchFlags>();
      command.add_option("--model", flags->model, "model directory (a `glint convert` output, or a checkpoint)")
          ->required()
          ->check(CLI::ExistingDirectory);
      command.add_option("--threads", flags->threads, "worker threads (default: all cores)");
      command.add_option("--isa", flags->isa,
                         "kernel level: " + std::string(kIsaNames) +
                             " (default: the best this CPU has; amx runs the int8 products of at least " +
                             std::to_string(kAmxMinTokens) + " tokens on AMX tiles and everything else as avx512)");
      AddExpertsFlag(command, flags->experts);
      AddMlaAttentionFlag(command, flags->mla_attention);
      AddKeepSmallPagesFlag(command, flags->keep_small_pages);
      AddExpertMemoryFlag(command, flags->expert_cache);
      AddParallelFlags(command, flags->parallel);
      command.add_option("--prompts", flags->prompts, "prefill prompt lengths")->delimiter(',')->capture_default_str();
      command.add_option("--batches", flags->batches, "decode batch sizes")->delimiter(',')->capture_default_str();
      command.add_option("--context", flags->context, "tokens of context before decoding")->capture_default_str();
      command
          .add_option("--kv-cache-dtype", flags->kv_cache_dtype,
                      "storage of the MLA latents and the indexer's pooled keys: fp32 (as computed), bf16, fp8 or "
                      "int8 (as the engine's; one rank only for the compact ones)")
          ->check(CLI::IsMember({"fp32", "bf16", "fp8", "int8"}))
          ->capture_default_str();
      command.add_option("--steps", flags->steps, "decode steps per batch size")
          ->capture_default_str()
          ->check(CLI::Range(1, 1 << 20));
      command
          .add_option("--repetitions", flags->repetitions,
                      "prefill runs per prompt length; with more than one, the first (buffers touched for the "
                      "first time) is reported apart and the medians are of the rest")
          ->capture_default_str()
          ->check(CLI::Range(1, 1000));
      command
          .add_flag("--profile,!--no-profile", flags->profile,
                    "print where each prefill's and each decode batch's time goes, by part of the fast path (two "
                    "clock reads per part entered: no cost measurable beside run-to-run noise)")
          ->capture_default_str();
      command.add_option("--pass-tokens", flags->pass_tokens, "rows per layer pass (FastModelOptions)")
          ->capture_default_str();
      command
          .add_option("--probe-mib", flags->probe_mib,
                      "MiB per bandwidth-probe array (keep ≥ 8× the last-level cache for real figures)")
          ->capture_default_str()
          ->check(CLI::Range(1, 1 << 16));
      return [flags] { return RunBenchModel(*flags); };
    });

}  // namespace
}  // namespace glint::cli
