#include "bench/http.h"

#include <httplib.h>

#include "bench/sse.h"

namespace glint::bench {
namespace {

constexpr size_t kMaxErrorBodyBytes = 2000;

std::string Origin(const HttpOptions& options) { return options.base.origin; }

std::unique_ptr<httplib::Client> MakeClient(const HttpOptions& options) {
  auto client = std::make_unique<httplib::Client>(Origin(options));
  // httplib writes a request's headers and body separately; with Nagle's algorithm on, the body of a request on a
  // kept-alive connection waits for the ACK of the headers, which the server delays by ~40 ms: a TTFT error far
  // larger than the effects being measured (the fake-server timing test caught it).
  client->set_tcp_nodelay(true);
  if (!options.api_key.empty()) {
    client->set_default_headers({{"Authorization", "Bearer " + options.api_key}});
  }
  const auto connect_us = static_cast<int64_t>(options.connect_timeout_s * 1e6);
  client->set_connection_timeout(connect_us / 1000000, connect_us % 1000000);
  return client;
}

void SetReadTimeout(httplib::Client& client, double seconds) {
  const auto us = static_cast<int64_t>(seconds * 1e6);
  client.set_read_timeout(us / 1000000, us % 1000000);
  client.set_write_timeout(us / 1000000, us % 1000000);
}

// httplib's error names ("Connection", "Read") are terse; say what they mean for a benchmark.
std::string Describe(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "could not connect (Connection)";
    case httplib::Error::ConnectionTimeout:
      return "connection timed out (ConnectionTimeout)";
    case httplib::Error::Read:
      return "reading the reply failed: connection closed or read timeout (Read)";
    case httplib::Error::Write:
      return "sending the request failed (Write)";
    case httplib::Error::Canceled:
      return "cancelled (Canceled)";
    default:
      return httplib::to_string(error);
  }
}

double SecondsSince(Clock::time_point epoch) { return std::chrono::duration<double>(Clock::now() - epoch).count(); }

}  // namespace

Result<BaseUrl> ParseBaseUrl(std::string_view url) {
  const auto expected = " (expected http://host:port or https://host:port, optionally with a path prefix)";
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return InvalidArgument("base URL '", url, "' has no scheme", expected);
  const std::string_view scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    return InvalidArgument("base URL '", url, "' has scheme '", scheme, "'", expected);
  }
  const std::string_view rest = url.substr(scheme_end + 3);
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return InvalidArgument("base URL '", url, "' has a query or fragment", expected);
  }
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  if (authority.empty() || authority.front() == ':') {
    return InvalidArgument("base URL '", url, "' has no host", expected);
  }
  if (authority.find('@') != std::string_view::npos) {
    return InvalidArgument("base URL '", url, "' carries credentials; pass --api-key instead");
  }
  BaseUrl base;
  base.origin = StrCat(scheme, "://", authority);
  std::string prefix = slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash));
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (prefix == "/v1" || (prefix.size() > 3 && prefix.ends_with("/v1"))) {
    return InvalidArgument("base URL '", url, "' ends in /v1: pass the server root (glint bench appends ",
                           "/v1/completions, /tokenize and /metrics itself)");
  }
  base.path_prefix = std::move(prefix);
  return base;
}

HttpClient::HttpClient(const HttpOptions& options, double timeout_s) : options_(options), client_(MakeClient(options)) {
  SetReadTimeout(*client_, timeout_s);
}

HttpClient::~HttpClient() = default;

Result<HttpReply> HttpClient::Get(const std::string& path) {
  const std::string full_path = options_.base.path_prefix + path;
  auto result = client_->Get(full_path);
  if (!result) {
    return IoError("GET ", options_.base.origin, full_path, " failed: ", Describe(result.error()));
  }
  return HttpReply{result->status, result->body};
}

Result<HttpReply> HttpClient::Post(const std::string& path, const std::string& json_body) {
  const std::string full_path = options_.base.path_prefix + path;
  auto result = client_->Post(full_path, json_body, "application/json");
  if (!result) {
    return IoError("POST ", options_.base.origin, full_path, " failed: ", Describe(result.error()));
  }
  return HttpReply{result->status, result->body};
}

Result<nlohmann::json> HttpClient::PostJson(const std::string& path, const nlohmann::json& body) {
  const std::string payload = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  GLINT_ASSIGN_OR_RETURN(HttpReply reply, Post(path, payload));
  if (reply.status != 200) {
    return FailedPrecondition("POST ", path, " returned HTTP ", reply.status, ": ",
                              reply.body.substr(0, kMaxErrorBodyBytes));
  }
  nlohmann::json parsed = nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return InvalidArgument("POST ", path, " returned a body that is not a JSON object: ", reply.body.substr(0, 200));
  }
  return parsed;
}

StreamingClient::StreamingClient(const HttpOptions& options) : options_(options), client_(MakeClient(options)) {
  client_->set_keep_alive(true);  // reuse connections across requests, as load generators' HTTP pools do
}

StreamingClient::~StreamingClient() = default;

void StreamingClient::Poll(Clock::time_point now, bool cancel) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!active_) return;
  if (cancel) {
    cancelled_ = true;
  } else if (now >= deadline_) {
    timed_out_ = true;
  } else {
    return;
  }
  // stop() shuts the socket down under httplib's own lock; the blocked read in Run() then fails at once. Called on
  // every poll while the request is still active, so a request caught between connect and first read also ends.
  client_->stop();
}

namespace {

// What the receiver of one streamed reply has seen so far.
struct StreamState {
  SseParser parser;
  std::string error_body;      // the body of a non-200 reply (bounded)
  std::string stream_failure;  // set when the receiver itself ends the stream (bad data, error event)
  bool saw_done = false;
  bool saw_finish = false;
  double done_s = 0;  // arrival of [DONE], seconds since the epoch
};

// Feeds one piece of a 200 reply to the SSE parser and records its events; false ends the stream (a failure).
// count_logprob_tokens: time one token per logprobs entry (a stream whose tokens decode to no text), else one
// per content chunk.
bool ReceiveEvents(StreamState& stream, std::string_view data, Clock::time_point epoch, bool count_logprob_tokens,
                   RequestRecord& record, std::string& generated_text) {
  auto events = stream.parser.Feed(data);
  const double arrival_s = SecondsSince(epoch);
  if (!events.ok()) {
    stream.stream_failure = events.status().message();
    return false;
  }
  for (const std::string& payload : *events) {
    if (stream.saw_done) break;  // nothing after [DONE] is part of the reply
    auto chunk = ParseStreamChunk(payload);
    if (!chunk.ok()) {
      stream.stream_failure = chunk.status().message();
      return false;
    }
    if (chunk->error) {
      stream.stream_failure = StrCat("the server sent an error inside the stream: ", *chunk->error);
      return false;
    }
    if (chunk->done) {
      stream.saw_done = true;
      stream.done_s = arrival_s;
      continue;
    }
    if (count_logprob_tokens) {
      record.content_times_s.insert(record.content_times_s.end(), static_cast<size_t>(chunk->logprob_tokens),
                                    arrival_s);
    } else if (chunk->has_content) {
      record.content_times_s.push_back(arrival_s);
    }
    generated_text += chunk->text;
    if (chunk->finish_reason) stream.saw_finish = true;
    if (chunk->prompt_tokens) record.usage_prompt_tokens = chunk->prompt_tokens;
    if (chunk->completion_tokens) record.usage_completion_tokens = chunk->completion_tokens;
  }
  return true;
}

// The request's outcome and error, from what ended it: the watchdog, the status, the stream, the transport.
void ClassifyOutcome(const StreamState& stream, bool sent, httplib::Error error, bool cancelled, bool timed_out,
                     double timeout_s, RequestRecord& record) {
  if (cancelled) {
    record.outcome = Outcome::kCancelled;
    record.error = "abandoned at Ctrl-C";
  } else if (timed_out) {
    record.outcome = Outcome::kTimeout;
    record.error = StrCat("no complete reply within ", timeout_s, " s (", record.content_times_s.size(),
                          " content chunks received)");
  } else if (record.http_status > 0 && record.http_status != 200) {
    record.outcome = Outcome::kHttpError;
    record.error = StrCat("HTTP ", record.http_status, ": ", stream.error_body);
  } else if (!stream.stream_failure.empty()) {
    record.outcome = Outcome::kBadResponse;
    record.error = stream.stream_failure;
  } else if (!sent && record.http_status <= 0) {
    record.outcome = (error == httplib::Error::Connection || error == httplib::Error::ConnectionTimeout)
                         ? Outcome::kConnectionFailed
                         : Outcome::kDisconnected;
    record.error = StrCat("request failed before a reply: ", Describe(error));
  } else if (!stream.saw_done && (!sent || !stream.saw_finish)) {
    // A reply is complete at [DONE] (or, from a server that omits [DONE], at a finish_reason on a cleanly closed
    // stream); a transport error after [DONE] does not matter.
    record.outcome = Outcome::kDisconnected;
    record.error = StrCat("the stream ended before [DONE] after ", record.content_times_s.size(), " content chunks",
                          sent ? "" : StrCat(": ", Describe(error)));
  } else if (record.content_times_s.empty()) {
    record.outcome = Outcome::kNoContent;
    record.error = "the stream ended without any generated content";
  } else {
    record.outcome = Outcome::kOk;
  }
}

}  // namespace

void StreamingClient::Run(const std::string& path, const std::string& json_body, double timeout_s,
                          Clock::time_point epoch, RequestRecord& record, std::string& generated_text) {
  // The watchdog's deadline is the real timeout; the socket read timeout is a backstop one second later.
  SetReadTimeout(*client_, timeout_s + 1.0);
  timed_out_ = false;
  cancelled_ = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    active_ = true;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  }
  StreamState stream;
  httplib::Request request;
  request.method = "POST";
  request.path = options_.base.path_prefix + path;
  request.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  request.body = json_body;
  request.response_handler = [&](const httplib::Response& response) {
    record.http_status = response.status;
    return true;
  };
  request.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    if (cancelled_ || timed_out_) return false;
    if (record.http_status != 200) {
      std::string& body = stream.error_body;
      body.append(data, std::min(length, kMaxErrorBodyBytes - std::min(body.size(), kMaxErrorBodyBytes)));
      return true;
    }
    return ReceiveEvents(stream, std::string_view(data, length), epoch, options_.count_logprob_tokens, record,
                         generated_text);
  };
  record.start_s = SecondsSince(epoch);
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  // A kept-alive connection that the server closed between two requests fails the next send before any byte of a
  // reply (llama-server did so to one request in four or five of the peer comparison's). As HTTP clients' pools do
  // (Go's net/http, urllib3), such a request goes once more on a fresh connection: only when the connection was a
  // reused one and nothing came back. A reply begun, a timeout, a cancel or a second failure is final.
  const bool reused = client_->is_socket_open() != 0;
  bool sent = client_->send(request, response, error);
  if (!sent && reused && record.http_status <= 0 && record.content_times_s.empty() && !cancelled_ && !timed_out_ &&
      (error == httplib::Error::Read || error == httplib::Error::Write)) {
    ++record.stale_connection_retries;
    response = httplib::Response();
    error = httplib::Error::Success;
    sent = client_->send(request, response, error);
  }
  record.end_s = stream.saw_done ? stream.done_s : SecondsSince(epoch);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    active_ = false;
  }
  ClassifyOutcome(stream, sent, error, cancelled_, timed_out_, timeout_s, record);
}

}  // namespace glint::bench
