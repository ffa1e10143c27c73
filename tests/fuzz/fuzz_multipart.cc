// libFuzzer target: an upload's body (server/multipart.h) and a batch input file's validation
// (server/batch_input.h). Input: a Content-Type line, then the body. Every part must be a view inside the body,
// within the part limit; every input line must lie inside the file, with failures naming a line that exists.
// Crashes, sanitizer reports and hangs (the delimiter search must stay linear) are failures.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/batch_input.h"
#include "server/multipart.h"
#include "server/response_format.h"

// batch_input.cc names its result lines with RandomId (response_format.cc, which pulls in the tokenizer); the
// result lines are not what this target checks.
std::string glint::server::RandomId(std::string_view prefix, int) { return std::string(prefix); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace glint::server;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string_view content_type = input.substr(0, newline);
  const std::string_view body = newline == std::string_view::npos ? std::string_view() : input.substr(newline + 1);
  auto boundary = MultipartBoundary(content_type);
  const std::string fallback = "XyZ";
  const MultipartLimits limits{.max_parts = 8, .max_part_header_bytes = 512};
  auto parts = ParseMultipart(body, boundary.ok() ? *boundary : fallback, limits);
  if (parts.ok()) {
    if (parts->size() > limits.max_parts) std::abort();
    for (const MultipartPart& part : *parts) {
      if (part.data.data() < body.data() || part.data.data() + part.data.size() > body.data() + body.size()) {
        std::abort();
      }
      if (part.name.empty()) std::abort();
    }
  }
  const BatchInput batch =
      ValidateBatchInput(body, "/v1/chat/completions", {.max_requests = 64, .max_line_bytes = 2048});
  if (batch.failure && !batch.lines.empty()) std::abort();
  for (const BatchLine& line : batch.lines) {
    if (line.offset + line.length > body.size() || line.line < 1) std::abort();
    if (line.error_code.empty() && line.custom_id.empty()) std::abort();
  }
  if (!batch.failure) (void)PrefixSharingOrder(body, batch.lines);
  return 0;
}
