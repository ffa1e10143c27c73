#include "server/http_transport.h"

#include <malloc.h>
#include <poll.h>
#include <sys/resource.h>

#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "base/log.h"
#include "server/http_parse.h"
#include "server/worker_pool.h"

namespace glint::server {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using BoostError = boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
// How often a half-closed client's socket is checked for a reset, and how long a closing connection keeps
// reading what the client still sends (closing with unread bytes would reset the connection and could destroy
// the error response before the client reads it).
constexpr std::chrono::milliseconds kPeerCheckInterval{100};
constexpr std::chrono::milliseconds kLingerTime{1000};
constexpr size_t kWatchReadBytes = 4096;
constexpr std::chrono::seconds kTrimInterval{2};

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, seconds) * 1000));
}

// Header values come from handlers; a CR or LF in one would split the response, so they become spaces.
std::string HeaderSafe(std::string_view value) {
  std::string out(value);
  for (char& c : out) {
    if (c == '\r' || c == '\n' || c == '\0') c = ' ';
  }
  return out;
}

// Status line and headers. `length`: Content-Length; nullopt: chunked (HTTP/1.1) or until close (HTTP/1.0).
std::string ResponseHead(const HttpResponse& response, int version, bool close, std::optional<size_t> length) {
  std::string head =
      StrCat(version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ", response.status, " ", ReasonPhrase(response.status), "\r\n");
  if (!response.content_type.empty()) head += StrCat("Content-Type: ", HeaderSafe(response.content_type), "\r\n");
  if (length) {
    head += StrCat("Content-Length: ", *length, "\r\n");
  } else if (version != 10) {
    head += "Transfer-Encoding: chunked\r\n";
  }
  head += close ? "Connection: close\r\n" : "Connection: keep-alive\r\n";
  for (const auto& [name, value] : response.headers) head += StrCat(HeaderSafe(name), ": ", HeaderSafe(value), "\r\n");
  head += "\r\n";
  return head;
}

std::string Chunk(std::string_view data) {
  char size[20];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return StrCat(size, data, "\r\n");
}

}  // namespace

class Connection;

class HttpTransport::Impl {
 public:
  Impl(TransportOptions options, HttpHandler& handler, TransportGauges& gauges)
      : options(std::move(options)),
        handler(handler),
        gauges(gauges),
        work(asio::make_work_guard(io)),
        acceptor(io),
        accept_retry(io),
        trim_timer(io),
        pool(this->options.worker_threads) {}

  Status Bind();
  void Accept();
  void ScheduleTrim();
  void BeginShutdown();
  void Stop();

  const TransportOptions options;
  HttpHandler& handler;
  TransportGauges& gauges;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  tcp::acceptor acceptor;
  asio::steady_timer accept_retry;
  asio::steady_timer trim_timer;
  int64_t closed_since_trim = 0;  // connections closed since memory was last handed back
  Clock::time_point last_accept_warning;
  int port = -1;
  // Touched on the event loop only.
  std::unordered_map<Connection*, std::weak_ptr<Connection>> live;
  bool shutting_down = false;
  std::atomic<bool> shutting_down_flag{false};  // read by worker threads
  // Last: destroyed first, so no worker runs while the loop and the connections go away.
  WorkerPool pool;
};

// One client connection. Every member is touched on the event loop only, except those marked "any thread".
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpTransport::Impl& server, tcp::socket socket)
      : server_(server), socket_(std::move(socket)), timer_(server.io), write_timer_(server.io) {}

  void Start() {
    server_.gauges.connections.fetch_add(1);
    counted_connection_ = true;
    BoostError ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    WaitForRequest();
  }

  // At the connection cap: 503 at once, then close.
  void Refuse() {
    phase_ = Phase::kHandling;
    server_.gauges.rejected_connections.fetch_add(1);
    HttpResponse response = server_.handler.ErrorResponse(
        request_, 503, StrCat("too many connections (limit ", server_.options.max_connections, "); retry later"),
        "too_many_connections");
    response.close = true;
    SendResponse(std::move(response));
  }

  // BeginShutdown: a connection that is not answering a request closes now.
  void CloseIfNotAnswering() {
    if (phase_ == Phase::kIdle || phase_ == Phase::kHeaders || phase_ == Phase::kBody || phase_ == Phase::kLinger) {
      Close();
    }
  }

  void Close();

  // ---- any thread (the request's worker) ----
  bool Alive() const { return !gone_.load(); }
  bool Stream(std::string_view data) {
    if (data.empty()) return Alive();  // an empty chunk would end the body
    return QueueFromWorker(chunked_ ? Chunk(data) : std::string(data), Piece::kData);
  }

  // Runs the handler on a worker thread and hands its response back to the loop.
  void RunHandler() {
    WorkerClient client(*this);
    HttpResponse response = Handle(client);
    auto self = shared_from_this();
    if (!response.stream) {
      asio::post(server_.io,
                 [self, response = std::move(response)]() mutable { self->SendResponse(std::move(response)); });
      return;
    }
    auto stream = std::move(response.stream);
    response.stream = nullptr;
    const bool close = MustClose(response);
    chunked_ = request_.version != 10;
    QueueFromWorker(ResponseHead(response, request_.version, close || !chunked_, std::nullopt), Piece::kStreamHead);
    StreamClient sink(*this);
    stream(sink, response.log_note);
    if (chunked_) QueueFromWorker("0\r\n\r\n", Piece::kStreamEnd);  // fails harmlessly when the client is gone
    asio::post(server_.io, [self, response = std::move(response), close]() mutable {
      self->close_after_ = self->close_after_ || close || !self->chunked_;
      self->HandlerDone(std::move(response));
    });
  }

 private:
  enum class Phase { kIdle, kHeaders, kBody, kHandling, kLinger, kClosed };
  enum class Deadline { kIdle, kRead, kPeerCheck, kLinger };

  enum class Piece {
    kData,
    kHead,        // a whole response (status line, headers, body): no 100 Continue probe after it
    kStreamHead,  // a stream's status line and headers: probes are SSE comments from here
    kStreamEnd,   // the last chunk: nothing may follow
  };
  struct Outgoing {
    std::string bytes;
    bool accounted;  // counted in unsent_bytes_ (written by a worker)
    Piece piece;
  };

  // What a handler sees of the client while it builds the response.
  class WorkerClient final : public ClientConnection {
   public:
    explicit WorkerClient(Connection& connection) : connection_(connection) {}
    bool Write(std::string_view) override { return false; }
    bool Alive() override { return connection_.Alive(); }

   private:
    Connection& connection_;
  };
  // What a stream writes through: each Write is one chunk, subject to the stream buffer bound.
  class StreamClient final : public ClientConnection {
   public:
    explicit StreamClient(Connection& connection) : connection_(connection) {}
    bool Write(std::string_view data) override { return connection_.Stream(data); }
    bool Alive() override { return connection_.Alive(); }

   private:
    Connection& connection_;
  };

  HttpResponse Handle(ClientConnection& client) {
    HttpResponse response;
    try {
      server_.handler.Handle(request_, response, client);
    } catch (const std::exception& e) {  // anything a handler throws becomes a 500, never a crash
      LogError("request handler failed: ", e.what());
      response = server_.handler.ErrorResponse(request_, 500, StrCat("internal error: ", e.what()), "");
    } catch (...) {
      response = server_.handler.ErrorResponse(request_, 500, "internal error", "");
    }
    return response;
  }

  bool MustClose(const HttpResponse& response) const {
    return response.close || !keep_alive_ || server_.shutting_down_flag.load();
  }

  // ---- reading a request ----

  void WaitForRequest() {
    phase_ = Phase::kIdle;
    if (server_.shutting_down || peer_eof_) return Close();
    if (buffer_.size() > 0) return ReadHeaders();  // a pipelined request is already here
    buffer_.shrink_to_fit();  // an idle connection holds no read buffer (Beast reads in steps of up to 64 KiB)
    Arm(server_.options.idle_timeout_seconds, Deadline::kIdle);
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](BoostError error) {
      if (self->phase_ != Phase::kIdle) return;
      if (error) return self->Close();
      self->ReadHeaders();
    });
  }

  void ReadHeaders() {
    phase_ = Phase::kHeaders;
    start_ = Clock::now();
    request_ = HttpRequest{};
    parser_.emplace();
    ConfigureParser(*parser_, server_.options);
    Arm(server_.options.header_timeout_seconds, Deadline::kRead);
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = shared_from_this()](BoostError error, size_t) { self->OnHeaders(error); });
  }

  void FillRequest() {
    FillRequestHead(parser_->get(), request_);
    BoostError error;
    const tcp::endpoint remote = socket_.remote_endpoint(error);
    if (!error) {
      request_.remote_address = remote.address().to_string();
      request_.remote_port = remote.port();
    }
  }

  void OnHeaders(BoostError error) {
    if (phase_ == Phase::kClosed) return;
    // On an error (a Content-Length over the body limit is refused while the headers are read) what arrived is
    // kept too: the request line names the path, so the error gets that API's shape (Anthropic's on /v1/messages).
    if (parser_->is_header_done() || error) FillRequest();
    if (error) return OnReadError(error);
    if (server_.shutting_down) return RefuseDuringShutdown();
    if (auto failure = CheckFraming(parser_->get()))
      return RespondError(failure->status, failure->message, failure->code);
    if (!ApplyBodyLimit()) return;
    if (parser_->is_done()) return Dispatch();
    if (request_.version == 11 && ExpectsContinue(request_.Header("Expect"))) {
      Enqueue({std::string(kContinue), false, Piece::kData});
    }
    phase_ = Phase::kBody;
    Arm(server_.options.body_timeout_seconds, Deadline::kRead);
    http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](BoostError error, size_t) {
      if (self->phase_ == Phase::kClosed) return;
      if (error) return self->OnReadError(error);
      self->Dispatch();
    });
  }

  // The parser was set up with the largest limit any route allows; this request's own (from its path) is applied
  // now, before its body is read: a Content-Length over it is refused at once, a chunked body when it passes it.
  bool ApplyBodyLimit() {
    const size_t handler_limit = server_.handler.BodyLimit(request_);
    const size_t limit = handler_limit == 0 ? server_.options.max_body_bytes : handler_limit;
    const auto length = parser_->content_length();
    if (length && *length > limit) {
      RespondError(413,
                   StrCat("the request body is too large: at most ", limit, " bytes for ", request_.method, " ",
                          EscapeForLog(request_.path.substr(0, 64))),
                   "body_too_large");
      return false;
    }
    parser_->body_limit(static_cast<uint64_t>(limit));
    return true;
  }

  void OnReadError(BoostError error) {
    const ReadFailure failure = DescribeReadError(error, timed_out_, server_.options);
    if (failure.status == 0) return Close();
    RespondError(failure.status, failure.message, failure.code);
  }

  void RespondError(int status, std::string_view message, std::string_view code) {
    Disarm();
    phase_ = Phase::kHandling;
    handler_done_ = false;
    response_started_ = false;
    HttpResponse response = server_.handler.ErrorResponse(request_, status, message, code);
    response.close = true;
    SendResponse(std::move(response));
  }

  void RefuseDuringShutdown() { RespondError(503, "the server is shutting down", "service_unavailable"); }

  // ---- answering ----

  void Dispatch() {
    Disarm();
    phase_ = Phase::kHandling;
    keep_alive_ = parser_->get().keep_alive();
    response_started_ = false;
    streaming_ = false;
    request_.body = parser_->release().body();
    parser_.reset();
    server_.gauges.requests.fetch_add(1);
    counted_request_ = true;
    handler_done_ = false;
    if (server_.handler.RunsOnEventLoop(request_)) {
      WorkerClient client(*this);
      return SendResponse(Handle(client));
    }
    StartWatch();
    server_.pool.Enqueue([self = shared_from_this()] { self->RunHandler(); });
  }

  void SendResponse(HttpResponse response) {
    if (phase_ != Phase::kClosed) {
      const bool close = MustClose(response);
      close_after_ = close_after_ || close;
      const bool head_only = request_.method == "HEAD";
      std::string bytes = ResponseHead(response, request_.version, close, response.body.size());
      if (!head_only) bytes += response.body;
      Enqueue({std::move(bytes), false, Piece::kHead});
    }
    response.body.clear();
    HandlerDone(std::move(response));
  }

  // The handler has produced everything; the request ends when the writes are out (or now, if closed).
  void HandlerDone(HttpResponse response) {
    handler_done_ = true;
    reportable_ = true;
    response_ = std::move(response);
    if (phase_ == Phase::kClosed) return EndRequest();
    MaybeFinish();
  }

  // Logs the request and ends its count; once per response.
  void EndRequest() {
    if (reportable_) {
      server_.handler.Finished(request_, response_, std::chrono::duration<double>(Clock::now() - start_).count());
    }
    if (counted_request_) server_.gauges.requests.fetch_sub(1);
    counted_request_ = false;
    reportable_ = false;
    response_ = HttpResponse{};
  }

  void MaybeFinish() {
    if (!handler_done_ || writing_ || !writes_.empty() || phase_ != Phase::kHandling) return;
    handler_done_ = false;
    EndRequest();
    if (close_after_) return Linger();
    if (watching_) {  // the watch read must end before the next request is read
      resume_after_watch_ = true;
      BoostError ignored;
      socket_.cancel(ignored);
      return;
    }
    WaitForRequest();
  }

  // ---- writing ----

  void Enqueue(Outgoing outgoing) {
    if (phase_ == Phase::kClosed) {
      if (outgoing.accounted) Release(outgoing.bytes.size());
      return;
    }
    if (outgoing.piece != Piece::kData) response_started_ = true;
    if (outgoing.piece == Piece::kStreamHead) streaming_ = chunked_;
    if (outgoing.piece == Piece::kStreamEnd) streaming_ = false;
    writes_.push_back(std::move(outgoing));
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    writing_ = true;
    write_timer_.expires_after(Millis(server_.options.write_timeout_seconds));
    write_timer_.async_wait([self = shared_from_this()](BoostError error) {
      if (!error && self->writing_) self->Close();  // no progress within the write timeout
    });
    asio::async_write(socket_, asio::buffer(writes_.front().bytes),
                      [self = shared_from_this()](BoostError error, size_t) { self->OnWritten(error); });
  }

  void OnWritten(BoostError error) {
    writing_ = false;
    write_timer_.cancel();
    if (phase_ == Phase::kClosed) return;
    const Outgoing done = std::move(writes_.front());
    writes_.pop_front();
    if (done.accounted) Release(done.bytes.size());
    if (error) return Close();
    if (!writes_.empty()) return WriteNext();
    if (phase_ == Phase::kLinger && !handler_done_) return;
    MaybeFinish();
  }

  // From a worker: waits while the stream holds more than stream_buffer_bytes the client has not taken (up to
  // the write timeout), then queues `bytes` for the loop. False when the client is gone or too slow.
  bool QueueFromWorker(std::string bytes, Piece piece) {
    {
      std::unique_lock<std::mutex> lock(stream_mutex_);
      const size_t limit = server_.options.stream_buffer_bytes;
      const bool room = drained_.wait_for(lock, Millis(server_.options.write_timeout_seconds), [&] {
        return gone_.load() || unsent_bytes_ == 0 || unsent_bytes_ + bytes.size() <= limit;
      });
      if (gone_.load()) return false;
      if (!room) {
        lock.unlock();
        LogInfo("closing a stream whose client reads too slowly (", unsent_bytes_, " bytes unsent for ",
                server_.options.write_timeout_seconds, " s)");
        asio::post(server_.io, [self = shared_from_this()] { self->Close(); });
        return false;
      }
      unsent_bytes_ += bytes.size();
    }
    asio::post(server_.io, [self = shared_from_this(), bytes = std::move(bytes), piece]() mutable {
      self->Enqueue({std::move(bytes), true, piece});
    });
    return true;
  }

  void Release(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(stream_mutex_);
      unsent_bytes_ -= std::min(unsent_bytes_, bytes);
    }
    drained_.notify_all();
  }

  void MarkGone() {
    {
      std::lock_guard<std::mutex> lock(stream_mutex_);
      gone_.store(true);
    }
    drained_.notify_all();
  }

  // ---- watching the client while the handler runs ----

  void StartWatch() {
    watching_ = true;
    socket_.async_read_some(buffer_.prepare(kWatchReadBytes),
                            [self = shared_from_this()](BoostError error, size_t n) { self->OnWatch(error, n); });
  }

  void OnWatch(BoostError error, size_t bytes) {
    watching_ = false;
    if (phase_ == Phase::kClosed) return;
    if (phase_ == Phase::kLinger) return error ? Close() : DrainInput();
    if (!error || bytes > 0) buffer_.commit(bytes);  // pipelined bytes: the next request's
    if (resume_after_watch_) {
      resume_after_watch_ = false;
      if (error && error != asio::error::operation_aborted && error != asio::error::eof) return Close();
      if (error == asio::error::eof) peer_eof_ = true;
      return WaitForRequest();
    }
    if (!error) {
      if (buffer_.size() < server_.options.max_header_bytes) StartWatch();  // else stop reading until answered
      return;
    }
    if (error == asio::error::eof) {
      // Half-closed or gone? A peer that closed answers the next bytes with a reset; one that only shut down
      // its sending side takes them. HTTP/1.1 clients accept (and skip) an unrequested 100 Continue, and SSE
      // clients skip a comment line, so a stream still in prefill is probed with one.
      peer_eof_ = true;
      close_after_ = true;
      if (!response_started_ && request_.version == 11) {
        Enqueue({std::string(kContinue), false, Piece::kData});
      } else if (streaming_) {
        Enqueue({Chunk(": probe\n\n"), false, Piece::kData});
      }
      Arm(std::chrono::duration<double>(kPeerCheckInterval).count(), Deadline::kPeerCheck);
      return;
    }
    MarkGone();
    Close();
  }

  void CheckPeer() {
    pollfd entry{socket_.native_handle(), 0, 0};
    if (poll(&entry, 1, 0) > 0 && (entry.revents & (POLLERR | POLLHUP)) != 0) {
      MarkGone();
      return Close();
    }
    Arm(std::chrono::duration<double>(kPeerCheckInterval).count(), Deadline::kPeerCheck);
  }

  // After a response that ends the connection: stop sending, read (and drop) what the client still sends for a
  // moment, then close.
  void Linger() {
    phase_ = Phase::kLinger;
    BoostError ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    Arm(std::chrono::duration<double>(kLingerTime).count(), Deadline::kLinger);
    if (!watching_) DrainInput();
  }

  void DrainInput() {
    watching_ = true;
    socket_.async_read_some(asio::buffer(scratch_), [self = shared_from_this()](BoostError error, size_t) {
      self->watching_ = false;
      if (self->phase_ != Phase::kLinger) return;
      if (error) return self->Close();
      self->DrainInput();
    });
  }

  // ---- deadlines ----

  void Arm(double seconds, Deadline kind) {
    deadline_ = kind;
    timed_out_ = false;
    const uint64_t generation = ++timer_generation_;
    timer_.expires_after(Millis(seconds));
    timer_.async_wait([self = shared_from_this(), generation](BoostError error) {
      if (error || generation != self->timer_generation_ || self->phase_ == Phase::kClosed) return;
      self->OnDeadline();
    });
  }

  void Disarm() {
    ++timer_generation_;
    timer_.cancel();
  }

  void OnDeadline() {
    switch (deadline_) {
      case Deadline::kIdle:
      case Deadline::kLinger:
        return Close();
      case Deadline::kRead: {
        timed_out_ = true;
        BoostError ignored;
        socket_.cancel(ignored);  // the read ends with operation_aborted; OnReadError answers 408
        return;
      }
      case Deadline::kPeerCheck:
        return CheckPeer();
    }
  }

  HttpTransport::Impl& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  asio::steady_timer write_timer_;
  boost::beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  HttpRequest request_;
  HttpResponse response_;  // the response being sent (its body already handed to the writes)
  Clock::time_point start_ = Clock::now();
  Phase phase_ = Phase::kIdle;
  Deadline deadline_ = Deadline::kIdle;
  uint64_t timer_generation_ = 0;
  std::deque<Outgoing> writes_;
  std::array<char, 4096> scratch_{};
  bool timed_out_ = false;
  bool keep_alive_ = true;
  bool close_after_ = false;
  bool writing_ = false;
  bool watching_ = false;
  bool resume_after_watch_ = false;
  bool peer_eof_ = false;
  bool response_started_ = false;
  bool streaming_ = false;  // between a chunked stream's head and its last chunk
  bool handler_done_ = false;
  bool reportable_ = false;  // a response was produced and is not logged yet
  bool counted_request_ = false;
  bool counted_connection_ = false;
  bool chunked_ = true;  // any thread: set by the worker before its first stream write
  // any thread
  std::atomic<bool> gone_{false};
  std::mutex stream_mutex_;
  std::condition_variable drained_;
  size_t unsent_bytes_ = 0;

  friend class HttpTransport::Impl;
};

void Connection::Close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  MarkGone();
  BoostError ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  Disarm();
  write_timer_.cancel();
  for (const Outgoing& outgoing : writes_) {
    if (outgoing.accounted) Release(outgoing.bytes.size());
  }
  // The write in flight keeps its bytes until its handler has run (with operation_aborted).
  while (writes_.size() > (writing_ ? 1u : 0u)) writes_.pop_back();
  if (handler_done_ || !counted_request_) EndRequest();  // else when the worker's response arrives
  server_.live.erase(this);
  ++server_.closed_since_trim;
  if (counted_connection_) server_.gauges.connections.fetch_sub(1);
  counted_connection_ = false;
}

Status HttpTransport::Impl::Bind() {
  BoostError error;
  tcp::resolver resolver(io);
  const auto results = resolver.resolve(options.host, std::to_string(options.port), error);
  if (error || results.empty()) return IoError("cannot resolve the host '", options.host, "': ", error.message());
  const tcp::endpoint endpoint = *results.begin();
  acceptor.open(endpoint.protocol(), error);
  if (!error) acceptor.set_option(tcp::acceptor::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  // A burst of connections must not see SYNs dropped (and retried a second later) at the listen queue.
  if (!error) acceptor.listen(4096, error);
  if (error) {
    return IoError("cannot bind ", options.host, ":", options.port, ": ", error.message(),
                   " (in use, or not an address of this machine)");
  }
  port = acceptor.local_endpoint().port();
  return Status::Ok();
}

void HttpTransport::Impl::Accept() {
  acceptor.async_accept([this](BoostError error, tcp::socket socket) {
    if (!acceptor.is_open() || shutting_down) return;
    if (error) {
      // Out of file descriptors (or another transient failure): try again shortly instead of spinning.
      if (Clock::now() - last_accept_warning > std::chrono::seconds(1)) {  // one line a second, not 20
        last_accept_warning = Clock::now();
        LogWarning("accepting a connection failed: ", error.message(), " (retrying every 50 ms)");
      }
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](BoostError wait_error) {
        if (!wait_error) Accept();
      });
      return;
    }
    auto connection = std::make_shared<Connection>(*this, std::move(socket));
    live.emplace(connection.get(), connection);
    if (gauges.connections.load() >= options.max_connections) {
      connection->Refuse();
    } else {
      connection->Start();
    }
    Accept();
  });
}

// Connection buffers are freed into glibc's arenas, which keep them: after a burst of connections (2,000 idle
// clients, say) the resident size would stay at its peak. Once connections have closed and no request is in
// progress, the free memory is handed back to the system.
void HttpTransport::Impl::ScheduleTrim() {
  trim_timer.expires_after(kTrimInterval);
  trim_timer.async_wait([this](BoostError error) {
    if (error || shutting_down) return;
    if (closed_since_trim > 0 && gauges.requests.load() == 0) {
      closed_since_trim = 0;
      malloc_trim(0);
    }
    ScheduleTrim();
  });
}

void HttpTransport::Impl::BeginShutdown() {
  shutting_down = true;
  shutting_down_flag.store(true);
  BoostError ignored;
  acceptor.close(ignored);
  accept_retry.cancel();
  trim_timer.cancel();
  std::vector<std::shared_ptr<Connection>> connections;
  for (auto& [raw, weak] : live) {
    if (auto connection = weak.lock()) connections.push_back(std::move(connection));
  }
  for (auto& connection : connections) connection->CloseIfNotAnswering();
}

void HttpTransport::Impl::Stop() {
  BeginShutdown();
  std::vector<std::shared_ptr<Connection>> connections;
  for (auto& [raw, weak] : live) {
    if (auto connection = weak.lock()) connections.push_back(std::move(connection));
  }
  for (auto& connection : connections) connection->Close();
  work.reset();
}

HttpTransport::HttpTransport(TransportOptions options, HttpHandler& handler, TransportGauges& gauges)
    : gauges_(gauges), impl_(std::make_unique<Impl>(std::move(options), handler, gauges)) {}

HttpTransport::~HttpTransport() = default;

Status HttpTransport::Bind() { return impl_->Bind(); }
int HttpTransport::port() const { return impl_->port; }

Status HttpTransport::Run() {
  if (impl_->port <= 0) return FailedPrecondition("Run() before a successful Bind()");
  impl_->Accept();
  impl_->ScheduleTrim();
  impl_->io.run();
  return Status::Ok();
}

void HttpTransport::BeginShutdown() {
  impl_->shutting_down_flag.store(true);
  asio::post(impl_->io, [impl = impl_.get()] { impl->BeginShutdown(); });
}

void HttpTransport::Stop() {
  asio::post(impl_->io, [impl = impl_.get()] { impl->Stop(); });
}

int64_t RaiseOpenFileLimit(int64_t connections) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  // Each connection is one descriptor; the model files, the engine and the log need a few hundred more.
  const rlim_t wanted = static_cast<rlim_t>(connections) + 512;
  if (limit.rlim_cur < wanted) {
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  return static_cast<int64_t>(limit.rlim_cur);
}

}  // namespace glint::server
