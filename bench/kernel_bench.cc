// Kernel benchmarks with ratios to this machine's limits measured at start-up in the same run.
//
//   cmake --build --preset release --target glint_kernel_bench
//   build/release/bench/glint_kernel_bench [--benchmark_filter=Linear] [--benchmark_repetitions=5]
//
// Counters: GB/s = weight bytes streamed per second (codes + scales); bw = GB/s ÷ triad bandwidth at the same
// thread count; GOPS = 2 · rows · cols · tokens per second; peak = GOPS ÷ the VNNI loop's GOPS at the same thread
// count. Decode shapes (1–16 tokens) are judged by bw, prefill shapes (hundreds of tokens) by peak.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "base/worker_pool.h"
#include "kernels/gemm_i8.h"
#include "kernels/linear.h"
#include "kernels/machine_limits.h"

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
double PeakFor(int threads) { return threads == 1 ? g_limits.int8_gops_one_thread : g_limits.int8_gops_all_threads; }

// Random codes and scales: the kernels' speed does not depend on the values.
Int8Matrix RandomInt8(int64_t rows, int64_t cols, int64_t group) {
  Int8Matrix m(Int8Layout{rows, cols, group});
  uint64_t state = 0x9e3779b97f4a7c15ull;
  uint8_t* codes = m.codes();
  for (int64_t i = 0; i < m.layout().code_bytes(); i += 8) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    for (int b = 0; b < 8; ++b) codes[i + b] = static_cast<uint8_t>(1 + ((state >> (8 * b)) & 0xff) % 255);
  }
  for (int64_t i = 0; i < m.layout().scale_count(); ++i) m.scales()[i] = 0.01f;
  return m;
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
  const Isa isa = static_cast<Isa>(state.range(4));
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
    for (int64_t i = 0; i < copies; ++i) cache[key].push_back(RandomInt8(rows, cols, group));
  }
  const std::vector<Int8Matrix>& matrices = cache.at(key);
  const Int8Matrix& w = matrices[0];
  size_t next = 0;
  const std::vector<float> x = RandomActivations(tokens * cols);
  std::vector<float> y(tokens * rows);
  ActivationScratch scratch;
  WorkerPool& pool = Pool(threads);
  const Int8Kernels& kernels = GetInt8Kernels(isa);
  for (auto _ : state) {
    LinearI8(pool, kernels, matrices[next].view(), x.data(), cols, tokens, y.data(), rows, scratch);
    next = (next + 1) % matrices.size();
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(w.layout().code_bytes() + w.layout().scale_count() * 4);
  const double ops = 2.0 * rows * cols * tokens;
  state.counters["GB/s"] = benchmark::Counter(bytes * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["GOPS"] = benchmark::Counter(ops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(IsaName(isa)));
}

// Ratios are computed after the run from the rates (Google Benchmark has no derived counters); see main().
void DecodeArgs(benchmark::internal::Benchmark* b) {
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  // (rows, cols): expert gate+up and down, KDA q/k/v fused, KDA o_proj, dense down, lm_head.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 2048}, {24576, 4096}, {4096, 8192},
                            {4096, 12288}, {154880, 4096}}) {
    for (int64_t tokens : {1, 4, 16}) {
      for (int threads : {1, all}) b->Args({rows, cols, tokens, threads, static_cast<int>(Isa::kAvx512), 128});
    }
  }
  // Group size and ISA comparisons on one shape.
  for (int64_t group : {32, 64, 256}) b->Args({4096, 4096, 1, all, static_cast<int>(Isa::kAvx512), group});
  b->Args({4096, 4096, 1, all, static_cast<int>(Isa::kAvx2), 128});
}

void PrefillArgs(benchmark::internal::Benchmark* b) {
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 2048}, {24576, 4096}, {4096, 8192}}) {
    for (int threads : {1, all}) b->Args({rows, cols, 512, threads, static_cast<int>(Isa::kAvx512), 128});
  }
  for (int64_t group : {32, 64, 256}) b->Args({4096, 4096, 512, all, static_cast<int>(Isa::kAvx512), group});
  b->Args({4096, 4096, 64, all, static_cast<int>(Isa::kAvx512), 128});  // one expert's share of a prefill
  b->Args({4096, 4096, 512, all, static_cast<int>(Isa::kAvx2), 128});
}

BENCHMARK(BM_LinearI8)->Name("Decode/LinearI8")->Apply(DecodeArgs)->ArgNames({"rows", "cols", "tokens", "threads", "isa", "group"})->UseRealTime();
BENCHMARK(BM_LinearI8)->Name("Prefill/LinearI8")->Apply(PrefillArgs)->ArgNames({"rows", "cols", "tokens", "threads", "isa", "group"})->UseRealTime();

// Adds bw and peak ratios to every run's counters before printing.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> with_ratios = runs;
    for (Run& run : with_ratios) {
      const int threads = ThreadsOf(run.benchmark_name());
      if (run.counters.count("GB/s")) run.counters["bw"] = benchmark::Counter(run.counters["GB/s"].value / TriadFor(threads));
      if (run.counters.count("GOPS") && PeakFor(threads) > 0) {
        run.counters["peak"] = benchmark::Counter(run.counters["GOPS"].value / PeakFor(threads));
      }
    }
    ConsoleReporter::ReportRuns(with_ratios);
  }

 private:
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
  std::printf("machine limits (%d threads): triad %.1f GB/s (1 thread %.1f), read %.1f GB/s (1 thread %.1f), "
              "int8 VNNI peak %.0f GOPS (1 thread %.0f)\n",
              all, g_limits.triad_gbps_all_threads, g_limits.triad_gbps_one_thread, g_limits.read_gbps_all_threads,
              g_limits.read_gbps_one_thread, g_limits.int8_gops_all_threads, g_limits.int8_gops_one_thread);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
