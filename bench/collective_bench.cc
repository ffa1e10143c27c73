// What one of glint's collectives costs over the link between the ranks (docs/distributed.md "What a link
// costs"): the median time of Communicator::AllReduceSum — the MoE and tensor-parallel all-reduce, an all-gather
// then a rank-order sum — for payloads from 16 bytes to 16 MiB per rank, and the two figures `glint plan` takes:
// the fixed cost of a call (--link-latency) and the bandwidth (--link-bandwidth) of the model
// t = latency + bytes received / bandwidth. The latency is the smallest payload's time; the bandwidth is fitted,
// with that latency, by least squares on the relative error over the payloads whose time is at least 10× the
// latency — where bandwidth shows — each of them weighing alike; printed with the model's worst relative error over
// those sizes. Why not over every size (the first version): an emulated link's token bucket passes a burst (1 ms
// of the rate) at veth speed, so the small payloads, latency-bound anyway, pulled the fit to 0.40 GB/s at 1 Gbit/s
// against 0.06–0.15 GB/s for 64 KiB–16 MiB, and the plan then put the TP steps' 256 KB–8 MB messages at a fifth
// of their measured time (2026-12-05).
// Run it under mpirun with one rank per host; rank 0 prints. Fails only on bad arguments or an MPI error.
//
//   mpirun -np 2 … glint_collective_bench [SECONDS_PER_SIZE=0.3] [LARGEST_BYTES=16777216]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/timer.h"
#include "bench/stats.h"
#include "dist/launch.h"

namespace glint {
namespace {

struct Timing {
  size_t bytes = 0;    // payload per rank
  double seconds = 0;  // median of the calls
  int calls = 0;
};

// Calls AllReduceSum on `floats` values until `budget` seconds have passed on rank 0 (at least 5 calls); every
// rank makes the same number of calls because rank 0's count is broadcast before each size.
Result<Timing> TimeAllReduce(Communicator& comm, size_t floats, double budget) {
  std::vector<float> values(floats, 1.0f);
  std::vector<double> seconds;
  GLINT_RETURN_IF_ERROR(comm.AllReduceSum(values));  // a first call opens the connections
  Stopwatch total;
  for (;;) {
    const bool again = seconds.size() < 5 || total.Seconds() < budget;
    std::vector<std::byte> more(1, again ? std::byte{1} : std::byte{0});
    GLINT_RETURN_IF_ERROR(comm.Broadcast(more, 0));  // rank 0's clock decides for everyone
    if (more[0] == std::byte{0}) break;
    GLINT_RETURN_IF_ERROR(comm.Barrier());
    Stopwatch call;
    GLINT_RETURN_IF_ERROR(comm.AllReduceSum(values));
    seconds.push_back(call.Seconds());
  }
  return Timing{floats * sizeof(float), bench::Median(seconds), static_cast<int>(seconds.size())};
}

struct Fit {
  double latency = 0, bandwidth = 0, worst_relative_error = 0;
};

// latency = the smallest payload's time; seconds per byte p minimises Σ ((latency + b_i p − t_i) / t_i)² over the
// payloads with t_i ≥ kBandwidthShows × latency (at least the two largest): p = Σ b_i (t_i − latency) / t_i² ÷
// Σ b_i² / t_i². A non-positive p (a link too fast to see, or noise) falls back to the largest payload's bandwidth.
constexpr double kBandwidthShows = 10;
Fit FitLatencyBandwidth(const std::vector<Timing>& timings, int others, size_t* fitted) {
  const double latency = timings.front().seconds;
  size_t first = timings.size() >= 2 ? timings.size() - 2 : 0;
  while (first > 0 && timings[first - 1].seconds >= kBandwidthShows * latency) --first;
  double numerator = 0, denominator = 0;
  for (size_t i = first; i < timings.size(); ++i) {
    const double b = static_cast<double>(timings[i].bytes) * others, t = timings[i].seconds;
    numerator += b * (t - latency) / (t * t), denominator += b * b / (t * t);
  }
  *fitted = timings.size() - first;
  double per_byte = denominator > 0 ? numerator / denominator : -1;
  if (!(per_byte > 0)) {
    const Timing& big = timings.back();
    per_byte = std::max(1e-15, (big.seconds - latency) / (static_cast<double>(big.bytes) * others));
  }
  Fit fit{latency, 1.0 / per_byte, 0};
  for (size_t i = first; i < timings.size(); ++i) {
    const Timing& t = timings[i];
    const double predicted = latency + static_cast<double>(t.bytes) * others * per_byte;
    fit.worst_relative_error = std::max(fit.worst_relative_error, std::abs(predicted - t.seconds) / t.seconds);
  }
  return fit;
}

Status Run(Communicator& comm, double budget, size_t largest) {
  if (comm.size() < 2) return FailedPrecondition("run it under mpirun with at least 2 ranks (one per host)");
  std::vector<Timing> timings;
  for (size_t bytes = 16; bytes <= largest; bytes *= 4) {
    GLINT_ASSIGN_OR_RETURN(Timing timing, TimeAllReduce(comm, bytes / sizeof(float), budget));
    timings.push_back(timing);
  }
  if (comm.rank() != 0) return Status::Ok();
  const int others = comm.size() - 1;
  std::printf("all-reduce over %d ranks (%s): median per call\n", comm.size(), comm.Describe().c_str());
  std::printf("%14s %14s %12s %8s %16s\n", "bytes per rank", "bytes received", "median µs", "calls",
              "above fixed GB/s");
  const double fixed = timings.front().seconds;
  for (const Timing& t : timings) {
    const double received = static_cast<double>(t.bytes) * others;
    const double above = t.seconds - fixed;
    std::printf("%14zu %14.0f %12.1f %8d %16s\n", t.bytes, received, t.seconds * 1e6, t.calls,
                above > 0 ? std::to_string(received / above / 1e9).c_str() : "-");
  }
  size_t fitted = 0;
  const Fit fit = FitLatencyBandwidth(timings, others, &fitted);
  std::printf(
      "fit: fixed cost %.1f µs per call (the smallest size), bandwidth %.3f GB/s per rank received (fitted "
      "over the %zu largest sizes, those from 10x the fixed cost; worst of them off by %.0f%%)\n",
      fit.latency * 1e6, fit.bandwidth / 1e9, fitted, fit.worst_relative_error * 100);
  std::printf("glint plan: --link-latency %.1f --link-bandwidth %.3f\n", fit.latency * 1e6, fit.bandwidth / 1e9);
  return Status::Ok();
}

}  // namespace
}  // namespace glint

int main(int argc, char** argv) {
  auto comm = glint::MakeCommunicator(&argc, &argv);
  if (!comm.ok()) {
    std::fprintf(stderr, "glint_collective_bench: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  const double budget = argc > 1 ? std::atof(argv[1]) : 0.3;
  const long long largest = argc > 2 ? std::atoll(argv[2]) : 16ll << 20;
  if (!(budget > 0 && budget <= 60) || largest < 64 || largest > (1ll << 28)) {
    std::fprintf(stderr, "usage: glint_collective_bench [SECONDS_PER_SIZE in (0, 60]] [LARGEST_BYTES, 64 to 2^28]\n");
    return 2;
  }
  const glint::Status status = glint::Run(**comm, budget, static_cast<size_t>(largest));
  if (!status.ok()) {
    std::fprintf(stderr, "glint_collective_bench: %s\n", status.ToString().c_str());
    glint::AbortAllRanks(**comm, status.ToString(), 1);
  }
  return 0;
}
