// The `glint` binary's subcommands. Each subcommand lives in its own cmd_*.cc and registers itself with
// GLINT_REGISTER_COMMAND; main() builds the CLI11 app from the registry, so adding a command touches one file.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace glint::cli {

// Adds the subcommand's options to `command` and returns the action to run once parsing succeeded.
// The action returns a Status; main prints a failed Status as "glint <command>: error: ..." and exits 1.
using CommandSetup = std::function<std::function<Status()>(CLI::App& command)>;

struct CommandInfo {
  std::string name;
  std::string description;
  CommandSetup setup;
  int order;  // position in --help
};

std::vector<CommandInfo>& CommandRegistry();

struct CommandRegistrar {
  CommandRegistrar(std::string name, std::string description, int order, CommandSetup setup) {
    CommandRegistry().push_back({std::move(name), std::move(description), std::move(setup), order});
  }
};

#define GLINT_REGISTER_COMMAND(name, description, order, setup) \
  static ::glint::cli::CommandRegistrar GLINT_CONCAT(glint_command_, __COUNTER__)(name, description, order, setup)

}  // namespace glint::cli
