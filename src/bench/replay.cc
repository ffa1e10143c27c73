#include "bench/replay.h"

#include "base/file.h"

namespace glint::bench {
namespace {

constexpr size_t kMaxReplayFileBytes = size_t{1} << 32;

// One line's request, or what is wrong with it (the caller adds the line number).
Result<ReplayRequest> ParseReplayLine(std::string_view text) {
  const nlohmann::json line = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!line.is_object()) {
    return InvalidArgument(
        "not a JSON object (expected the batch format: {\"custom_id\", \"method\", \"url\", "
        "\"body\"})");
  }
  const auto url = line.find("url");
  if (url == line.end() || !url->is_string() || (*url != "/v1/completions" && *url != "/v1/chat/completions")) {
    return InvalidArgument("\"url\" must be \"/v1/completions\" or \"/v1/chat/completions\"");
  }
  ReplayRequest request;
  request.chat = *url == "/v1/chat/completions";
  const auto body = line.find("body");
  if (body == line.end() || !body->is_object()) return InvalidArgument("\"body\" must be a JSON object");
  request.body = *body;
  const char* prompt_member = request.chat ? "messages" : "prompt";
  if (!request.body.contains(prompt_member)) return InvalidArgument("the body has no \"", prompt_member, "\"");
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    const auto found = request.body.find(name);
    if (found != request.body.end() && found->is_number_integer() && found->get<int64_t>() > 0) {
      request.max_tokens = found->get<int64_t>();
      break;
    }
  }
  if (request.max_tokens == 0) {
    return InvalidArgument(
        "the body needs a positive integer \"max_tokens\" (or \"max_completion_tokens\"): the "
        "reply's length is checked against it");
  }
  const auto n = request.body.find("n");
  if (n != request.body.end() && *n != 1) {
    return InvalidArgument("\"n\" must be 1 (glint bench times one choice per request)");
  }
  return request;
}

}  // namespace

Result<std::vector<ReplayRequest>> ParseReplayRequests(std::string_view text) {
  std::vector<ReplayRequest> requests;
  int64_t number = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    if (requests.size() == kMaxReplayRequests) {
      return InvalidArgument("--requests: more than ", kMaxReplayRequests, " requests (line ", number, ")");
    }
    auto request = ParseReplayLine(line);
    if (!request.ok()) return InvalidArgument("--requests: line ", number, ": ", request.status().message());
    requests.push_back(std::move(request).value());
  }
  if (requests.empty()) return InvalidArgument("--requests: the file holds no request");
  return requests;
}

Result<std::vector<ReplayRequest>> LoadReplayRequests(const std::string& path) {
  auto text = ReadFile(path, kMaxReplayFileBytes);
  if (!text.ok()) return text.status().WithContext(StrCat("--requests ", path));
  return ParseReplayRequests(*text);
}

}  // namespace glint::bench
