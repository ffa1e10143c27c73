// `glint batch` (docs/batch.md "Offline"): an OpenAI batch input file run through the server's handlers without
// HTTP, results appended to the output file (fsync'd per line) as they finish, progress on stderr. --resume skips
// the requests whose custom_id the output already holds, so a run that was killed goes on where it stopped.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <set>
#include <string>

#include "base/status.h"
#include "server/backend.h"
#include "server/batch_dir.h"
#include "server/batch_input.h"
#include "server/http_server.h"

namespace glint::cli {

struct OfflineBatchFlags {
  std::string input;
  std::string output;
  bool resume = false;
  int64_t concurrency = 0;  // 0: twice the sequences the engine runs at once
  std::string report;       // --report: a JSON summary of the run (tokens, seconds, prefix-cache hits); "" none
  size_t max_line_bytes = size_t{16} << 20;
};

void AddOfflineBatchFlags(CLI::App& command, OfflineBatchFlags& flags);

// The input validated and the output opened, before the model loads (a bad file fails in a second, not after
// minutes of loading).
struct OfflineBatch {
  std::string content;                     // the input file
  std::string endpoint;                    // every line's url
  std::vector<server::BatchLine> pending;  // the lines still to answer
  int64_t total = 0;                       // lines in the input
  std::optional<server::AppendOnlyFile> output;
  std::string output_path;
  std::string report_path;
};

Result<OfflineBatch> PrepareOfflineBatch(const OfflineBatchFlags& flags);
// Runs the pending lines, `concurrency` in flight; `backend` gives the engine's prefix-cache counters for the
// summary (logged, and written to --report).
Status RunOfflineBatch(server::HttpServer& server, const server::GenerationBackend& backend, OfflineBatch batch,
                       int64_t concurrency);

}  // namespace glint::cli
