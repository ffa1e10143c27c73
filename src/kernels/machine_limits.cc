#include "kernels/machine_limits.h"

#include <algorithm>
#include <atomic>

#include "base/aligned_buffer.h"
#include "base/timer.h"

namespace glint {
namespace {

// Runs body(worker) on `threads` workers of the pool (threads ≤ pool.size()) and returns the wall time.
template <typename Body>
double TimeOnThreads(WorkerPool& pool, int threads, Body&& body) {
  Stopwatch watch;
  pool.Run(threads, [&](int64_t task, int) { body(static_cast<int>(task)); });
  return watch.Seconds();
}

}  // namespace

double MeasureTriadGbps(WorkerPool& pool, int threads, int64_t array_bytes, int repetitions) {
  threads = std::clamp(threads, 1, pool.size());
  const int64_t n = array_bytes / 4;
  AlignedBuffer a_buffer(n * 4), b_buffer(n * 4), c_buffer(n * 4);
  float *a = a_buffer.As<float>(), *b = b_buffer.As<float>(), *c = c_buffer.As<float>();
  const int64_t slice = (n + threads - 1) / threads / 16 * 16;  // whole 64-byte vectors per thread
  const bool avx512 = IsaSupported(Isa::kAvx512);
  // Touch every page from the thread that will use it before timing.
  TimeOnThreads(pool, threads, [&](int w) {
    for (int64_t i = w * slice; i < std::min(n, (w + 1) * slice); ++i) b[i] = 1.0f, c[i] = 2.0f, a[i] = 0.0f;
  });
  double best = 1e30;
  for (int rep = 0; rep < repetitions; ++rep) {
    const float s = 3.0f + rep;
    best = std::min(best, TimeOnThreads(pool, threads, [&](int w) {
                      const int64_t begin = w * slice, end = w + 1 == threads ? n : std::min(n, (w + 1) * slice);
                      int64_t i = begin;
                      if (avx512) {
                        internal::Triad(a + begin, b + begin, c + begin, s, (end - begin) / 16 * 16);
                        i = begin + (end - begin) / 16 * 16;
                      }
                      for (; i < end; ++i) a[i] = b[i] + s * c[i];
                    }));
  }
  volatile float sink = a[n / 2];
  (void)sink;
  return 3.0 * static_cast<double>(n) * 4 / best / 1e9;
}

double MeasureReadGbps(WorkerPool& pool, int threads, int64_t bytes, int repetitions) {
  threads = std::clamp(threads, 1, pool.size());
  const int64_t n = bytes / 8;
  AlignedBuffer buffer(n * 8);
  uint64_t* data = buffer.As<uint64_t>();
  const int64_t slice = (n + threads - 1) / threads / 32 * 32;  // whole 4 × 64-byte groups per thread
  const bool avx512 = IsaSupported(Isa::kAvx512);
  TimeOnThreads(pool, threads, [&](int w) {
    const int64_t end = w + 1 == threads ? n : std::min(n, (w + 1) * slice);
    for (int64_t i = w * slice; i < end; ++i) data[i] = static_cast<uint64_t>(i);
  });
  std::atomic<uint64_t> sink{0};
  double best = 1e30;
  for (int rep = 0; rep < repetitions; ++rep) {
    best = std::min(best, TimeOnThreads(pool, threads, [&](int w) {
                      // Four streams per thread (the slice's quarters, read side by side, as a GEMV reads 4 row blocks)
                      // so that the hardware prefetchers keep several misses in flight; four sums so the adds do not
                      // serialise.
                      const int64_t begin = w * slice, end = w + 1 == threads ? n : std::min(n, (w + 1) * slice);
                      if (avx512) {
                        const int64_t vectorised = (end - begin) / 32 * 32;
                        uint64_t sum = internal::ReadSum(data + begin, vectorised);
                        for (int64_t i = begin + vectorised; i < end; ++i) sum += data[i];
                        sink.fetch_add(sum, std::memory_order_relaxed);
                        return;
                      }
                      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                      const int64_t quarter = (end - begin) / 4;
                      const uint64_t *a = data + begin, *b = a + quarter, *c = b + quarter, *d = c + quarter;
                      for (int64_t i = 0; i < quarter; ++i) s0 += a[i], s1 += b[i], s2 += c[i], s3 += d[i];
                      for (int64_t i = begin + 4 * quarter; i < end; ++i) s0 += data[i];
                      sink.fetch_add(s0 + s1 + s2 + s3, std::memory_order_relaxed);
                    }));
  }
  return static_cast<double>(n) * 8 / best / 1e9;
}

namespace {

// Calibrates `loop`'s iteration count on one thread to about seconds/4, then keeps the best of 3 timed runs on
// `threads` threads; returns 2 × multiply-adds per second in G.
double MeasureLoopGops(WorkerPool& pool, int threads, double seconds, int64_t (*loop)(int64_t),
                       double macs_per_iteration) {
  threads = std::clamp(threads, 1, pool.size());
  int64_t iterations = 1 << 12;
  for (;;) {
    Stopwatch watch;
    loop(iterations);
    if (watch.Seconds() > seconds / 4 || iterations > (int64_t{1} << 40)) break;
    iterations *= 2;
  }
  std::atomic<int64_t> sink{0};
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    best = std::min(
        best, TimeOnThreads(pool, threads, [&](int) { sink.fetch_add(loop(iterations), std::memory_order_relaxed); }));
  }
  return 2.0 * static_cast<double>(iterations) * macs_per_iteration * threads / best / 1e9;
}

}  // namespace

double MeasureInt8Gops(WorkerPool& pool, int threads, double seconds) {
  if (!IsaSupported(Isa::kAvx512)) return 0;
  return MeasureLoopGops(pool, threads, seconds, internal::VnniLoop, internal::kVnniPerIteration * 64.0);
}

double MeasureAmxInt8Gops(WorkerPool& pool, int threads, double seconds) {
  if (!IsaSupported(Isa::kAmx)) return 0;
  return MeasureLoopGops(pool, threads, seconds, internal::AmxLoop,
                         static_cast<double>(internal::kAmxMacsPerIteration));
}

MachineLimits MeasureMachineLimits(WorkerPool& pool, const MachineProbeOptions& options) {
  MachineLimits limits;
  limits.threads = pool.size();
  limits.triad_gbps_one_thread = MeasureTriadGbps(pool, 1, options.array_bytes, options.repetitions);
  limits.triad_gbps_all_threads = MeasureTriadGbps(pool, pool.size(), options.array_bytes, options.repetitions);
  limits.read_gbps_one_thread = MeasureReadGbps(pool, 1, options.array_bytes, options.repetitions);
  limits.read_gbps_all_threads = MeasureReadGbps(pool, pool.size(), options.array_bytes, options.repetitions);
  limits.int8_gops_one_thread = MeasureInt8Gops(pool, 1, options.vnni_seconds);
  limits.int8_gops_all_threads = MeasureInt8Gops(pool, pool.size(), options.vnni_seconds);
  limits.amx_int8_gops_one_thread = MeasureAmxInt8Gops(pool, 1, options.vnni_seconds);
  limits.amx_int8_gops_all_threads = MeasureAmxInt8Gops(pool, pool.size(), options.vnni_seconds);
  return limits;
}

}  // namespace glint
