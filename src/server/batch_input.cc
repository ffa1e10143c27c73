#include "server/batch_input.h"

#include <algorithm>
#include <unordered_map>

#include "server/response_format.h"

namespace glint::server {
namespace {

constexpr std::string_view kBatchEndpoints[] = {"/v1/chat/completions", "/v1/completions", "/v1/responses",
                                                "/v1/messages"};
constexpr size_t kMaxCustomIdBytes = 512;

std::string_view TrimSpace(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.front() == '\r')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
  return text;
}

// The error that keeps a parsed line from running, as (code, message); empty code when it can run.
std::pair<std::string, std::string> CheckLine(const Json& request, std::string_view endpoint, int64_t number) {
  const auto at = [number](const std::string& what) { return StrCat("line ", number, ": ", what); };
  const auto custom_id = request.find("custom_id");
  if (custom_id == request.end() || !custom_id->is_string() || custom_id->get_ref<const std::string&>().empty()) {
    return {"missing_custom_id", at("custom_id must be a non-empty string")};
  }
  if (custom_id->get_ref<const std::string&>().size() > kMaxCustomIdBytes) {
    return {"invalid_custom_id", at(StrCat("custom_id is longer than ", kMaxCustomIdBytes, " bytes"))};
  }
  const auto method = request.find("method");
  if (method == request.end() || *method != "POST") return {"invalid_method", at("method must be \"POST\"")};
  const auto url = request.find("url");
  if (url == request.end() || !url->is_string() || *url != endpoint) {
    return {"mismatched_url", at(StrCat("url must be the batch's endpoint \"", endpoint, "\""))};
  }
  const auto body = request.find("body");
  if (body == request.end() || !body->is_object()) return {"invalid_body", at("body must be a JSON object")};
  const auto stream = body->find("stream");
  if (stream != body->end() && *stream == true) {
    return {"invalid_body", at("stream: true is not supported in a batch (results are written whole)")};
  }
  return {};
}

}  // namespace

bool IsBatchEndpoint(std::string_view endpoint) {
  return std::find(std::begin(kBatchEndpoints), std::end(kBatchEndpoints), endpoint) != std::end(kBatchEndpoints);
}

std::string BatchEndpointList() {
  std::string list;
  for (std::string_view endpoint : kBatchEndpoints) list += StrCat(list.empty() ? "" : ", ", endpoint);
  return list;
}

BatchInput ValidateBatchInput(std::string_view content, std::string_view endpoint, const BatchInputLimits& limits) {
  BatchInput input;
  const auto fail = [&input](std::string code, std::string message, int64_t line) {
    input.lines.clear();
    input.failure = BatchInputFailure{std::move(code), std::move(message), line};
    return std::move(input);
  };
  std::unordered_map<std::string, int64_t> seen;  // custom_id → its line
  int64_t number = 0;
  for (size_t start = 0; start < content.size();) {
    const size_t newline = content.find('\n', start);
    const size_t end = newline == std::string_view::npos ? content.size() : newline;
    const std::string_view text = TrimSpace(content.substr(start, end - start));
    BatchLine line{++number, "", start, end - start, "", ""};
    start = end + 1;
    if (text.empty()) continue;
    if (input.lines.size() == limits.max_requests) {
      return fail("too_many_requests", StrCat("the file has more than ", limits.max_requests, " requests"), number);
    }
    if (text.size() > limits.max_line_bytes) {
      line.error_code = "line_too_long";
      line.error_message = StrCat("line ", number, " is ", text.size(), " bytes; at most ", limits.max_line_bytes);
      input.lines.push_back(std::move(line));
      continue;
    }
    auto request = ParseJsonObject(text);
    if (!request.ok()) {
      if (input.lines.empty()) {
        return fail(
            "invalid_json_line",
            StrCat("the file is not JSONL: line ", number, " is not a JSON object (", request.error().message, ")"),
            number);
      }
      line.error_code = "invalid_json_line";
      line.error_message = StrCat("line ", number, " is not a JSON object: ", request.error().message);
      input.lines.push_back(std::move(line));
      continue;
    }
    std::tie(line.error_code, line.error_message) = CheckLine(request.value(), endpoint, number);
    const auto custom_id = request.value().find("custom_id");
    if (custom_id != request.value().end() && custom_id->is_string()) {
      line.custom_id = custom_id->get<std::string>().substr(0, kMaxCustomIdBytes);
      auto [previous, inserted] = seen.emplace(line.custom_id, number);
      if (!inserted) {
        return fail("duplicate_custom_id",
                    StrCat("custom_id '", line.custom_id.substr(0, 128), "' on line ", number, " repeats line ",
                           previous->second, ": every request needs its own"),
                    number);
      }
    }
    input.lines.push_back(std::move(line));
  }
  if (input.lines.empty()) return fail("empty_file", "the file has no request lines", 0);
  return input;
}

std::vector<size_t> PrefixSharingOrder(std::string_view content, const std::vector<BatchLine>& lines) {
  std::vector<std::string_view> keys;
  keys.reserve(lines.size());
  for (const BatchLine& line : lines) {
    const std::string_view text = content.substr(line.offset, line.length);
    size_t from = std::string_view::npos;
    for (std::string_view member : {"\"messages\"", "\"prompt\"", "\"input\""})
      from = std::min(from, text.find(member));
    keys.push_back(from == std::string_view::npos ? text : text.substr(from));
  }
  std::vector<size_t> order(lines.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&keys](size_t a, size_t b) { return keys[a] < keys[b]; });
  return order;
}

ApiOr<Json> LineBody(std::string_view content, const BatchLine& line) {
  API_ASSIGN_OR_RETURN(Json request, ParseJsonObject(content.substr(line.offset, line.length)));
  return std::move(request["body"]);
}

Json ResponseLine(const std::string& custom_id, int status, Json body) {
  const auto id = body.is_object() ? body.find("id") : body.end();
  const std::string request_id = id != body.end() && id->is_string() ? id->get<std::string>() : RandomId("req_");
  return {{"id", RandomId("batch_req_")},
          {"custom_id", custom_id},
          {"response", {{"status_code", status}, {"request_id", request_id}, {"body", std::move(body)}}},
          {"error", nullptr}};
}

Json ErrorLine(const std::string& custom_id, const std::string& code, const std::string& message) {
  return {{"id", RandomId("batch_req_")},
          {"custom_id", custom_id.empty() ? Json(nullptr) : Json(custom_id)},
          {"response", nullptr},
          {"error", {{"code", code}, {"message", message}}}};
}

}  // namespace glint::server
