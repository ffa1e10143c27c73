// Kernel benchmarks with ratios to this machine's limits measured at start-up in the same run.
//
//   cmake --build --preset release --target glint_kernel_bench
//   build/release/bench/glint_kernel_bench [--benchmark_filter=Linear] [--benchmark_repetitions=5]
//
// Counters: GB/s = weight bytes streamed per second (codes + scales); bw = GB/s ÷ triad bandwidth at the same
// thread count; GOPS = 2 · rows · cols · tokens per second; peak = GOPS ÷ the VNNI loop's GOPS at the same thread
// count (÷ the AMX loop's for isa:3, the AMX level, and isa:4–7, its tiles at every token count in each walk; isa:8
// is the AVX-512 level with its tile walk at every token count, the Lanes benchmarks' baseline). Decode shapes
// (1–16 tokens) are judged by bw, prefill shapes (hundreds of tokens) by peak.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/worker_pool.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_i4.h"
#include "kernels/gemm_i8.h"
#include "kernels/indexer_ops.h"
#include "kernels/kda_ops.h"
#include "kernels/linear.h"
#include "kernels/linear_probe.h"
#include "kernels/machine_limits.h"
#include "kernels/mla_ops.h"
#include "kernels/vector_ops.h"
#include "model/indexer.h"
#include "quant/bf16_matrix.h"
#include "quant/formats.h"

namespace glint {
namespace {

MachineLimits g_limits;

WorkerPool& Pool(int threads) {
  static std::map<int, std::unique_ptr<WorkerPool>> pools;
  auto& pool = pools[threads];
  if (!pool) pool = std::make_unique<WorkerPool>(threads);
  return *pool;
}

double TriadFor(int threads) { return threads == 1 ? g_limits.triad_gbps_one_thread : g_limits.triad_gbps_all_threads; }
// The int8 peak a product is judged by: the AMX loop's for the AMX level, the VNNI loop's otherwise.
double PeakFor(int threads, Isa isa) { return Int8PeakFor(g_limits, isa, threads == 1); }

// The `isa` argument values that run the AMX tile kernel at every token count (the AMX level's table hands products
// of fewer than kAmxMinTokens tokens to VNNI): 4–7 are the walks of gemm_i8.h AmxWalk in order; the engine's
// (kEngineAmxWalk, 7) is the one the Threshold benchmarks compare with avx512 to measure R.
constexpr int kAmxTilesAlways = 4, kAmxLastWalk = kAmxTilesAlways + 3;
constexpr int kAmxEngineWalk = kAmxTilesAlways + static_cast<int>(internal::kEngineAmxWalk);
bool IsAmxTilesAlways(int64_t isa_arg) { return isa_arg >= kAmxTilesAlways && isa_arg <= kAmxLastWalk; }
template <internal::AmxWalk kWalk>
const Int8Kernels& AmxWalkKernels() {
  static const Int8Kernels kernels{
      GetInt8Kernels(Isa::kAmx).quantize,
      [](const Int8MatrixView& w, const QuantizedActivations& x, int64_t begin, int64_t end, float* y,
         int64_t y_stride) { internal::Int8GemmAmxTiles(w, x, begin, end, y, y_stride, AmxTiles::kHardware, kWalk); },
      [](const Int8MatrixView& w, const QuantizedActivations& x, int64_t begin, int64_t end, int32_t* sums) {
        internal::Int8GroupSumsAmxTiles(w, x, begin, end, sums, AmxTiles::kHardware, kWalk);
      }};
  return kernels;
}
// isa:8 runs the AVX-512 level with its tile walk at every token count: the baseline the lane walk (gemm_i8.h,
// kLanesMinTokens–kLanesMaxTokens tokens) is timed against in the Lanes benchmarks.
constexpr int kAvx512TilesAlways = kAmxLastWalk + 1;
internal::AmxWalk AmxWalkOf(int64_t isa_arg) { return static_cast<internal::AmxWalk>(isa_arg - kAmxTilesAlways); }
const Int8Kernels& AmxTilesAlways(int64_t isa_arg) {
  switch (AmxWalkOf(isa_arg)) {
    case internal::AmxWalk::kRowGroups:
      return AmxWalkKernels<internal::AmxWalk::kRowGroups>();
    case internal::AmxWalk::kZeroStart:
      return AmxWalkKernels<internal::AmxWalk::kZeroStart>();
    case internal::AmxWalk::kRowGroupsZeroStart:
      return AmxWalkKernels<internal::AmxWalk::kRowGroupsZeroStart>();
    case internal::AmxWalk::kTokenPairsOuter:
      break;
  }
  return AmxWalkKernels<internal::AmxWalk::kTokenPairsOuter>();
}

std::vector<float> RandomActivations(int64_t n) {
  std::vector<float> x(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);
  return x;
}

// Args: rows, cols, tokens, threads, isa, group.
void BM_LinearI8(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), tokens = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const bool tiles_always = IsAmxTilesAlways(state.range(4));
  const bool avx512_tiles = state.range(4) == kAvx512TilesAlways;
  const Isa isa = tiles_always ? Isa::kAmx : avx512_tiles ? Isa::kAvx512 : static_cast<Isa>(state.range(4));
  const int64_t group = state.range(5);
  if (!IsaSupported(isa)) {
    state.SkipWithError("ISA not supported");
    return;
  }
  // Decode streams weights from memory, never from cache: cycle through enough copies to exceed the last-level
  // cache 4× (a 4096² int8 matrix alone is 16 MiB and would sit in a 32 MiB L3).
  static std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<Int8Matrix>> cache;  // built once
  auto key = std::make_tuple(rows, cols, group);
  if (!cache.count(key)) {
    const int64_t bytes = Int8Layout{rows, cols, group}.code_bytes();
    const int64_t copies = std::max<int64_t>(1, (int64_t{128} << 20) / bytes + 1);
    for (int64_t i = 0; i < copies; ++i) cache[key].push_back(RandomInt8Matrix(rows, cols, group));
  }
  const std::vector<Int8Matrix>& matrices = cache.at(key);
  const Int8Matrix& w = matrices[0];
  size_t next = 0;
  const std::vector<float> x = RandomActivations(tokens * cols);
  std::vector<float> y(tokens * rows);
  ActivationScratch scratch;
  WorkerPool& pool = Pool(threads);
  const Int8Kernels& kernels = tiles_always   ? AmxTilesAlways(state.range(4))
                               : avx512_tiles ? internal::Int8KernelsAvx512Tiles()
                                              : GetInt8Kernels(isa);
  for (auto _ : state) {
    LinearI8(pool, kernels, matrices[next].view(), x.data(), cols, tokens, y.data(), rows, scratch);
    next = (next + 1) % matrices.size();
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(w.layout().code_bytes() + w.layout().scale_count() * 4);
  const double ops = 2.0 * rows * cols * tokens;
  state.counters["GB/s"] = benchmark::Counter(bytes * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["GOPS"] = benchmark::Counter(ops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(tiles_always ? "amx tiles at every token count, walk " +
                                    std::string(internal::AmxWalkName(AmxWalkOf(state.range(4))))
                 : avx512_tiles ? "avx512, tile walk at every token count"
                                : std::string(IsaName(isa)));
}

// Int4 experts (W4A8, gemm_i4.h) at the expert shapes: gate+up [4096, 4096] and down [4096, 2048]. Args: rows,
// cols, tokens, threads, isa, group. GB/s counts the int4 bytes (half the int8 codes + scales), so a memory-bound
// decode shows the same GB/s as int8 and half the time.
void BM_LinearI4(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), tokens = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const Isa isa = static_cast<Isa>(state.range(4));
  const int64_t group = state.range(5);
  if (!IsaSupported(isa)) {
    state.SkipWithError("ISA not supported");
    return;
  }
  static std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<Int4Matrix>> cache;  // built once
  auto key = std::make_tuple(rows, cols, group);
  if (!cache.count(key)) {
    const Int4Layout layout{rows, cols, group};
    const int64_t copies = std::max<int64_t>(1, (int64_t{128} << 20) / layout.code_bytes() + 1);
    uint64_t random = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < copies; ++i) {
      Int4Matrix m(layout);
      for (int64_t b = 0; b < layout.code_bytes(); ++b) {
        random ^= random << 13, random ^= random >> 7, random ^= random << 17;
        m.codes()[b] = static_cast<uint8_t>(random);
      }
      for (int64_t j = 0; j < layout.scale_count(); ++j) m.scales()[j] = 0.01f;
      cache[key].push_back(std::move(m));
    }
  }
  const std::vector<Int4Matrix>& matrices = cache.at(key);
  const Int4Layout& layout = matrices[0].layout();
  size_t next = 0;
  const std::vector<float> x = RandomActivations(tokens * cols);
  std::vector<float> y(tokens * rows);
  ActivationScratch scratch;
  WorkerPool& pool = Pool(threads);
  for (auto _ : state) {
    LinearI4(pool, GetInt8Kernels(isa), GetInt4Kernels(isa), matrices[next].view(), x.data(), cols, tokens, y.data(),
             rows, scratch);
    next = (next + 1) % matrices.size();
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(layout.code_bytes() + layout.scale_count() * 4);
  state.counters["GB/s"] = benchmark::Counter(bytes * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["GOPS"] =
      benchmark::Counter(2.0 * rows * cols * tokens * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(IsaName(isa)));
}

void Int4Args(benchmark::internal::Benchmark* b) {
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 2048}}) {
    for (int64_t tokens : {1, 512}) {
      for (int64_t group : {32, 64, 128}) b->Args({rows, cols, tokens, all, static_cast<int>(Isa::kAvx512), group});
    }
  }
  b->Args({4096, 4096, 1, all, static_cast<int>(Isa::kAvx2), 64});
  b->Args({4096, 4096, 512, all, static_cast<int>(Isa::kAvx2), 64});
}

BENCHMARK(BM_LinearI4)
    ->Name("LinearI4")
    ->Apply(Int4Args)
    ->ArgNames({"rows", "cols", "tokens", "threads", "isa", "group"})
    ->UseRealTime();

// Ratios are computed after the run from the rates (Google Benchmark has no derived counters); see main().
void DecodeArgs(benchmark::internal::Benchmark* b) {
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  // (rows, cols): expert gate+up and down, KDA q/k/v fused, KDA o_proj, dense down, lm_head.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096},
                            {4096, 2048},
                            {24576, 4096},
                            {4096, 8192},
                            {4096, 12288},
                            {154880, 4096}}) {
    for (int64_t tokens : {1, 4, 16}) {
      for (int threads : {1, all}) b->Args({rows, cols, tokens, threads, static_cast<int>(Isa::kAvx512), 128});
    }
  }
  // Group size and ISA comparisons on one shape.
  for (int64_t group : {32, 64, 256}) b->Args({4096, 4096, 1, all, static_cast<int>(Isa::kAvx512), group});
  b->Args({4096, 4096, 1, all, static_cast<int>(Isa::kAvx2), 128});
  // The AMX level on the batched-decode shapes (16 tokens: one 16-token tile).
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096}, {24576, 4096}}) {
    for (int64_t tokens : {4, 16}) b->Args({rows, cols, tokens, all, static_cast<int>(Isa::kAmx), 128});
  }
}

// R, the token count from which the AMX tiles beat VNNI (kAmxMinTokens): both at 1–64 tokens on a weight that
// streams from memory (gate+up) and on one that stays in L2 (an expert's down share).
void ThresholdArgs(benchmark::internal::Benchmark* b) {
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096}, {512, 2048}}) {
    for (int64_t tokens : {1, 2, 4, 6, 8, 12, 16, 24, 32, 64}) {
      for (int isa : {static_cast<int>(Isa::kAvx512), kAmxEngineWalk}) b->Args({rows, cols, tokens, all, isa, 128});
    }
  }
}

void PrefillArgs(benchmark::internal::Benchmark* b) {
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 2048}, {24576, 4096}, {4096, 8192}}) {
    for (int threads : {1, all}) b->Args({rows, cols, 512, threads, static_cast<int>(Isa::kAvx512), 128});
  }
  for (int64_t group : {32, 64, 256}) b->Args({4096, 4096, 512, all, static_cast<int>(Isa::kAvx512), group});
  // One expert's share of a 512-token prefill (8 of 64 experts a token): gate+up, then down.
  for (int threads : {1, all}) {
    b->Args({4096, 4096, 64, threads, static_cast<int>(Isa::kAvx512), 128});
    b->Args({4096, 2048, 64, threads, static_cast<int>(Isa::kAvx512), 128});
  }
  b->Args({4096, 4096, 512, all, static_cast<int>(Isa::kAvx2), 128});
  // AMX against AVX-512 on the same shapes, and at the 4,096-token prompt.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 2048}, {24576, 4096}, {4096, 8192}}) {
    for (int threads : {1, all}) b->Args({rows, cols, 512, threads, static_cast<int>(Isa::kAmx), 128});
  }
  b->Args({4096, 4096, 64, all, static_cast<int>(Isa::kAmx), 128});
  for (int isa : {static_cast<int>(Isa::kAvx512), static_cast<int>(Isa::kAmx)}) {
    b->Args({4096, 4096, 4096, all, isa, 128});
  }
  // The walks (4–7, the engine's is 7) against each other on the prefill shapes, an expert's share and the batched
  // decode tile (one thread: the whole matrix one call, where row groups matter most).
  for (int walk = kAmxTilesAlways; walk <= kAmxLastWalk; ++walk) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096}, {24576, 4096}, {4096, 8192}}) {
      for (int threads : {1, all}) b->Args({rows, cols, 512, threads, walk, 128});
    }
    b->Args({4096, 4096, 64, all, walk, 128});
    b->Args({4096, 4096, 16, all, walk, 128});
  }
}

BENCHMARK(BM_LinearI8)
    ->Name("Decode/LinearI8")
    ->Apply(DecodeArgs)
    ->ArgNames({"rows", "cols", "tokens", "threads", "isa", "group"})
    ->UseRealTime();
BENCHMARK(BM_LinearI8)
    ->Name("Threshold/LinearI8")
    ->Apply(ThresholdArgs)
    ->ArgNames({"rows", "cols", "tokens", "threads", "isa", "group"})
    ->UseRealTime();
// The AVX-512 lane walk (isa:2 in its token range, gemm_i8.h kLanesMinTokens–kLanesMaxTokens) against the tile
// walk (isa:8): batched decode's dense products (16 tokens), partial lane tiles and tails (20–28, 40), the range's
// ends, and an expert's share of a 512-token prefill (≈ 64 tokens), which the tiles keep.
void LanesArgs(benchmark::internal::Benchmark* b) {
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 2048}, {24576, 4096}}) {
    for (int64_t tokens : {8, 12, 16, 20, 24, 28, 32, 40, 48, 64}) {
      for (int isa : {static_cast<int>(Isa::kAvx512), kAvx512TilesAlways}) b->Args({rows, cols, tokens, all, isa, 128});
    }
  }
  for (int isa : {static_cast<int>(Isa::kAvx512), kAvx512TilesAlways}) b->Args({4096, 4096, 16, 1, isa, 128});
}

BENCHMARK(BM_LinearI8)
    ->Name("Lanes/LinearI8")
    ->Apply(LanesArgs)
    ->ArgNames({"rows", "cols", "tokens", "threads", "isa", "group"})
    ->UseRealTime();
BENCHMARK(BM_LinearI8)
    ->Name("Prefill/LinearI8")
    ->Apply(PrefillArgs)
    ->ArgNames({"rows", "cols", "tokens", "threads", "isa", "group"})
    ->UseRealTime();

// bf16 weights × fp32 activations (router, indexer, KDA gates). Args: rows, cols, tokens, threads.
void BM_LinearBf16(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), tokens = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const Bf16Layout layout{rows, cols};
  std::vector<Bf16Matrix> matrices;  // enough copies to stream from memory
  const int64_t copies = std::max<int64_t>(1, (int64_t{128} << 20) / (layout.value_count() * 2) + 1);
  for (int64_t i = 0; i < copies; ++i) {
    matrices.emplace_back(layout);
    for (int64_t v = 0; v < layout.value_count(); ++v)
      matrices.back().values()[v] = static_cast<uint16_t>(0x3c00 + v % 97);
  }
  const std::vector<float> x = RandomActivations(tokens * cols);
  std::vector<float> y(tokens * rows);
  WorkerPool& pool = Pool(threads);
  const Bf16Kernels& kernels = GetBf16Kernels(BestIsa());
  size_t next = 0;
  for (auto _ : state) {
    LinearBf16(pool, kernels, matrices[next].view(), x.data(), cols, tokens, y.data(), rows);
    next = (next + 1) % matrices.size();
  }
  const double bytes = static_cast<double>(layout.value_count()) * 2;
  state.counters["GB/s"] = benchmark::Counter(bytes * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * rows * cols * tokens * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LinearBf16)
    ->Name("LinearBf16")
    ->ArgNames({"rows", "cols", "tokens", "threads"})
    ->Args({288, 4096, 1, 1})
    ->Args({4096, 1536, 1, 1})
    ->Args({4096, 1536, 512, 2})
    ->UseRealTime();

// The DSA indexer's int8 scoring at 1M positions (issue #15; docs/long-context.md): 262,144 pools × 32 heads ×
// 128 dims, 34.6 MB of key codes and scales (above any L3: streamed from DRAM), in blocks of 16 pools (the engine's
// 64-token blocks), spread over `threads` in chunks of 2,048 pools as FastSelectPools does. kernel: 0 Highway
// (AVX2 / AVX-512 int16 pairs), 1 VNNI (16 keys × 16 heads, broadcast keys), 2 AMX tiles. bw = GB/s ÷ triad: the
// kernel's memory roofline.
constexpr int64_t kIndexerPools = 262144, kIndexerHeads = 32, kIndexerDim = 128, kIndexerChunk = 2048;

void BM_IndexerInt8Scores(benchmark::State& state) {
  const int kernel = static_cast<int>(state.range(0)), threads = static_cast<int>(state.range(1));
  if ((kernel == 1 && !indexer::Int8VnniSupported(kIndexerDim)) ||
      (kernel == 2 && !indexer::Int8AmxSupported(kIndexerDim))) {
    state.SkipWithError(kernel == 1 ? "no AVX-512 VNNI" : "no AMX");
    return;
  }
  std::mt19937 rng(1);
  std::vector<int8_t> keys(kIndexerPools * kIndexerDim);
  for (int8_t& k : keys) k = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  std::vector<float> key_scales(kIndexerPools, 0.01f), query(kIndexerHeads * kIndexerDim), weights(kIndexerHeads);
  for (float& v : query) v = static_cast<float>(rng() % 1000) / 500.0f - 1.0f;
  for (float& v : weights) v = static_cast<float>(rng() % 1000) / 1000.0f;
  std::vector<int16_t> codes(query.size());
  std::vector<float> query_scales(kIndexerHeads), scores(kIndexerPools);
  indexer::QuantizeQuery(query.data(), kIndexerHeads, kIndexerDim, codes.data(), query_scales.data());
  std::vector<uint8_t> vnni(indexer::VnniQueryBytes(kIndexerHeads, kIndexerDim));
  indexer::PackQueryForVnni(codes.data(), kIndexerHeads, kIndexerDim, vnni.data());
  std::vector<int8_t> packed(indexer::AmxQueryBytes(kIndexerHeads, kIndexerDim));
  indexer::PackQueryForAmx(codes.data(), kIndexerHeads, kIndexerDim, packed.data());
  const float scale = 1.0f / std::sqrt(static_cast<float>(kIndexerDim));
  WorkerPool& pool = Pool(threads);
  const auto block = [&](int64_t m, int64_t n) {  // n pools from m, one block
    const int8_t* k = keys.data() + m * kIndexerDim;
    if (kernel == 1) {
      indexer::ScoresInt8Vnni(vnni.data(), query_scales.data(), weights.data(), k, key_scales.data() + m, n,
                              kIndexerHeads, kIndexerDim, scale, scores.data() + m);
    } else {
      indexer::ScoresInt8(codes.data(), query_scales.data(), weights.data(), k, key_scales.data() + m, n, kIndexerHeads,
                          kIndexerDim, scale, scores.data() + m);
    }
  };
  for (auto _ : state) {
    pool.Run(kIndexerPools / kIndexerChunk, [&](int64_t chunk, int) {
      const int64_t begin = chunk * kIndexerChunk;
      if (kernel == 2) {
        std::vector<indexer::Int8KeySpan> spans;
        for (int64_t m = begin; m < begin + kIndexerChunk; m += 16) {
          spans.push_back({keys.data() + m * kIndexerDim, key_scales.data() + m, 16});
        }
        indexer::ScoresInt8Amx(packed.data(), query_scales.data(), weights.data(), spans, kIndexerHeads, kIndexerDim,
                               scale, scores.data() + begin);
      } else {
        for (int64_t m = begin; m < begin + kIndexerChunk; m += 16) block(m, 16);
      }
    });
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(kIndexerPools) * (kIndexerDim + 4);
  state.counters["GB/s"] = benchmark::Counter(bytes * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_IndexerInt8Scores)
    ->Name("Indexer/Int8Scores/pools:262144/heads:32/dim:128")
    ->ArgNames({"kernel", "threads"})
    ->ArgsProduct({{0, 1, 2}, {1, 2}})
    ->UseRealTime();

// The same scoring over fp32 keys (kernel 0: 134 MB) and bf16 keys (kernel 1: 67 MB), the default and the
// half-size caches: indexer::ScoresFp32 / ScoresBf16, heads in lanes, fp32 multiply-adds.
void BM_IndexerFloatScores(benchmark::State& state) {
  const int kernel = static_cast<int>(state.range(0)), threads = static_cast<int>(state.range(1));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> keys(kernel == 0 ? kIndexerPools * kIndexerDim : 0), query(kIndexerHeads * kIndexerDim),
      weights(kIndexerHeads), scores(kIndexerPools);
  std::vector<uint16_t> bf16(kernel == 1 ? kIndexerPools * kIndexerDim : 0);
  for (float& v : keys) v = normal(rng);
  for (uint16_t& v : bf16) v = FloatToBf16(normal(rng));
  for (float& v : query) v = normal(rng);
  for (float& v : weights) v = std::fabs(normal(rng));
  std::vector<float> packed(indexer::Fp32QueryFloats(kIndexerHeads, kIndexerDim));
  indexer::PackQueryFp32(query.data(), weights.data(), kIndexerHeads, kIndexerDim, packed.data());
  const float scale = 1.0f / std::sqrt(static_cast<float>(kIndexerDim));
  WorkerPool& pool = Pool(threads);
  for (auto _ : state) {
    pool.Run(kIndexerPools / kIndexerChunk, [&](int64_t chunk, int) {
      for (int64_t m = chunk * kIndexerChunk; m < (chunk + 1) * kIndexerChunk; m += 16) {
        if (kernel == 0) {
          indexer::ScoresFp32(packed.data(), keys.data() + m * kIndexerDim, 16, kIndexerHeads, kIndexerDim, scale,
                              scores.data() + m);
        } else {
          indexer::ScoresBf16(packed.data(), bf16.data() + m * kIndexerDim, 16, kIndexerHeads, kIndexerDim, scale,
                              scores.data() + m);
        }
      }
    });
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(kIndexerPools) * kIndexerDim * (kernel == 0 ? 4 : 2);
  state.counters["GB/s"] = benchmark::Counter(bytes * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOPS"] = benchmark::Counter(
      2.0 * kIndexerPools * kIndexerHeads * kIndexerDim * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_IndexerFloatScores)
    ->Name("Indexer/FloatScores/pools:262144/heads:32/dim:128")
    ->ArgNames({"kernel", "threads"})
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->UseRealTime();

// The top-512 selection over 1M positions' 262,144 pool scores (ReLU'd normals), as the indexer's second half.
// method 0: SelectTopPoolsLinear (a key per pool, nth_element over all, one thread); 1: the fused threshold select
// (a TopKeyCollector per worker fed chunks of 2,048, then SelectTopPoolsFromKeys over their union).
void BM_IndexerSelect(benchmark::State& state) {
  const int method = static_cast<int>(state.range(0)), threads = static_cast<int>(state.range(1));
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> scores(kIndexerPools);
  for (float& v : scores) v = std::max(0.0f, normal(rng));
  std::vector<uint64_t> keys;
  std::vector<TopKeyCollector> collectors(threads);
  WorkerPool& pool = Pool(threads);
  for (auto _ : state) {
    PoolSelection selection;
    if (method == 0) {
      selection = SelectTopPoolsLinear(scores, 512, keys);
    } else {
      for (TopKeyCollector& c : collectors) c.Reset(513);
      pool.Run(kIndexerPools / kIndexerChunk, [&](int64_t chunk, int worker) {
        collectors[worker].Add(scores.data() + chunk * kIndexerChunk, chunk * kIndexerChunk, kIndexerChunk);
      });
      std::vector<uint64_t>& merged = collectors[0].keys();
      for (int w = 1; w < threads; ++w)
        merged.insert(merged.end(), collectors[w].keys().begin(), collectors[w].keys().end());
      selection = SelectTopPoolsFromKeys(scores, 512, merged);
    }
    benchmark::DoNotOptimize(selection.pools.data());
  }
}
BENCHMARK(BM_IndexerSelect)
    ->Name("Indexer/Select/pools:262144/k:512")
    ->ArgNames({"method", "threads"})
    ->Args({0, 1})
    ->Args({1, 1})
    ->Args({1, 2})
    ->UseRealTime();

// KDA decode step over `heads` heads: S is read twice and written once (GB/s counts 3 × 64 KiB a head). 64 heads
// (one layer of one sequence, 4 MiB) stay in L3; 1,024 (16 sequences' layer, 64 MiB) come from memory, as a batch's
// states do in decode.
void BM_KdaDecodeStep(benchmark::State& state) {
  const int64_t heads = state.range(0), d = 128;
  std::vector<float> S(heads * d * d, 0.01f), q(heads * d, 0.05f), k(heads * d, 0.05f), v(heads * d, 1.0f),
      g(heads * d, -0.1f), o(heads * d);
  for (auto _ : state) {
    for (int64_t h = 0; h < heads; ++h) {
      kda::DecodeStep(S.data() + h * d * d, q.data() + h * d, k.data() + h * d, v.data() + h * d, g.data() + h * d,
                      0.5f, d, d, o.data() + h * d);
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(3.0 * S.size() * 4 * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_KdaDecodeStep)->Name("KdaDecodeStep/d:128")->ArgName("heads")->Arg(64)->Arg(1024)->UseRealTime();

// KDA chunked form: one 64-token chunk of one head. FLOPs counted as the WY form's products (≈ 6 n d² + 2 n² d).
void BM_KdaChunk(benchmark::State& state) {
  const int64_t n = 64, d = 128;
  std::vector<float> S(d * d, 0.01f), q(n * d, 0.05f), k(n * d, 0.05f), v(n * d, 1.0f), g(n * d, -0.1f), beta(n, 0.5f),
      o(n * d), scratch(kda::ChunkScratchFloats(d, d));
  kda::ChunkArgs args;
  args.q = q.data(), args.k = k.data(), args.qk_stride = d, args.v = v.data(), args.v_stride = d;
  args.g = g.data(), args.g_stride = d, args.beta = beta.data(), args.beta_stride = 1, args.o = o.data();
  args.o_stride = d, args.n = n, args.dk = d, args.dv = d;
  for (auto _ : state) {
    kda::Chunk(S.data(), args, scratch.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPS"] = benchmark::Counter((6.0 * n * d * d + 2.0 * n * n * d) * 2 * state.iterations() / 1e9,
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_KdaChunk)->Name("KdaChunk/n:64/d:128")->UseRealTime();

// Absorbed MLA attention for one query: `heads` × rank 512 over `count` latent positions (all 64 heads in one call,
// 32 and 16 of the fp32 decode tasks of fast_dsa.cc, and 8: lanes left idle), fp32 (mla::Attend), with bf16 dot
// products (mla::AttendBf16, where the CPU has AVX512-BF16) and on AMX-BF16 tiles (mla::AttendBf16Amx, what bf16
// attention runs where the kernels are AMX and the CPU has AMX-BF16; 64 heads and 16, one head tile); skipped with
// a message where the CPU lacks what they need. MlaAttendBf16InPlace reads rows that are bf16 already (a
// `--kv-cache-dtype bf16` cache: no rounding of the rows in the call, mla::AttendBf16InPlace).
enum class AttendKernel { kFp32, kBf16, kBf16InPlace, kBf16Amx };
void BM_Attend(benchmark::State& state, int64_t heads, AttendKernel kernel) {
  if ((kernel == AttendKernel::kBf16 || kernel == AttendKernel::kBf16InPlace) && !mla::AttendBf16Supported()) {
    state.SkipWithError("this CPU has no AVX512-BF16");
    return;
  }
  if (kernel == AttendKernel::kBf16Amx && !AmxBf16UnavailableReason(AmxTiles::kHardware).empty()) {
    state.SkipWithError(std::string(AmxBf16UnavailableReason(AmxTiles::kHardware)).c_str());
    return;
  }
  const int64_t rank = 512, count = state.range(0);
  const int64_t scratch_floats = kernel == AttendKernel::kFp32   ? mla::AttendScratchFloats(heads, count, rank)
                                 : kernel == AttendKernel::kBf16 ? mla::AttendBf16ScratchFloats(heads, count, rank)
                                 : kernel == AttendKernel::kBf16InPlace
                                     ? mla::AttendBf16InPlaceScratchFloats(heads, count, rank)
                                     : mla::AttendBf16AmxScratchFloats(heads, count, rank);
  std::vector<float> latents(count * rank), q(heads * rank, 0.01f), out(heads * rank), scratch(scratch_floats);
  for (size_t i = 0; i < latents.size(); ++i) latents[i] = static_cast<float>(i % 13) * 0.01f;
  const float* page = latents.data();
  const mla::LatentRows rows{&page, count, rank};
  std::vector<int64_t> positions(count);
  for (int64_t i = 0; i < count; ++i) positions[i] = i;
  std::vector<uint16_t> bf16_latents(latents.size());
  for (size_t i = 0; i < latents.size(); ++i) bf16_latents[i] = FloatToBf16(latents[i]);
  const uint16_t* bf16_page = bf16_latents.data();
  const mla::LatentRowsBf16 bf16_rows{&bf16_page, count, rank};
  for (auto _ : state) {
    if (kernel == AttendKernel::kBf16InPlace) {
      mla::AttendBf16InPlace(q.data(), heads, rank, bf16_rows, positions.data(), count, 0.0625f, out.data(),
                             scratch.data());
    } else if (kernel == AttendKernel::kBf16Amx) {
      mla::AttendBf16Amx(q.data(), heads, rank, rows, positions.data(), count, 0.0625f, out.data(), scratch.data());
    } else {
      (kernel == AttendKernel::kBf16 ? mla::AttendBf16 : mla::Attend)(q.data(), heads, rank, rows, positions.data(),
                                                                      count, 0.0625f, out.data(), scratch.data());
    }
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(4.0 * heads * rank * count * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
void AttendPositions(benchmark::internal::Benchmark* b) {
  b->ArgName("positions")->Arg(256)->Arg(1024)->Arg(2051)->UseRealTime();
}
BENCHMARK_CAPTURE(BM_Attend, heads64, 64, AttendKernel::kFp32)
    ->Name("MlaAttend/heads:64/rank:512")
    ->Apply(AttendPositions);
BENCHMARK_CAPTURE(BM_Attend, heads32, 32, AttendKernel::kFp32)
    ->Name("MlaAttend/heads:32/rank:512")
    ->Apply(AttendPositions);
BENCHMARK_CAPTURE(BM_Attend, heads16, 16, AttendKernel::kFp32)
    ->Name("MlaAttend/heads:16/rank:512")
    ->Apply(AttendPositions);
BENCHMARK_CAPTURE(BM_Attend, heads8, 8, AttendKernel::kFp32)
    ->Name("MlaAttend/heads:8/rank:512")
    ->Apply(AttendPositions);
BENCHMARK_CAPTURE(BM_Attend, bf16_heads64, 64, AttendKernel::kBf16)
    ->Name("MlaAttendBf16/heads:64/rank:512")
    ->Apply(AttendPositions);
BENCHMARK_CAPTURE(BM_Attend, bf16_heads32, 32, AttendKernel::kBf16)
    ->Name("MlaAttendBf16/heads:32/rank:512")
    ->Apply(AttendPositions);
BENCHMARK_CAPTURE(BM_Attend, bf16_in_place_heads64, 64, AttendKernel::kBf16InPlace)
    ->Name("MlaAttendBf16InPlace/heads:64/rank:512")
    ->Apply(AttendPositions);
BENCHMARK_CAPTURE(BM_Attend, bf16_in_place_heads16, 16, AttendKernel::kBf16InPlace)
    ->Name("MlaAttendBf16InPlace/heads:16/rank:512")
    ->Apply(AttendPositions);
BENCHMARK_CAPTURE(BM_Attend, bf16_heads8, 8, AttendKernel::kBf16)
    ->Name("MlaAttendBf16/heads:8/rank:512")
    ->Apply(AttendPositions);
BENCHMARK_CAPTURE(BM_Attend, bf16_heads16, 16, AttendKernel::kBf16)
    ->Name("MlaAttendBf16/heads:16/rank:512")
    ->Apply(AttendPositions);
BENCHMARK_CAPTURE(BM_Attend, amx_heads64, 64, AttendKernel::kBf16Amx)
    ->Name("MlaAttendBf16Amx/heads:64/rank:512")
    ->Apply(AttendPositions);
BENCHMARK_CAPTURE(BM_Attend, amx_heads16, 16, AttendKernel::kBf16Amx)
    ->Name("MlaAttendBf16Amx/heads:16/rank:512")
    ->Apply(AttendPositions);

// Adds bw and peak ratios to every run's counters before printing.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> with_ratios = runs;
    for (Run& run : with_ratios) {
      const int threads = ThreadsOf(run.benchmark_name());
      if (run.counters.count("GB/s"))
        run.counters["bw"] = benchmark::Counter(run.counters["GB/s"].value / TriadFor(threads));
      const double peak = PeakFor(threads, IsaOf(run.benchmark_name()));
      if (run.counters.count("GOPS") && peak > 0) {
        run.counters["peak"] = benchmark::Counter(run.counters["GOPS"].value / peak);
      }
    }
    ConsoleReporter::ReportRuns(with_ratios);
  }

 private:
  // The isa argument of the run's name (amx tiles count as amx); benchmarks without one are judged by VNNI.
  static Isa IsaOf(const std::string& name) {
    const auto at = name.find("isa:");
    const int isa = at == std::string::npos ? static_cast<int>(Isa::kAvx512) : std::atoi(name.c_str() + at + 4);
    return IsAmxTilesAlways(isa) || isa == static_cast<int>(Isa::kAmx) ? Isa::kAmx : Isa::kAvx512;
  }
  static int ThreadsOf(const std::string& name) {
    const auto at = name.find("threads:");
    return at == std::string::npos ? 1 : std::atoi(name.c_str() + at + 8);
  }
};

}  // namespace
}  // namespace glint

int main(int argc, char** argv) {
  using namespace glint;
  benchmark::Initialize(&argc, argv);
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  g_limits = MeasureMachineLimits(Pool(all));
  std::printf(
      "machine limits (%d threads): triad %.1f GB/s (1 thread %.1f), read %.1f GB/s (1 thread %.1f), "
      "int8 VNNI peak %.0f GOPS (1 thread %.0f), AMX int8 peak %.0f GOPS (1 thread %.0f)%s%s\n",
      all, g_limits.triad_gbps_all_threads, g_limits.triad_gbps_one_thread, g_limits.read_gbps_all_threads,
      g_limits.read_gbps_one_thread, g_limits.int8_gops_all_threads, g_limits.int8_gops_one_thread,
      g_limits.amx_int8_gops_all_threads, g_limits.amx_int8_gops_one_thread,
      IsaSupported(Isa::kAmx) ? "" : ": no AMX, ", std::string(AmxUnavailableReason()).c_str());
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
