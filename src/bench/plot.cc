#include "bench/plot.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/file.h"

extern char** environ;

namespace glint::bench {
namespace {

// A gnuplot single-quoted string: no escapes are processed inside; a quote is written twice.
std::string Quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) {
    if (c == '\'') quoted.push_back('\'');
    if (c == '\n' || c == '\r') {
      quoted.push_back(' ');
      continue;
    }
    quoted.push_back(c);
  }
  return quoted + "'";
}

std::string DataFile(const std::vector<ParetoSeries>& series) {
  std::string data;
  for (const ParetoSeries& s : series) {
    data += "# " + s.label + "\n# concurrency x y\n";
    for (const ParetoPoint& p : s.points) {
      char line[96];
      std::snprintf(line, sizeof(line), "%d %.9g %.9g\n", p.concurrency, p.x, p.y);
      data += line;
    }
    data += "\n\n";  // two blank lines separate gnuplot data blocks (selected with `index`)
  }
  return data;
}

std::string StemOf(const std::string& png_path) {
  if (png_path.size() > 4 && png_path.ends_with(".png")) return png_path.substr(0, png_path.size() - 4);
  return png_path;
}

// Runs `program args...` with stdout and stderr appended to `log_path`; returns the exit code.
Result<int> RunProgram(const std::vector<std::string>& argv, const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawn_error = posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawn_error == ENOENT) {
    return NotFound(argv[0], " is not installed or not on PATH (Debian: apt-get install gnuplot-nox)");
  }
  if (spawn_error != 0) return IoError("cannot start ", argv[0], ": ", std::strerror(spawn_error));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return IoError("waitpid for ", argv[0], ": ", std::strerror(errno));
  }
  if (WIFSIGNALED(status)) return IoError(argv[0], " was killed by signal ", WTERMSIG(status));
  return WEXITSTATUS(status);
}

}  // namespace

std::string ParetoScript(const std::vector<ParetoSeries>& series, const std::string& data_path,
                         const std::string& png_path, const std::string& title) {
  std::string script =
      StrCat("# Pareto plot written by glint bench (docs/bench.md). Rerun with: gnuplot <this file>\n",
             "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n", "  set terminal pngcairo size 1100,750 noenhanced\n",
             "} else {\n", "  set terminal png size 1100,750 noenhanced\n", "}\n", "set output ", Quote(png_path), "\n",
             "set title ", Quote(title), "\n", "set xlabel ", Quote(series.front().x_label), "\n", "set ylabel ",
             Quote(series.front().y_label), "\n", "set grid\n", "set key outside bottom center horizontal\n",
             "set offsets graph 0.05, graph 0.05, graph 0.05, graph 0.05\n", "plot");
  for (size_t i = 0; i < series.size(); ++i) {
    if (i > 0) script += ", \\\n    ";
    script += StrCat(" ", Quote(data_path), " index ", i, " using 2:3 with linespoints linewidth 2 pointtype 7 title ",
                     Quote(series[i].label), ", \\\n      ", Quote(data_path), " index ", i,
                     " using 2:3:(sprintf('c=%d', $1)) with labels offset char 1,1 notitle");
  }
  return script + "\n";
}

Status PlotPareto(const std::vector<ParetoSeries>& series, const std::string& png_path, const std::string& title) {
  if (series.empty()) return InvalidArgument("nothing to plot: no result series");
  size_t points = 0;
  for (const ParetoSeries& s : series) {
    if (s.x_key != series.front().x_key || s.y_key != series.front().y_key) {
      return InvalidArgument("cannot overlay '", s.label, "' (", s.x_key, " vs ", s.y_key, ") on '",
                             series.front().label, "' (", series.front().x_key, " vs ", series.front().y_key,
                             "): the runs used different workloads, whose Pareto axes differ");
    }
    points += s.points.size();
  }
  if (points == 0) {
    return FailedPrecondition("nothing to plot: no level has both ", series.front().x_key, " and ",
                              series.front().y_key, " defined (did every request fail?)");
  }
  const std::string stem = StemOf(png_path);
  const std::string data_path = stem + ".dat";
  const std::string script_path = stem + ".gp";
  const std::string log_path = stem + ".log";
  GLINT_RETURN_IF_ERROR(WriteFileAtomic(data_path, DataFile(series)));
  GLINT_RETURN_IF_ERROR(WriteFileAtomic(script_path, ParetoScript(series, data_path, png_path, title)));
  ::unlink(png_path.c_str());  // so a stale plot is never mistaken for a new one
  GLINT_ASSIGN_OR_RETURN(int exit_code, RunProgram({"gnuplot", script_path}, log_path));
  if (exit_code != 0) {
    auto log = ReadFile(log_path, 1 << 20);
    return FailedPrecondition("gnuplot ", script_path, " exited with code ", exit_code, ": ",
                              log.ok() ? log->substr(0, 2000) : std::string("(no log)"));
  }
  struct stat info {};
  if (::stat(png_path.c_str(), &info) != 0 || info.st_size == 0) {
    return FailedPrecondition("gnuplot ran but wrote no plot to ", png_path, " (see ", log_path, ")");
  }
  return Status::Ok();
}

}  // namespace glint::bench
