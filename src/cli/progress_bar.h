// A one-line progress bar on stderr for long conversions: redrawn in place on a terminal (at most 5 times a second),
// one line per 10% otherwise (logs, CI).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "base/timer.h"

namespace glint::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(::isatty(2) != 0) {}

  void Update(uint64_t done, uint64_t total, const std::string& item) {
    if (total == 0) return;
    const int percent = static_cast<int>(100 * done / total);
    if (tty_) {
      if (done < total && since_draw_.Seconds() < 0.2) return;
      since_draw_.Restart();
      const int filled = percent * 30 / 100;
      std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% %6.2f / %.2f GB  %-48.48s", label_.c_str(), filled,
                   "##############################", 30 - filled, "", percent, done / 1e9, total / 1e9, item.c_str());
      if (done == total) std::fprintf(stderr, "\n");
    } else if (percent / 10 != last_tenth_ || done == total) {
      last_tenth_ = percent / 10;
      std::fprintf(stderr, "%s: %d%% (%.2f of %.2f GB) %s\n", label_.c_str(), percent, done / 1e9, total / 1e9,
                   item.c_str());
    }
  }

 private:
  std::string label_;
  bool tty_;
  Stopwatch since_draw_;
  int last_tenth_ = -1;
};

}  // namespace glint::cli
