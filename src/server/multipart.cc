#include "server/multipart.h"

#include <algorithm>
#include <cctype>
#include <functional>

#include "server/header_text.h"

namespace glint::server {
namespace {

constexpr std::string_view kCrlf = "\r\n";
constexpr size_t kMaxBoundary = 70;  // RFC 2046 §5.1.1

// A header's `; key=value` parameters after its first token: `key` → value, quotes and backslash escapes removed.
// Keys are lowercased; the first of a repeated key wins.
std::vector<std::pair<std::string, std::string>> Parameters(std::string_view value) {
  std::vector<std::pair<std::string, std::string>> parameters;
  size_t at = value.find(';');
  while (at != std::string_view::npos && at < value.size()) {
    ++at;  // past ';'
    const size_t equals = value.find('=', at);
    if (equals == std::string_view::npos) break;
    const std::string key = AsciiLowercase(TrimSpaceTab(value.substr(at, equals - at)));
    size_t cursor = equals + 1;
    while (cursor < value.size() && (value[cursor] == ' ' || value[cursor] == '\t')) ++cursor;
    std::string parsed;
    if (cursor < value.size() && value[cursor] == '"') {
      for (++cursor; cursor < value.size() && value[cursor] != '"'; ++cursor) {
        if (value[cursor] == '\\' && cursor + 1 < value.size()) ++cursor;
        parsed.push_back(value[cursor]);
      }
      at = value.find(';', cursor);
    } else {
      const size_t end = value.find(';', cursor);
      parsed = std::string(TrimSpaceTab(value.substr(cursor, end == std::string_view::npos ? end : end - cursor)));
      at = end;
    }
    const bool seen = std::any_of(parameters.begin(), parameters.end(), [&](const auto& p) { return p.first == key; });
    if (!seen) parameters.emplace_back(key, std::move(parsed));
  }
  return parameters;
}

const std::string* FindParameter(const std::vector<std::pair<std::string, std::string>>& parameters,
                                 std::string_view key) {
  for (const auto& [name, value] : parameters) {
    if (name == key) return &value;
  }
  return nullptr;
}

// The media type of a header value: its first token, lowercased.
std::string MediaType(std::string_view value) { return AsciiLowercase(TrimSpaceTab(value.substr(0, value.find(';')))); }

// One part's header block (without the blank line): Content-Disposition and Content-Type into `part`.
Status ParsePartHeaders(std::string_view headers, size_t index, MultipartPart& part) {
  bool disposition = false;
  while (!headers.empty()) {
    const size_t end = headers.find(kCrlf);
    const std::string_view line = headers.substr(0, end);
    headers = end == std::string_view::npos ? std::string_view() : headers.substr(end + kCrlf.size());
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      return InvalidArgument("multipart part ", index + 1, ": a header line without ':'");
    }
    const std::string name = AsciiLowercase(TrimSpaceTab(line.substr(0, colon)));
    const std::string_view value = TrimSpaceTab(line.substr(colon + 1));
    if (name == "content-type") part.content_type = std::string(value);
    if (name != "content-disposition" || disposition) continue;
    disposition = true;
    if (MediaType(value) != "form-data") {
      return InvalidArgument("multipart part ", index + 1, ": Content-Disposition must be form-data");
    }
    const auto parameters = Parameters(value);
    if (const std::string* field = FindParameter(parameters, "name")) part.name = *field;
    if (const std::string* file = FindParameter(parameters, "filename")) part.filename = *file;
  }
  if (!disposition || part.name.empty()) {
    return InvalidArgument("multipart part ", index + 1, ": no Content-Disposition: form-data with a name");
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> MultipartBoundary(std::string_view content_type) {
  if (MediaType(content_type) != "multipart/form-data") {
    return InvalidArgument("expected Content-Type multipart/form-data, got '", content_type.substr(0, 100), "'");
  }
  const auto parameters = Parameters(content_type);
  const std::string* boundary = FindParameter(parameters, "boundary");
  if (boundary == nullptr || boundary->empty()) {
    return InvalidArgument("the multipart/form-data Content-Type has no boundary parameter");
  }
  if (boundary->size() > kMaxBoundary) {
    return InvalidArgument("the multipart boundary is ", boundary->size(), " characters; at most ", kMaxBoundary);
  }
  return *boundary;
}

Result<std::vector<MultipartPart>> ParseMultipart(std::string_view body, std::string_view boundary,
                                                  const MultipartLimits& limits) {
  if (boundary.empty() || boundary.size() > kMaxBoundary) return InvalidArgument("bad multipart boundary");
  // Every delimiter but a first one at the very start of the body is CRLF "--" boundary (RFC 2046 §5.1.1).
  const std::string delimiter = std::string(kCrlf) + "--" + std::string(boundary);
  const std::boyer_moore_searcher searcher(delimiter.begin(), delimiter.end());
  // A delimiter is followed by "--" (the last), or by optional spaces and CRLF; other bytes after the boundary
  // text make it part of the data.
  const auto ends_delimiter = [&](size_t at) {
    std::string_view after = body.substr(at);
    if (after.starts_with("--")) return true;
    while (!after.empty() && (after.front() == ' ' || after.front() == '\t')) after.remove_prefix(1);
    return after.starts_with(kCrlf);
  };
  const auto find_delimiter = [&](size_t from) -> size_t {
    auto found = std::search(body.begin() + static_cast<std::ptrdiff_t>(from), body.end(), searcher);
    while (found != body.end() && !ends_delimiter(static_cast<size_t>(found - body.begin()) + delimiter.size())) {
      found = std::search(found + 1, body.end(), searcher);
    }
    return found == body.end() ? std::string_view::npos : static_cast<size_t>(found - body.begin());
  };
  size_t cursor = 0;  // just past a delimiter
  const std::string_view opening = std::string_view(delimiter).substr(kCrlf.size());
  if (body.starts_with(opening)) {
    cursor = opening.size();
  } else {
    const size_t first = find_delimiter(0);
    if (first == std::string_view::npos) return InvalidArgument("the multipart body has no opening boundary");
    cursor = first + delimiter.size();
  }
  std::vector<MultipartPart> parts;
  while (true) {
    if (body.substr(cursor).starts_with("--")) return parts;  // the closing delimiter
    // Transport padding (spaces and tabs) may follow a delimiter before its CRLF.
    while (cursor < body.size() && (body[cursor] == ' ' || body[cursor] == '\t')) ++cursor;
    if (!body.substr(cursor).starts_with(kCrlf)) {
      return InvalidArgument("multipart: a boundary line is not followed by CRLF (or the body ends early)");
    }
    cursor += kCrlf.size();
    if (parts.size() == limits.max_parts) return InvalidArgument("multipart: more than ", limits.max_parts, " parts");
    // The blank line is looked for only as far as the header limit allows, so a part without one costs no scan of
    // the whole body.
    const bool headers_empty = body.substr(cursor).starts_with(kCrlf);
    const std::string_view window = body.substr(cursor, limits.max_part_header_bytes + 4);
    const size_t header_bytes = headers_empty ? 0 : window.find("\r\n\r\n");
    if (header_bytes == std::string_view::npos) {
      return InvalidArgument("multipart part ", parts.size() + 1, ": its headers do not end with a blank line within ",
                             limits.max_part_header_bytes, " bytes");
    }
    const size_t data_start = cursor + (headers_empty ? 2 : header_bytes + 4);
    MultipartPart part;
    GLINT_RETURN_IF_ERROR(ParsePartHeaders(body.substr(cursor, header_bytes), parts.size(), part));
    // From two bytes back: a part with no data may have its delimiter right after the blank line.
    const size_t data_end = find_delimiter(data_start - kCrlf.size());
    if (data_end == std::string_view::npos) {
      return InvalidArgument("multipart part ", parts.size() + 1, " ('", part.name.substr(0, 64),
                             "') is not closed by a boundary: the body ends early");
    }
    // An empty part's CRLF before the delimiter is the one that ended its headers. Its data is still a view into the
    // body (an empty one at the delimiter), never a null view: callers compare positions against the body.
    part.data = data_end < data_start ? body.substr(data_end, 0) : body.substr(data_start, data_end - data_start);
    parts.push_back(std::move(part));
    cursor = data_end + delimiter.size();
  }
}

}  // namespace glint::server
