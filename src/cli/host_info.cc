#include "cli/host_info.h"

#include <cmath>
#include <cstdio>
#include <fstream>

namespace glint::cli {

double LoadAverage() {
  std::FILE* file = std::fopen("/proc/loadavg", "r");
  if (file == nullptr) return std::nan("");
  double load = std::nan("");
  if (std::fscanf(file, "%lf", &load) != 1) load = std::nan("");
  std::fclose(file);
  return load;
}

std::string LoadAverageText() {
  const double load = LoadAverage();
  if (std::isnan(load)) return "unknown";
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", load);
  return text;
}

std::string CpuName() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

}  // namespace glint::cli
