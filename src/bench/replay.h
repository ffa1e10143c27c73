// --requests FILE: replay a given set of requests instead of generated prompts. The file is the OpenAI batch input
// format `glint batch` and POST /v1/batches take (one `{"custom_id", "method", "url", "body"}` per line), so one
// file drives both the offline batch and a server under glint bench (bench/batch_vs_serve.sh compares the two).
// Each level sends every request of the file once, in file order; the bench sets `model`, `stream` and
// `stream_options` (and the logprobs of --count-tokens logprobs) and sends the rest of the body as it is.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace glint::bench {

struct ReplayRequest {
  bool chat = false;       // /v1/chat/completions; else /v1/completions
  nlohmann::json body;     // the line's body, as the file has it
  int64_t max_tokens = 0;  // body.max_tokens or max_completion_tokens
};

// At most this many requests in a file (one client thread sends each level's requests at --concurrency; the
// bound keeps a mistaken file from filling memory).
inline constexpr size_t kMaxReplayRequests = 1'000'000;

// Parses the file's text. An error names the line and what was expected: a line that is not a JSON object, a
// `url` other than /v1/completions and /v1/chat/completions, a `body` that is not an object, a body without a
// positive integer max_tokens (or max_completion_tokens: the reply's length is checked against it), with `n`
// other than 1, or with a prompt member missing (`prompt` for completions, `messages` for chat). Empty lines are
// skipped; a file without a request is an error.
Result<std::vector<ReplayRequest>> ParseReplayRequests(std::string_view text);

// Reads and parses the file (at most 4 GiB).
Result<std::vector<ReplayRequest>> LoadReplayRequests(const std::string& path);

}  // namespace glint::bench
