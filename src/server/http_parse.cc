#include "server/http_parse.h"

#include <boost/asio/error.hpp>
#include <boost/beast/http/error.hpp>

namespace glint::server {

namespace http = boost::beast::http;
namespace asio = boost::asio;

void ConfigureParser(RequestParser& parser, const TransportOptions& options) {
  parser.header_limit(static_cast<uint32_t>(std::min<size_t>(options.max_header_bytes, UINT32_MAX)));
  parser.body_limit(static_cast<uint64_t>(options.max_body_bytes));
}

void FillRequestHead(const RequestParser::value_type& message, HttpRequest& request) {
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
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
  while (!parser.is_done()) {
    const size_t used = parser.put(asio::buffer(wire.data() + result.consumed, wire.size() - result.consumed), error);
    result.consumed += used;
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
