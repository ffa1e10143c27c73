#include "server/batch_routes.h"

#include <charconv>

#include "base/log.h"
#include "server/json_reply.h"
#include "server/multipart.h"

namespace glint::server {
namespace {

constexpr std::string_view kFiles = "/v1/files";
constexpr std::string_view kBatches = "/v1/batches";
void Fail(HttpResponse& res, const ApiError& error) {
  res.status = error.status;
  if (error.status == 429) res.SetHeader("Retry-After", "1");
  res.log_note = error.message.substr(0, 200);
  res.SetContent(ErrorBody(error), kJsonContentType);
}

template <typename T, typename Send>
void ReplyOr(HttpResponse& res, const ApiOr<T>& result, Send send) {
  if (!result.ok()) return Fail(res, result.error());
  send(result.value());
}

void MethodNotAllowed(const HttpRequest& req, HttpResponse& res, const char* allowed) {
  res.SetHeader("Allow", allowed);
  Fail(res, ApiError{405, "invalid_request_error", StrCat(req.method, " ", req.path, ": use ", allowed), "",
                     "method_not_allowed"});
}

void NoSuchEndpoint(const HttpRequest& req, HttpResponse& res) {
  Fail(res, ApiError{404, "invalid_request_error", StrCat("no such endpoint: ", req.method, " ", req.path), "",
                     "not_found"});
}

// The value of `name` in the query string ("" when absent). Values are taken as sent (ids and numbers only).
std::string QueryValue(const HttpRequest& req, std::string_view name) {
  const size_t question = req.target.find('?');
  if (question == std::string::npos) return "";
  std::string_view query = std::string_view(req.target).substr(question + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const size_t equals = pair.find('=');
    if (pair.substr(0, equals) == name)
      return std::string(equals == std::string_view::npos ? "" : pair.substr(equals + 1));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return "";
}

// ?limit=N within [1, 100] (OpenAI's bounds), 20 by default.
ApiOr<int64_t> ListLimit(const HttpRequest& req) {
  const std::string text = QueryValue(req, "limit");
  if (text.empty()) return int64_t{20};
  int64_t limit = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), limit);
  if (error != std::errc() || end != text.data() + text.size() || limit < 1 || limit > 100) {
    return BadRequest("limit must be an integer in [1, 100]", "limit");
  }
  return limit;
}

// POST /v1/files: multipart/form-data with `purpose` ("batch") and `file`.
void Upload(const HttpRequest& req, HttpResponse& res, FileStore& files) {
  auto boundary = MultipartBoundary(req.Header("Content-Type"));
  if (!boundary.ok()) return Fail(res, BadRequest(boundary.status().message(), "file"));
  auto parts = ParseMultipart(req.body, *boundary);
  if (!parts.ok()) return Fail(res, BadRequest(parts.status().message(), "file"));
  const MultipartPart* file = nullptr;
  std::string purpose;
  for (const MultipartPart& part : *parts) {
    if (part.name == "purpose" && purpose.empty()) purpose = std::string(part.data);
    if (part.name == "file" && file == nullptr) file = &part;
  }
  if (purpose != "batch") {
    return Fail(res, BadRequest(StrCat("purpose must be \"batch\" (the only files glint takes), got \"",
                                       purpose.substr(0, 64), "\""),
                                "purpose"));
  }
  if (file == nullptr) return Fail(res, BadRequest("the upload has no 'file' part", "file"));
  std::string filename = file->filename.value_or("upload.jsonl").substr(0, 256);
  ReplyOr(res, files.Create(filename, purpose, file->data, /*upload=*/true),
          [&](const StoredFile& stored) { ReplyJson(res, 200, stored.ToJson()); });
}

void FilesRoute(const HttpRequest& req, HttpResponse& res, FileStore& files) {
  const std::string_view rest = std::string_view(req.path).substr(kFiles.size());
  if (rest.empty()) {
    if (req.method == "POST") return Upload(req, res, files);
    if (req.method != "GET") return MethodNotAllowed(req, res, "GET, POST");
    Json data = Json::array();
    for (const StoredFile& file : files.List(QueryValue(req, "purpose"))) data.push_back(file.ToJson());
    return ReplyJson(res, 200, {{"object", "list"}, {"data", std::move(data)}, {"has_more", false}});
  }
  if (!rest.starts_with("/")) return NoSuchEndpoint(req, res);
  std::string id(rest.substr(1));
  const bool content = id.ends_with("/content");
  if (content) id.resize(id.size() - std::string_view("/content").size());
  if (id.empty() || id.find('/') != std::string::npos) return NoSuchEndpoint(req, res);
  if (content) {
    if (req.method != "GET") return MethodNotAllowed(req, res, "GET");
    return ReplyOr(res, files.Content(id), [&](const std::string& bytes) {
      res.status = 200;
      res.SetContent(bytes, "application/jsonl");
    });
  }
  if (req.method == "GET") {
    return ReplyOr(res, files.Get(id), [&](const StoredFile& file) { ReplyJson(res, 200, file.ToJson()); });
  }
  if (req.method != "DELETE") return MethodNotAllowed(req, res, "GET, DELETE");
  ReplyOr(res, files.Delete(id), [&](const StoredFile& file) {
    ReplyJson(res, 200, {{"id", file.id}, {"object", "file"}, {"deleted", true}});
  });
}

void BatchesRoute(const HttpRequest& req, HttpResponse& res, BatchManager& batches) {
  const std::string_view rest = std::string_view(req.path).substr(kBatches.size());
  const auto send = [&](const Json& batch) { ReplyJson(res, 200, batch); };
  if (rest.empty()) {
    if (req.method == "POST") {
      auto body = ParseJsonObject(req.body);
      if (!body.ok()) return Fail(res, body.error());
      return ReplyOr(res, batches.Create(body.value()), send);
    }
    if (req.method != "GET") return MethodNotAllowed(req, res, "GET, POST");
    auto limit = ListLimit(req);
    if (!limit.ok()) return Fail(res, limit.error());
    return ReplyJson(res, 200, batches.List(QueryValue(req, "after"), limit.value()));
  }
  if (!rest.starts_with("/")) return NoSuchEndpoint(req, res);
  std::string id(rest.substr(1));
  const bool cancel = id.ends_with("/cancel");
  if (cancel) id.resize(id.size() - std::string_view("/cancel").size());
  if (id.empty() || id.find('/') != std::string::npos) return NoSuchEndpoint(req, res);
  if (cancel) {
    if (req.method != "POST") return MethodNotAllowed(req, res, "POST");
    return ReplyOr(res, batches.Cancel(id), send);
  }
  if (req.method != "GET") return MethodNotAllowed(req, res, "GET");
  ReplyOr(res, batches.Get(id), send);
}

bool Under(std::string_view path, std::string_view prefix) {
  return path.starts_with(prefix) && (path.size() == prefix.size() || path[prefix.size()] == '/');
}

}  // namespace

bool IsBatchApiPath(std::string_view path) { return Under(path, kFiles) || Under(path, kBatches); }

bool IsFileUpload(const HttpRequest& head) { return head.method == "POST" && head.path == kFiles; }

std::string BatchApiMetricLabel(std::string_view path) {
  const bool files = Under(path, kFiles);
  const std::string_view prefix = files ? kFiles : kBatches;
  if (path.size() == prefix.size()) return std::string(prefix);
  const std::string_view action = files ? "/content" : "/cancel";
  return StrCat(prefix, "/{id}", path.ends_with(action) ? action : "");
}

void HandleBatchApi(const HttpRequest& req, HttpResponse& res, FileStore& files, BatchManager& batches) {
  if (Under(req.path, kFiles)) return FilesRoute(req, res, files);
  BatchesRoute(req, res, batches);
}

}  // namespace glint::server
