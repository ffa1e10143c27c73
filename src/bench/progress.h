// The live progress bar of a run: one line per phase of each concurrency level, redrawn in place on a terminal.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace glint::bench {

struct ProgressSnapshot {
  int concurrency = 0;
  std::string phase;   // "prompts", "warm-up" or "measure"
  int64_t total = 0;   // requests (or prompts) in the phase
  int64_t done = 0;    // finished, whatever the outcome
  int64_t failed = 0;  // finished with an error
  int64_t in_flight = 0;
  double elapsed_s = 0;
};

class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  virtual void Update(const ProgressSnapshot& snapshot) = 0;    // called often; may throttle
  virtual void Finished(const ProgressSnapshot& snapshot) = 0;  // once at the end of each phase
};

// Draws `[c=4 measure] [#########-----------]  18/40  ok 17  err 1  in flight 4  12.3 s` on `out`. On a terminal the
// line is redrawn in place (at most 10 times a second); otherwise only the final line of each phase is printed.
class TerminalProgress final : public ProgressSink {
 public:
  explicit TerminalProgress(std::FILE* out);
  void Update(const ProgressSnapshot& snapshot) override;
  void Finished(const ProgressSnapshot& snapshot) override;

  static std::string FormatLine(const ProgressSnapshot& snapshot, int bar_width);

 private:
  std::FILE* out_;
  bool interactive_;
  double last_draw_s_ = -1;
};

}  // namespace glint::bench
