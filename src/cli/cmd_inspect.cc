// `glint inspect DIR [--json]`: what a checkpoint holds, from its safetensors headers only (no tensor data is
// read): tensors, parameters and bytes per group and dtype, active parameters per token, and the tensors that
// are unknown, missing or mis-shaped against what config.json implies.
#include <cstdio>

#include "base/file.h"
#include "cli/command.h"
#include "io/census.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "plan/census_tables.h"
#include "plan/report.h"

namespace glint::cli {
namespace {

struct InspectOptions {
  std::string dir;
  bool json = false;
  std::string format = "table";
};

Result<plan::Report> BuildInspectReport(const std::string& dir) {
  if (!PathExists(dir)) return NotFound("'", dir, "' does not exist; expected a model directory");
  if (!IsDirectory(dir)) {
    return InvalidArgument("'", dir, "' is a file; expected a model directory with config.json and *.safetensors");
  }
  if (!PathExists(JoinPath(dir, "config.json"))) {
    return NotFound("'", dir, "' has no config.json; expected a model directory with config.json and *.safetensors");
  }
  GLINT_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  GLINT_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(dir));
  const Census census = CensusFromCheckpoint(checkpoint, config);

  plan::Report report;
  report.title = StrCat("glint inspect ", dir);
  report.preamble.push_back(StrCat("config: ", JoinPath(dir, "config.json"), " (", config.num_hidden_layers,
                                   " layers: ", config.NumLayersOf(AttentionKind::kKda), " KDA, ",
                                   config.NumLayersOf(AttentionKind::kDsa), " DSA; ", config.n_routed_experts,
                                   " routed experts, top-", config.num_experts_per_tok,
                                   config.HasMtp() ? "; MTP layer" : "", ")"));
  report.preamble.push_back(StrCat(
      "safetensors: ", checkpoint.shard_paths().size(), " file(s), ", FormatInteger(census.tensor_count), " tensors, ",
      FormatBytes(static_cast<double>(census.TotalBytes())), " of tensor data (headers read, data not touched)"));
  report.tables.push_back(plan::GroupTable(census));
  report.tables.push_back(plan::DTypeTable(census));
  report.tables.push_back(plan::ActiveTable(census, config));
  report.tables.push_back(plan::ProblemTable(census));
  return report;
}

CommandSetup InspectSetup() {
  return [](CLI::App& command) -> std::function<Status()> {
    auto options = std::make_shared<InspectOptions>();
    command.add_option("DIR", options->dir, "model directory: config.json + model.safetensors[.index.json]")
        ->required();
    command.add_flag("--json", options->json, "print JSON (same as --format json)");
    command.add_option("--format", options->format, "table, markdown or json")->capture_default_str();
    return [options]() -> Status {
      GLINT_ASSIGN_OR_RETURN(plan::OutputFormat format,
                             plan::ParseOutputFormat(options->json ? "json" : options->format));
      GLINT_ASSIGN_OR_RETURN(plan::Report report, BuildInspectReport(options->dir));
      const std::string text = plan::Render(report, format);
      std::fwrite(text.data(), 1, text.size(), stdout);
      return Status::Ok();
    };
  };
}

GLINT_REGISTER_COMMAND("inspect", "Tensors, parameters and bytes of a checkpoint, from its headers", 20,
                       InspectSetup());

}  // namespace
}  // namespace glint::cli
