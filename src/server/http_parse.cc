#include "server/http_parse.h"

#include <algorithm>
#include <boost/asio/error.hpp>
#include <boost/beast/http/error.hpp>
#include <cctype>

#include "server/header_text.h"

namespace glint::server {

namespace http = boost::beast::http;
namespace asio = boost::asio;

void ConfigureParser(RequestParser& parser, const TransportOptions& options) {
  parser.header_limit(static_cast<uint32_t>(std::min<size_t>(options.max_header_bytes, UINT32_MAX)));
  parser.body_limit(static_cast<uint64_t>(std::max(options.max_body_bytes, options.max_any_body_bytes)));
}

namespace {

// The origin-form part of a target: itself, or after "scheme://authority" of an absolute-form one ("/" if empty).
std::string_view OriginForm(std::string_view target) {
  const size_t scheme_end = target.find("://");
  if (target.starts_with('/') || scheme_end == std::string_view::npos) return target;
  const size_t path = target.find_first_of("/?", scheme_end + 3);
  if (path == std::string_view::npos) return "/";
  return target[path] == '/' ? target.substr(path) : "/";
}

std::string_view View(boost::beast::string_view text) { return {text.data(), text.size()}; }

ReadFailure BadFraming(std::string message) { return {400, std::move(message), "bad_request"}; }

}  // namespace

bool ExpectsContinue(std::string_view expect) { return AsciiLowercase(TrimSpaceTab(expect)) == "100-continue"; }

std::optional<ReadFailure> CheckFraming(const RequestParser::value_type& message) {
  int hosts = 0, encodings = 0;
  bool length = false;
  std::string encoding;
  for (const auto& field : message) {
    if (field.name() == http::field::host) ++hosts;
    if (field.name() == http::field::content_length) length = true;
    if (field.name() == http::field::transfer_encoding) {
      ++encodings;
      encoding = AsciiLowercase(TrimSpaceTab(View(field.value())));
    }
    if (field.name() == http::field::expect && !ExpectsContinue(View(field.value()))) {
      return ReadFailure{417, "the only Expect this server meets is 100-continue", "expectation_failed"};
    }
  }
  if (encodings > 0 && (encodings > 1 || encoding != "chunked")) {
    return BadFraming(
        "Transfer-Encoding must be exactly 'chunked' (no other coding, no list, one header): the body's length "
        "cannot be known otherwise");
  }
  if (encodings > 0 && (length || message.version() == 10)) {
    return BadFraming("Transfer-Encoding may not come with Content-Length, nor in an HTTP/1.0 request");
  }
  if (hosts > 1) return BadFraming("the request has more than one Host header");
  if (hosts == 0 && message.version() == 11) return BadFraming("an HTTP/1.1 request needs a Host header");
  return std::nullopt;
}

void FillRequestHead(const RequestParser::value_type& message, HttpRequest& request) {
  request.method = std::string(message.method_string());
  request.target = std::string(OriginForm(View(message.target())));
  request.path = request.target.substr(0, request.target.find('?'));
  request.version = message.version() == 10 ? 10 : 11;
  request.headers.clear();
  for (const auto& field : message) request.headers.emplace_back(field.name_string(), field.value());
}

ReadFailure DescribeReadError(boost::system::error_code error, bool timed_out, const TransportOptions& o) {
  if (timed_out) {
    return {408,
            StrCat("the request took too long to arrive (headers within ", o.header_timeout_seconds,
                   " s, the body within ", o.body_timeout_seconds, " s)"),
            "request_timeout"};
  }
  if (error == http::error::header_limit) {
    return {431, StrCat("the request headers are larger than ", o.max_header_bytes, " bytes (request line included)"),
            "headers_too_large"};
  }
  if (error == http::error::body_limit) {
    return {413, StrCat("the request body is too large: at most ", o.max_body_bytes, " bytes (--max-body-bytes)"),
            "body_too_large"};
  }
  if (error == http::error::end_of_stream || error == http::error::partial_message || error == asio::error::eof ||
      error == asio::error::connection_reset || error == asio::error::operation_aborted ||
      error == asio::error::bad_descriptor) {
    return {};  // the client left (or never sent anything)
  }
  return {400, StrCat("malformed HTTP request: ", error.message()), "bad_request"};
}

ParsedRequest ParseRequestBytes(std::string_view wire, const TransportOptions& options) {
  ParsedRequest result;
  RequestParser parser;
  ConfigureParser(parser, options);
  parser.eager(true);
  boost::system::error_code error;
  bool head_checked = false;
  while (!parser.is_done()) {
    const size_t used = parser.put(asio::buffer(wire.data() + result.consumed, wire.size() - result.consumed), error);
    result.consumed += used;
    if (!head_checked && parser.is_header_done()) {
      head_checked = true;
      if (auto failure = CheckFraming(parser.get())) {
        result.failure = std::move(*failure);
        return result;
      }
    }
    if (error == http::error::need_more) {  // every remaining byte was offered: the request is not all here
      result.incomplete = true;
      return result;
    }
    if (error) {
      result.failure = DescribeReadError(error, false, options);
      return result;
    }
    if (used == 0 && result.consumed == wire.size()) {
      result.incomplete = true;
      return result;
    }
  }
  HttpRequest request;
  FillRequestHead(parser.get(), request);
  request.body = parser.release().body();
  result.request = std::move(request);
  return result;
}

}  // namespace glint::server
