// A batch's input file and its result lines (docs/batch.md "Formats"), in OpenAI's JSONL shapes:
//   input   {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}
//   output  {"id": "batch_req_...", "custom_id": "r1", "response": {"status_code": 200, "request_id": "...",
//            "body": {...}}, "error": null}
//   error   {"id": "batch_req_...", "custom_id": "r1" or null, "response": null,
//            "error": {"code": "...", "message": "..."}}
// Shared by the server's Batches API and `glint batch`. Validation reads the file once and keeps per line only
// where it is and its custom_id; a line's body is parsed again when it runs, so memory stays near the file's size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/json_body.h"

namespace glint::server {

// The endpoints a batch may target: the generation endpoints glint serves.
bool IsBatchEndpoint(std::string_view endpoint);
// "/v1/chat/completions, /v1/completions, ..." for error messages.
std::string BatchEndpointList();

struct BatchInputLimits {
  size_t max_requests = 50000;               // lines with a request (OpenAI's limit)
  size_t max_line_bytes = size_t{16} << 20;  // one line: at most what one HTTP request body may be
};

struct BatchLine {
  int64_t line = 0;       // 1-based line number in the file
  std::string custom_id;  // "" when the line has none (it is then an error line)
  size_t offset = 0;      // the line's bytes in the file
  size_t length = 0;
  // Set when the line cannot run: it is answered by an error line (the batch goes on).
  std::string error_code;
  std::string error_message;
};

// Why a whole file was refused (the batch fails validation): OpenAI's errors.data entry.
struct BatchInputFailure {
  std::string code;
  std::string message;
  int64_t line = 0;  // 0: not about one line
};

struct BatchInput {
  std::vector<BatchLine> lines;  // in file order; empty when `failure`
  std::optional<BatchInputFailure> failure;
};

// Checks every line of `content` against `endpoint`. Lines that cannot run (not JSON, too long, no custom_id,
// another url, method not POST, body not an object, stream: true) become error lines; the file fails as a whole
// when it is not JSONL at all (its first non-empty line is not a JSON object), has no request, more than
// max_requests, or repeats a custom_id (both lines are named).
BatchInput ValidateBatchInput(std::string_view content, std::string_view endpoint, const BatchInputLimits& limits);

// The order to run `lines` in: lines whose prompts start alike next to each other (sorted by the raw text from
// their "messages", "prompt" or "input" member on), so that they share the prefix cache while they run.
std::vector<size_t> PrefixSharingOrder(std::string_view content, const std::vector<BatchLine>& lines);

// A line's request body (the line is one that validated).
ApiOr<Json> LineBody(std::string_view content, const BatchLine& line);

// Result lines. `custom_id` empty → null.
Json ResponseLine(const std::string& custom_id, int status, Json body);
Json ErrorLine(const std::string& custom_id, const std::string& code, const std::string& message);

}  // namespace glint::server
