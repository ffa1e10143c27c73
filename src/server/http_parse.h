// How the transport reads a request with Boost.Beast's parser: the limits it sets on the parser, the request it
// builds from the parsed message, and the status it answers for each way reading can fail. Shared by the event
// loop (http_transport.cc) and by ParseRequestBytes, which runs the same steps synchronously over a byte string
// (the libFuzzer target tests/fuzz/fuzz_http_request.cc and tests).
#pragma once

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/system/error_code.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/http_message.h"
#include "server/http_transport.h"

namespace glint::server {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// header_limit = max_header_bytes (request line included), body_limit = max_body_bytes (after de-chunking).
void ConfigureParser(RequestParser& parser, const TransportOptions& options);
// Method, target, path, version and headers of a message whose header is complete. An absolute-form target
// ("http://host:port/path?query", RFC 9112 §3.2.2) has its path taken after the authority.
void FillRequestHead(const RequestParser::value_type& message, HttpRequest& request);

// What to answer when reading a request failed: status 0 means the client left (close without a word).
struct ReadFailure {
  int status = 0;
  std::string message;
  std::string code;
};

// The checks on a complete header that Beast's parser leaves to the server (RFC 9112), run before the body is read
// or the request dispatched; a failure is answered and the connection closed, so that no byte after the header is
// ever read as another request (request smuggling):
//   - Transfer-Encoding other than exactly "chunked" (identity, "xchunked", "chunked, identity", gzip, ...):
//     400 — Beast would read such a body as empty and the body as the next request; Transfer-Encoding with
//     Content-Length or in HTTP/1.0: 400;
//   - HTTP/1.1 without a Host header, or any request with more than one: 400;
//   - Expect other than 100-continue: 417.
std::optional<ReadFailure> CheckFraming(const RequestParser::value_type& message);
// An Expect header's value asks for 100 Continue (case-insensitive, spaces trimmed).
bool ExpectsContinue(std::string_view expect);
ReadFailure DescribeReadError(boost::system::error_code error, bool timed_out, const TransportOptions& options);

// One request parsed from `wire` (all bytes that arrived): the request, or the failure; `incomplete` when the
// bytes end before the request does (the transport would keep reading).
struct ParsedRequest {
  std::optional<HttpRequest> request;
  ReadFailure failure;
  bool incomplete = false;
  size_t consumed = 0;  // bytes of `wire` the request took (what follows is the next, pipelined, request)
};
ParsedRequest ParseRequestBytes(std::string_view wire, const TransportOptions& options);

}  // namespace glint::server
