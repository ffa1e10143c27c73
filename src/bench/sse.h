// Reading an OpenAI-style streamed reply: Server-Sent Events framing, then the JSON of each chunk.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace glint::bench {

// Splits an SSE byte stream into the data payloads of complete events, following the WHATWG rules a streaming
// client needs: lines end in \n, \r\n or \r; an empty line ends an event; the `data:` lines of one event are
// joined with \n (one leading space after the colon is dropped); lines starting with ':' are comments; other
// fields (event:, id:, retry:) are ignored. Bytes may arrive split anywhere, even inside a \r\n pair.
class SseParser {
 public:
  // Appends `bytes`; returns the payloads of the events they completed, in order. Fails when one event grows past
  // kMaxEventBytes (a server that never ends its events), so a broken server cannot exhaust memory.
  Result<std::vector<std::string>> Feed(std::string_view bytes);

  static constexpr size_t kMaxEventBytes = size_t{64} << 20;

 private:
  void EndLine(std::vector<std::string>& events);

  std::string line_;       // the line being read (without its terminator)
  std::string data_;       // the data of the event being built
  bool has_data_ = false;  // at least one data: line in the current event
  bool after_cr_ = false;  // the previous byte was \r, so a following \n belongs to the same line end
};

// What one streamed chunk of /v1/completions or /v1/chat/completions says.
struct StreamChunk {
  bool done = false;           // the "[DONE]" sentinel that ends the stream
  bool has_content = false;    // the chunk carries generated output: completion text, or a chat delta with content,
                               // reasoning_content or tool_calls
  std::string text;            // completion text or chat delta content (reasoning excluded: not replayed in history)
  int64_t logprob_tokens = 0;  // sampled tokens in the chunk's logprobs (completions "tokens", chat "content")
  std::optional<std::string> finish_reason;
  std::optional<int64_t> prompt_tokens;      // from "usage" (stream_options.include_usage)
  std::optional<int64_t> completion_tokens;  // from "usage"
  std::optional<std::string> error;          // an {"error": {...}} object sent inside the stream
};

// Parses one SSE data payload. Malformed JSON or wrong field types are an InvalidArgument naming the problem.
Result<StreamChunk> ParseStreamChunk(std::string_view payload);

}  // namespace glint::bench
