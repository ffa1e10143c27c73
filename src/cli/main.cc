// glint: one binary, one subcommand per job. See `glint --help`.
#include <algorithm>
#include <cstdio>

#include "base/log.h"
#include "cli/command.h"

namespace glint::cli {
std::vector<CommandInfo>& CommandRegistry() {
  static std::vector<CommandInfo> registry;
  return registry;
}
}  // namespace glint::cli

int main(int argc, char** argv) {
  using namespace glint;
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
  Status status = action();
  if (!status.ok()) {
    std::fprintf(stderr, "glint %s: error: %s\n", chosen.c_str(), status.message().c_str());
    return 1;
  }
  return 0;
}
