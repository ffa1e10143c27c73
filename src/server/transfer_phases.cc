#include "server/transfer_phases.h"

#include <algorithm>
#include <cstdio>

namespace glint::server {
namespace {

// From 0.1 ms (a loopback round trip, an engine round trip while idle) to minutes (a long prompt's prefill).
const std::vector<double> kPhaseBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                           0.025,  0.05,    0.1,    0.25,  0.5,    1.0,   2.5,
                                           5.0,    10.0,    30.0,   60.0,  120.0,  300.0, 600.0};

std::string Milliseconds(int64_t nanoseconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms", static_cast<double>(nanoseconds) * 1e-6);
  return text;
}

}  // namespace

void PhaseLaps::LapAt(size_t phase, Clock::time_point now) {
  now = std::max(now, last_);  // a time stamped on another thread before the previous lap: an empty lap
  nanoseconds_.at(phase) += std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count();
  last_ = now;
}

void PhaseLaps::Split(size_t from, size_t to, int64_t nanoseconds) {
  const int64_t moved = std::clamp<int64_t>(nanoseconds, 0, nanoseconds_.at(from));
  nanoseconds_.at(from) -= moved;
  nanoseconds_.at(to) += moved;
}

int64_t PhaseLaps::total_nanoseconds() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(last_ - start_).count();
}

std::string PhaseLaps::Describe(std::span<const char* const> names) const {
  std::string text;
  for (size_t i = 0; i < nanoseconds_.size() && i < names.size(); ++i) {
    text += StrCat(names[i], " ", Milliseconds(nanoseconds_[i]), ", ");
  }
  return text + "total " + Milliseconds(total_nanoseconds());
}

PhaseHistograms::PhaseHistograms(std::span<const char* const> names) : names_(names.begin(), names.end()) {
  for (size_t i = 0; i <= names_.size(); ++i) phases_.push_back(std::make_unique<Histogram>(kPhaseBuckets));
}

void PhaseHistograms::Observe(const PhaseLaps& laps) {
  for (size_t i = 0; i < names_.size(); ++i) phases_[i]->Observe(static_cast<double>(laps.nanoseconds(i)) * 1e-9);
  phases_.back()->Observe(static_cast<double>(laps.total_nanoseconds()) * 1e-9);
}

std::vector<std::pair<std::string, HistogramFigures>> PhaseHistograms::Figures() const {
  std::vector<std::pair<std::string, HistogramFigures>> figures;
  for (size_t i = 0; i < names_.size(); ++i) figures.emplace_back(names_[i], phases_[i]->Figures());
  figures.emplace_back("total", phases_.back()->Figures());
  return figures;
}

}  // namespace glint::server
