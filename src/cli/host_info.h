// Facts about this machine that benchmarks print beside their figures, to read them by.
#pragma once

#include <string>

namespace glint::cli {

// The 1-minute load average (Linux /proc/loadavg); NaN where unavailable.
double LoadAverage();
// The same as text with two decimals, "unknown" where unavailable.
std::string LoadAverageText();
// The CPU's model name from /proc/cpuinfo, "unknown CPU" where unavailable.
std::string CpuName();

}  // namespace glint::cli
