// Probes of this machine's limits, measured in the same run as the figures they judge (a shared or throttled
// machine moves both together, so the ratio is what is meaningful):
//   - memory bandwidth: a STREAM-like triad a[i] = b[i] + s·c[i] over arrays 8× the last-level cache (STREAM's
//     byte count: 3 × 4 bytes per element; the write-allocate read is not counted, so the memory system moves 4/3
//     of the reported bytes), and a read-only reduction over 4 streams per thread, the access pattern of a decode
//     GEMV;
//   - int8 peak: a tight loop of independent `vpdpbusd` (AVX-512 VNNI) on registers, 64 multiply-adds per
//     instruction, counted as 2 operations each (GOPS = 2 × MACs / s);
//   - AMX int8 peak (where Isa::kAmx is supported): a loop of independent `tdpbsud` on tiles, 16,384
//     multiply-adds per instruction, counted the same way.
// Each is measured on one thread and on every thread of the pool; the best of `repetitions` runs is kept.
#pragma once

#include <cstdint>

#include "base/worker_pool.h"
#include "kernels/isa.h"

namespace glint {

struct MachineLimits {
  int threads = 0;
  double triad_gbps_one_thread = 0, triad_gbps_all_threads = 0;
  double read_gbps_one_thread = 0, read_gbps_all_threads = 0;
  double int8_gops_one_thread = 0, int8_gops_all_threads = 0;          // 0 when the CPU has no AVX-512 VNNI
  double amx_int8_gops_one_thread = 0, amx_int8_gops_all_threads = 0;  // 0 without Isa::kAmx
};

struct MachineProbeOptions {
  int64_t array_bytes = int64_t{256} << 20;  // per triad array (and the read buffer)
  int repetitions = 5;
  double vnni_seconds = 0.2;  // per VNNI measurement
};

MachineLimits MeasureMachineLimits(WorkerPool& pool, const MachineProbeOptions& options = {});

// The parts, for benchmarks that want one figure.
double MeasureTriadGbps(WorkerPool& pool, int threads, int64_t array_bytes, int repetitions);
double MeasureReadGbps(WorkerPool& pool, int threads, int64_t bytes, int repetitions);
double MeasureInt8Gops(WorkerPool& pool, int threads, double seconds);
double MeasureAmxInt8Gops(WorkerPool& pool, int threads, double seconds);  // 0 without Isa::kAmx
// The int8 peak of the products at `isa` for prefill-sized products: the AMX peak at kAmx, the VNNI peak otherwise.
inline double Int8PeakFor(const MachineLimits& limits, Isa isa, bool one_thread) {
  if (isa == Isa::kAmx) return one_thread ? limits.amx_int8_gops_one_thread : limits.amx_int8_gops_all_threads;
  return one_thread ? limits.int8_gops_one_thread : limits.int8_gops_all_threads;
}

namespace internal {
// Runs `iterations` rounds of 24 independent vpdpbusd (AVX-512 VNNI); returns a value that depends on them so the
// loop is not optimised away. Defined in machine_limits_avx512.cc.
int64_t VnniLoop(int64_t iterations);
inline constexpr int kVnniPerIteration = 24;
// Runs `iterations` rounds of 4 independent tdpbsud (16 × 16 × 64 each). Defined in machine_limits_amx.cc; the CPU
// must support Isa::kAmx.
int64_t AmxLoop(int64_t iterations);
inline constexpr int64_t kAmxMacsPerIteration = 4 * 16 * 16 * 64;
// AVX-512 forms of the bandwidth probes (a plain loop would be limited by instructions, not memory, on one core).
uint64_t ReadSum(const uint64_t* data, int64_t n);
void Triad(float* a, const float* b, const float* c, float s, int64_t n);
}  // namespace internal

}  // namespace glint
