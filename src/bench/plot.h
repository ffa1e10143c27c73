// The Pareto plot (throughput per chip against interactivity, one point per concurrency level), drawn by gnuplot
// into a PNG. Several result files overlay on one plot in comparison mode.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "bench/report.h"

namespace glint::bench {

// Writes `<stem>.dat` (the points), `<stem>.gp` (a gnuplot script that can be rerun by hand) and `<stem>.log`
// (gnuplot's output) next to `png_path` (= `<stem>.png`), then runs `gnuplot <stem>.gp`. Uses the pngcairo
// terminal when this gnuplot has it and the libgd `png` terminal otherwise (gnuplot-nox may lack cairo). Fails when
// the series have different axes (a random and a multiturn run), when no level has a point, when gnuplot is
// missing or fails, or when it leaves no PNG.
Status PlotPareto(const std::vector<ParetoSeries>& series, const std::string& png_path, const std::string& title);

// The gnuplot script PlotPareto writes (exposed for tests).
std::string ParetoScript(const std::vector<ParetoSeries>& series, const std::string& data_path,
                         const std::string& png_path, const std::string& title);

}  // namespace glint::bench
