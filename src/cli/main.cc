// glint: one binary, one subcommand per job. See `glint --help`.
#include <pthread.h>

#include <algorithm>
#include <csignal>
#include <cstdio>

#include "base/log.h"
#include "cli/command.h"
#include "cli/distributed.h"
#include "dist/launch.h"

namespace glint::cli {
std::vector<CommandInfo>& CommandRegistry() {
  static std::vector<CommandInfo> registry;
  return registry;
}
}  // namespace glint::cli

namespace glint::cli {
int RunMain(int argc, char** argv);
}  // namespace glint::cli

// An exception that escapes ends the process through std::terminate, which prints it: the right end for a CLI.
// NOLINTNEXTLINE(bugprone-exception-escape)
int main(int argc, char** argv) {
  using namespace glint;
  // Under mpirun: MPI is initialised before the flags are parsed (it may consume its own arguments). Its helper
  // threads start with SIGTERM and SIGINT blocked, so that those signals reach glint's own threads (`glint serve`
  // stops gracefully on them) rather than ending the process in a thread that ignores nothing.
  sigset_t stop_signals, previous;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &previous);
  auto world = MakeCommunicator(&argc, &argv);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (!world.ok()) {
    std::fprintf(stderr, "glint: error: %s\n", world.status().message().c_str());
    return 1;
  }
  cli::SetWorld(std::move(world).value(), argc, argv);
  // Results come from rank 0 only; the other ranks' logs (stderr) carry their rank.
  if (cli::World().rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return 1;
  const int code = cli::RunMain(argc, argv);
  cli::EndWorld();
  return code;
}

namespace glint::cli {

int RunMain(int argc, char** argv) {
  CLI::App app{"glint: an inference engine and OpenAI-compatible server for GLM-5.3-Flash", "glint"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "glint 0.1.0");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warning, error or off")->capture_default_str();

  auto& registry = cli::CommandRegistry();
  std::sort(registry.begin(), registry.end(), [](const auto& a, const auto& b) { return a.order < b.order; });
  std::function<Status()> action;
  std::string chosen;
  for (auto& info : registry) {
    CLI::App* command = app.add_subcommand(info.name, info.description);
    auto run = info.setup(*command);
    command->callback([&action, &chosen, run, name = info.name] {
      action = run;
      chosen = name;
    });
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);  // prints usage errors with the offending flag; exit code 0 for --help
  }
  auto level = ParseLogLevel(log_level);
  if (!level.ok()) {
    std::fprintf(stderr, "glint: error: %s\n", level.status().message().c_str());
    return 2;
  }
  SetLogLevel(*level);
  static constexpr const char* kMultiRank[] = {"run", "score", "bench-model", "bench-engine", "serve", "batch"};
  if (Distributed() && std::find(std::begin(kMultiRank), std::end(kMultiRank), chosen) == std::end(kMultiRank)) {
    std::fprintf(
        stderr,
        "glint %s: error: runs as one process; under mpirun only run, score, bench-model, bench-engine, serve and "
        "batch are supported (docs/distributed.md)\n",
        chosen.c_str());
    return 2;
  }
  Status status = action();
  if (FollowerFinished()) return 0;  // a rank other than 0: it followed rank 0's plans until rank 0 stopped
  if (!status.ok() && Distributed() && !RanksAgreedOnError() && !Leading()) {
    // This rank alone failed before the ranks joined: its peers may be waiting in a collective it will never join.
    AbortAllRanks(World(), StrCat("glint ", chosen, ": error: ", status.message()), 1);
  }
  if (!status.ok()) {
    const std::string rank = Distributed() ? StrCat(" (rank ", World().rank(), ")") : "";
    std::fprintf(stderr, "glint %s%s: error: %s\n", chosen.c_str(), rank.c_str(), status.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace glint::cli
