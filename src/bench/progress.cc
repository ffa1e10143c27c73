#include "bench/progress.h"

#include <unistd.h>

#include <algorithm>

#include "base/status.h"

namespace glint::bench {

TerminalProgress::TerminalProgress(std::FILE* out) : out_(out), interactive_(isatty(fileno(out)) == 1) {}

std::string TerminalProgress::FormatLine(const ProgressSnapshot& snapshot, int bar_width) {
  const double fraction =
      snapshot.total > 0
          ? std::clamp(static_cast<double>(snapshot.done) / static_cast<double>(snapshot.total), 0.0, 1.0)
          : 1.0;
  const int filled = static_cast<int>(fraction * bar_width + 0.5);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(bar_width - filled), '-');
  char elapsed[32];
  std::snprintf(elapsed, sizeof(elapsed), "%.1f s", snapshot.elapsed_s);
  std::string line =
      StrCat("[c=", snapshot.concurrency, " ", snapshot.phase, "] [", bar, "] ", snapshot.done, "/", snapshot.total);
  if (snapshot.phase != "prompts") {  // prompt building has no outcomes or requests in flight
    line +=
        StrCat("  ok ", snapshot.done - snapshot.failed, "  err ", snapshot.failed, "  in flight ", snapshot.in_flight);
  }
  return StrCat(line, "  ", elapsed);
}

void TerminalProgress::Update(const ProgressSnapshot& snapshot) {
  if (!interactive_) return;
  if (last_draw_s_ >= 0 && snapshot.elapsed_s - last_draw_s_ < 0.1 && snapshot.elapsed_s >= last_draw_s_) return;
  last_draw_s_ = snapshot.elapsed_s;
  std::fprintf(out_, "\r%s\033[K", FormatLine(snapshot, 30).c_str());
  std::fflush(out_);
}

void TerminalProgress::Finished(const ProgressSnapshot& snapshot) {
  if (interactive_) {
    std::fprintf(out_, "\r%s\033[K\n", FormatLine(snapshot, 30).c_str());
  } else {
    std::fprintf(out_, "%s\n", FormatLine(snapshot, 30).c_str());
  }
  std::fflush(out_);
  last_draw_s_ = -1;
}

}  // namespace glint::bench
