// glint bench-context: the cost of one decode step as the context grows (docs/long-context.md "Decode cost by
// context"). For each context N the sequence's caches are filled SYNTHETICALLY — random latents and pooled keys
// written straight into every DSA layer's cache (the KDA state is zeros), so no N-token prefill is run — and then
// decode steps are timed at position N. Printed per context: the step time and its ratio to the shortest
// context's, the indexer's time (scoring + top-k of every DSA layer) and share of the step beside the feasibility
// study's predicted share of the MoE FLOPs (§5.3), the indexer's memory roofline (the pooled-key bytes it read ÷
// the read bandwidth measured in the same run) and, for int8 keys, its compute bound (its multiply-adds ÷ the int8
// peak of its kernel, VNNI or AMX, measured in the same run). It prints figures and never fails on a time.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "base/table.h"
#include "base/timer.h"
#include "base/worker_pool.h"
#include "bench/stats.h"
#include "cli/command.h"
#include "cli/model_flags.h"
#include "engine/capacity.h"
#include "fast/fast_model.h"
#include "kernels/machine_limits.h"
#include "model/forward_common.h"
#include "quant/kv_rows.h"

namespace glint::cli {
namespace {

struct BenchContextFlags {
  ModelFlag model;
  int threads = 0;
  std::vector<std::string> contexts = {"2K", "8K", "32K", "128K", "512K", "1M"};
  std::string kv_cache_dtype = "fp32";
  std::string mla_attention;  // --mla-attention (empty: fp32)
  std::string max_cache = "16G";
  int64_t steps = 5;
  int64_t probe_mib = 256;
};

// The study's §5.3 prediction: the indexer's FLOPs as a share of the MoE FLOPs per token, on the released model.
const std::map<int64_t, double> kStudyShare = {
    {8 << 10, 0.006}, {32 << 10, 0.022}, {128 << 10, 0.088}, {1 << 20, 0.707}};

// "2K" → 2048, "1M" → 1048576, "5000" → 5000 (powers of 1024, as the study's context lengths).
Result<int64_t> ParseContext(const std::string& text) {
  GLINT_ASSIGN_OR_RETURN(const int64_t bytes, ParseByteSize(text));
  if (bytes <= 0) return InvalidArgument("--contexts entry '", text, "' must be a positive length");
  return bytes;
}

using bench::Median;

// A standard-normal-ish value from a counter (sum of 4 uniforms, centred and scaled): cheap, deterministic.
float SyntheticValue(uint64_t counter) {
  uint64_t x = counter * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  float sum = 0;
  for (int i = 0; i < 4; ++i) {
    x ^= x >> 31, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 27;
    sum += static_cast<float>(x >> 40) * (1.0f / (1 << 24));
  }
  return (sum - 2.0f) * 1.7320508f;  // variance of a sum of 4 U(0,1) is 1/3
}

// Random latents for positions [0, tokens) and pooled keys for their complete pools, in every DSA layer.
void FillSynthetically(const Model& model, const SequenceState& state, int64_t tokens, WorkerPool& pool) {
  const ModelConfig& c = model.config();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.attention_kinds[l] != AttentionKind::kDsa) continue;
    const DsaCache cache = DsaLayerCache(state, l);
    const uint64_t seed = static_cast<uint64_t>(l) << 48;
    pool.ParallelFor(tokens, 4096, [&](int64_t begin, int64_t end, int) {
      std::vector<float> row(std::max(c.kv_lora_rank, c.index_head_dim));
      for (int64_t p = begin; p < end; ++p) {
        for (int64_t i = 0; i < c.kv_lora_rank; ++i) row[i] = SyntheticValue(seed + p * 1024 + i);
        cache.StoreLatent(p, row.data());
        if (p % c.index_kpool != c.index_kpool - 1) continue;
        for (int64_t i = 0; i < c.index_head_dim; ++i) row[i] = SyntheticValue(seed + (1ull << 40) + p * 1024 + i);
        cache.StorePooledKey(p / c.index_kpool, row.data());
      }
    });
  }
}

struct ContextFigures {
  double step = 0, indexer = 0, key_bytes = 0;
};

// What bounds the indexer from below: its key bytes at the measured read bandwidth, and for int8 keys its
// multiply-adds (index_n_heads × index_head_dim per pool scored, 2 operations each) at the int8 peak of the
// kernel that scores them (the AMX peak where it runs, else VNNI's). fp32 / bf16 / fp8 keys run fp32 products,
// whose peak is not probed: no compute bound is printed for them.
struct IndexerBounds {
  double bandwidth = 0;  // bytes/s
  double int8_ops = 0;   // operations/s, 0 when not applicable
  KvCacheDtype dtype = KvCacheDtype::kFloat32;
  int64_t heads = 0, dim = 0;

  double Memory(const ContextFigures& f) const { return f.key_bytes / bandwidth; }
  double Compute(double key_bytes) const {
    if (int8_ops <= 0 || dtype != KvCacheDtype::kInt8) return 0;
    const double pools = key_bytes / static_cast<double>(KvRowBytes(dtype, dim));
    return 2.0 * pools * static_cast<double>(heads * dim) / int8_ops;
  }
};

// Times `steps` decode steps (after one warm-up) at context `context`; nullopt-like {} with a message when the
// caches do not fit max_cache_bytes.
Result<ContextFigures> MeasureContext(const FastModel& model, const std::shared_ptr<const CacheLayout>& layout,
                                      int64_t context, int64_t steps, int64_t max_cache_bytes, WorkerPool& pool) {
  const ModelConfig& c = model.config();
  const int64_t b = layout->block_tokens();
  const int64_t blocks_needed = (context + steps + 1 + b - 1) / b;
  const int64_t bytes = blocks_needed * layout->block_bytes + layout->slot_bytes;
  std::printf(
      "-- context %lld: %s of cache (%lld blocks × %s, %lld DSA layers, %s); filling it synthetically with "
      "random latents and pooled keys (no prefill; KDA state zeros)\n",
      static_cast<long long>(context), FormatBinaryBytes(bytes).c_str(), static_cast<long long>(blocks_needed),
      FormatBinaryBytes(layout->block_bytes).c_str(), static_cast<long long>(c.NumLayersOf(AttentionKind::kDsa)),
      std::string(KvCacheDtypeName(layout->options.kv_dtype)).c_str());
  if (bytes > max_cache_bytes) {
    return ResourceExhausted("context ", context, " needs ", FormatBinaryBytes(bytes), " of cache, over --max-cache ",
                             FormatBinaryBytes(max_cache_bytes), "; use a compact --kv-cache-dtype or raise it");
  }
  GLINT_ASSIGN_OR_RETURN(ItemArena blocks, ItemArena::Fixed(blocks_needed, layout->block_bytes));
  GLINT_ASSIGN_OR_RETURN(ItemArena slot, ItemArena::Fixed(1, layout->slot_bytes));
  std::memset(slot.Item(0), 0, layout->slot_bytes);
  std::vector<int32_t> table(blocks_needed);
  for (int64_t i = 0; i < blocks_needed; ++i) table[i] = static_cast<int32_t>(i);
  SequenceState state = model.BindSequence(layout, {&blocks, &table, slot.Item(0)}, context);
  Stopwatch fill;
  FillSynthetically(model, state, context, pool);
  std::printf("   filled in %.1f s\n", fill.Seconds());
  ContextFigures figures;
  std::vector<double> step, indexer;
  std::vector<EntryOutput> outputs;
  for (int64_t s = 0; s <= steps; ++s) {
    const int32_t token = static_cast<int32_t>((context * 31 + s * 7919) % c.vocab_size);
    const BatchEntry entry{std::span<const int32_t>(&token, 1), &state, LogitsWanted::kLast, false};
    Stopwatch watch;
    GLINT_RETURN_IF_ERROR(model.Forward({&entry, 1}, outputs));
    if (s == 0) continue;  // warm-up: first touch of scratch buffers
    step.push_back(watch.Seconds());
    indexer.push_back(model.last_step().indexer_seconds);
    figures.key_bytes = static_cast<double>(model.last_step().indexer_key_bytes);
  }
  figures.step = Median(step);
  figures.indexer = Median(indexer);
  return figures;
}

struct MeasuredContext {
  int64_t filled = 0;  // positions in the cache: the requested context, less the decode steps at the maximum
  ContextFigures figures;
};

// The two targets (#15 item 2), each with its verdict, from the contexts measured (by requested context):
// step(128K) ≤ 1.3 × step(2K) when both ran, and the indexer ≥ 0.7 of its memory roofline at the deepest context
// (1M on the release config, filled to max_position_embeddings − the decode steps; the line says so).
void PrintTargets(const std::map<int64_t, MeasuredContext>& measured, const IndexerBounds& bounds) {
  const auto at_2k = measured.find(2048), at_128k = measured.find(128 << 10);
  if (at_2k != measured.end() && at_128k != measured.end()) {
    const double ratio = at_128k->second.figures.step / at_2k->second.figures.step;
    std::printf("target step(128K) ≤ 1.3 × step(2K): %.2f× — %s\n", ratio, ratio <= 1.3 ? "met" : "NOT met");
  }
  if (measured.empty()) return;
  const auto& [requested, deepest] = *measured.rbegin();
  const ContextFigures& f = deepest.figures;
  const double memory = bounds.Memory(f), fraction = f.indexer > 0 ? memory / f.indexer : 0.0;
  const std::string filled = deepest.filled == requested ? "" : StrCat(" (filled to ", deepest.filled, " positions)");
  std::printf("target indexer ≥ 0.7 of its memory roofline at the deepest context, %lld%s: %.2f — %s\n",
              static_cast<long long>(requested), filled.c_str(), fraction, fraction >= 0.7 ? "met" : "NOT met");
  const double compute = bounds.Compute(f.key_bytes);
  if (compute > 0 && f.indexer > 0) {
    // Above the memory roofline's 1/0.7 the target is out of reach at this peak, whatever the kernel does.
    std::printf(
        "   its multiply-adds at the measured int8 peak take %.3f ms = %.1f× the memory roofline (%s); the "
        "indexer is at %.2f of that compute bound\n",
        1e3 * compute, compute / memory,
        compute > memory / 0.7 ? "compute-bound: 0.7 of the memory roofline is out of reach on this CPU"
                               : "0.7 of the memory roofline is within this CPU's peak",
        compute / f.indexer);
  }
}

// The contexts to fill: each requested one, or less at the model's maximum. The last position must exist: at the
// model's maximum (1M on the release config) the fill stops short by the decode steps, which changes the indexer's
// work by steps/context (< 0.001%).
Result<std::vector<int64_t>> FilledContexts(const std::vector<int64_t>& contexts, const ModelConfig& c, int64_t steps) {
  const int64_t room = c.max_position_embeddings - (steps + 1);
  if (room < 1) {
    return InvalidArgument("--steps ", steps, " leaves no context within max_position_embeddings ",
                           c.max_position_embeddings);
  }
  std::vector<int64_t> filled = contexts;
  for (int64_t& context : filled) {
    if (context > room) {
      std::printf(
          "   context %lld: filled to %lld so that its %lld decode steps stay within max_position_embeddings "
          "%lld\n",
          static_cast<long long>(context), static_cast<long long>(room), static_cast<long long>(steps) + 1,
          static_cast<long long>(c.max_position_embeddings));
      context = room;
    }
  }
  return filled;
}

// One row per context: the step, the indexer's share, its roofline and compute bounds. Contexts that cannot be
// measured (a cache above --max-cache) are skipped with the reason. Returns the measured ones by requested context.
std::map<int64_t, MeasuredContext> MeasureContexts(const FastModel& model,
                                                   const std::shared_ptr<const CacheLayout>& layout,
                                                   const BenchContextFlags& flags, const std::vector<int64_t>& contexts,
                                                   const std::vector<int64_t>& filled, const IndexerBounds& bounds,
                                                   int64_t max_cache, WorkerPool& pool) {
  std::map<int64_t, MeasuredContext> measured;  // by the requested context
  std::printf("%9s %10s %8s %11s %9s %12s %12s %11s %10s %11s\n", "context", "ms/step", "×first", "indexer ms", "share",
              "study share", "keys MB", "roofline ms", "of roofl.", "compute ms");
  double first_step = 0;
  for (size_t i = 0; i < contexts.size(); ++i) {
    const int64_t context = filled[i];
    Result<ContextFigures> f = MeasureContext(model, layout, context, flags.steps, max_cache, pool);
    if (!f.ok()) {
      std::printf("   skipped: %s\n", f.status().ToString().c_str());
      continue;
    }
    measured[contexts[i]] = {context, f.value()};
    if (first_step == 0) first_step = f->step;
    const auto study = kStudyShare.find(contexts[i]);
    const std::string study_text = study == kStudyShare.end() ? "—" : StrCat(100 * study->second, "%");
    const double roofline = bounds.Memory(*f), compute = bounds.Compute(f->key_bytes);
    const std::string compute_text = compute > 0 ? StrCat(std::round(1e6 * compute) / 1e3) : "—";
    std::printf("%9lld %10.2f %8.2f %11.3f %8.1f%% %12s %12.1f %11.3f %9.0f%% %11s\n", static_cast<long long>(context),
                1e3 * f->step, f->step / first_step, 1e3 * f->indexer, 100 * f->indexer / f->step, study_text.c_str(),
                f->key_bytes / 1e6, 1e3 * roofline, f->indexer > 0 ? 100 * roofline / f->indexer : 0.0,
                compute_text.c_str());
  }
  std::printf(
      "   (study share: the indexer's FLOPs as a share of the MoE FLOPs on the released model, §5.3; share: "
      "measured share of this step's time; of roofl.: key bytes ÷ bandwidth ÷ indexer time; compute ms: int8 "
      "keys' multiply-adds ÷ the int8 peak)\n");
  return measured;
}

Status RunBenchContext(const BenchContextFlags& flags) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const int threads = flags.threads > 0 ? flags.threads : static_cast<int>(std::thread::hardware_concurrency());
  WorkerPool pool(threads);
  GLINT_ASSIGN_OR_RETURN(const KvCacheDtype dtype, ParseKvCacheDtype(flags.kv_cache_dtype));
  GLINT_ASSIGN_OR_RETURN(const int64_t max_cache, ParseByteSize(flags.max_cache));
  std::vector<int64_t> contexts;
  for (const std::string& text : flags.contexts) {
    GLINT_ASSIGN_OR_RETURN(const int64_t context, ParseContext(text));
    contexts.push_back(context);
  }
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<Model> loaded,
                         LoadFastModel(flags.model, pool, "", {}, {}, flags.mla_attention));
  const auto* model = dynamic_cast<const FastModel*>(&Unwrapped(*loaded));
  if (model == nullptr) return FailedPrecondition("bench-context needs the fast path on one rank (no mpirun)");
  const ModelConfig& c = model->config();
  GLINT_ASSIGN_OR_RETURN(const std::vector<int64_t> filled, FilledContexts(contexts, c, flags.steps));
  MachineProbeOptions probe;
  probe.array_bytes = flags.probe_mib << 20;
  const MachineLimits limits = MeasureMachineLimits(pool, probe);
  const double int8_peak = Int8PeakFor(limits, model->isa(), /*one_thread=*/threads == 1);
  const IndexerBounds bounds{limits.read_gbps_all_threads * 1e9, int8_peak * 1e9, dtype, c.index_n_heads,
                             c.index_head_dim};
  const std::string peak_text = dtype == KvCacheDtype::kInt8 && int8_peak > 0
                                    ? StrCat(", int8 ", model->isa() == Isa::kAmx ? "AMX" : "VNNI", " peak ",
                                             static_cast<int64_t>(int8_peak), " GOPS")
                                    : "";
  std::printf(
      "== bench-context: %d threads, read bandwidth %.1f GB/s%s (measured now), kv cache %s, one sequence, "
      "median of %lld steps\n",
      threads, limits.read_gbps_all_threads, peak_text.c_str(), flags.kv_cache_dtype.c_str(),
      static_cast<long long>(flags.steps));
  CacheOptions options;
  options.kv_dtype = dtype;
  GLINT_ASSIGN_OR_RETURN(CacheLayout made, model->CacheLayoutFor(options));
  const auto layout = std::make_shared<const CacheLayout>(std::move(made));
  PrintTargets(MeasureContexts(*model, layout, flags, contexts, filled, bounds, max_cache, pool), bounds);
  return Status::Ok();
}

GLINT_REGISTER_COMMAND("bench-context",
                       "Decode cost by context length on synthetically filled caches (indexer share, roofline)", 86,
                       [](CLI::App& command) -> std::function<Status()> {
                         auto flags = std::make_shared<BenchContextFlags>();
                         AddModelFlag(command, flags->model);
                         command.add_option("--threads", flags->threads, "worker threads (default: all cores)");
                         AddMlaAttentionFlag(command, flags->mla_attention);
                         command.add_option("--contexts", flags->contexts, "context lengths (K = 1024, M = 1024²)")
                             ->delimiter(',')
                             ->capture_default_str();
                         command
                             .add_option("--kv-cache-dtype", flags->kv_cache_dtype,
                                         "storage of the MLA latents and pooled indexer keys: fp32, bf16, fp8 or int8")
                             ->check(CLI::IsMember({"fp32", "bf16", "fp8", "int8"}))
                             ->capture_default_str();
                         command
                             .add_option(
                                 "--max-cache", flags->max_cache,
                                 "largest cache to allocate for one context (a longer one is skipped with its size)")
                             ->capture_default_str();
                         command.add_option("--steps", flags->steps, "timed decode steps per context")
                             ->capture_default_str()
                             ->check(CLI::Range(1, 1000));
                         command.add_option("--probe-mib", flags->probe_mib, "MiB per bandwidth-probe array")
                             ->capture_default_str()
                             ->check(CLI::Range(1, 1 << 16));
                         return [flags] { return RunBenchContext(*flags); };
                       });

}  // namespace
}  // namespace glint::cli
