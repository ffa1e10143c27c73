#include "bench/stats.h"

#include <algorithm>
#include <cmath>

#include "base/status.h"

namespace glint::bench {

double PercentileOfSorted(std::span<const double> sorted, double q) {
  GLINT_CHECK(!sorted.empty()) << "percentile of no values";
  GLINT_CHECK(q >= 0 && q <= 100) << "percentile " << q;
  const double rank = static_cast<double>(sorted.size() - 1) * q / 100.0;
  const size_t lower = static_cast<size_t>(std::floor(rank));
  const size_t upper = std::min(lower + 1, sorted.size() - 1);
  const double fraction = rank - static_cast<double>(lower);
  return sorted[lower] + fraction * (sorted[upper] - sorted[lower]);
}

Summary Summarize(std::vector<double> values) {
  std::erase_if(values, [](double v) { return std::isnan(v); });
  Summary summary;
  summary.count = static_cast<int64_t>(values.size());
  if (values.empty()) return summary;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  summary.mean = sum / static_cast<double>(values.size());
  double squares = 0;
  for (double v : values) squares += (v - summary.mean) * (v - summary.mean);
  summary.stddev = std::sqrt(squares / static_cast<double>(values.size()));
  summary.median = PercentileOfSorted(values, 50);
  summary.p90 = PercentileOfSorted(values, 90);
  summary.p99 = PercentileOfSorted(values, 99);
  summary.min = values.front();
  summary.max = values.back();
  return summary;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return PercentileOfSorted(values, 50);
}

double NearestRankPercentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1,
                         static_cast<size_t>(std::lround(q * static_cast<double>(values.size() - 1))))];
}

}  // namespace glint::bench
