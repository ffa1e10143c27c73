// Summary statistics of per-request latencies: mean, median, p90, p99, min, max, standard deviation.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace glint::bench {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The q-th percentile (q in [0, 100]) of ascending `sorted` values (non-empty), by linear interpolation between the
// two nearest ranks — numpy.percentile's default method ("linear", type 7 of Hyndman & Fan 1996), which vLLM's and
// InferenceX's benchmark scripts use:
//   h = (n − 1)·q/100,  P = x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋ + 1] − x[⌊h⌋]).
// So the median of {1, 2, 3, 4} is 2.5 and its p90 is 3.7.
double PercentileOfSorted(std::span<const double> sorted, double q);

struct Summary {
  int64_t count = 0;  // values summarised; the statistics below are NaN (null in JSON) when count is 0
  double mean = kNaN;
  double median = kNaN;
  double p90 = kNaN;
  double p99 = kNaN;
  double min = kNaN;
  double max = kNaN;
  double stddev = kNaN;  // population standard deviation (numpy.std's default ddof = 0, as vLLM reports)
};

// The median of `values` (the mean of the middle two for an even count, PercentileOfSorted at 50), 0 for none: the
// medians the benchmark commands print.
double Median(std::vector<double> values);

// The value at rank round(q·(n − 1)) of `values` (q in [0, 1]), 0 for none: the nearest-rank percentiles the
// in-process engine benchmarks (bench-engine, bench-grammar) print — no interpolation, so every figure is a
// measured one.
double NearestRankPercentile(std::vector<double> values, double q);

// NaN values are ignored (they mark "undefined for this request", e.g. TPOT of a one-token reply).
Summary Summarize(std::vector<double> values);

}  // namespace glint::bench
