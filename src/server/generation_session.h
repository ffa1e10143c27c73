// One generation request from submission to the last byte, independent of the HTTP library: admission against
// the queue bound, submission to the backend, then either streaming SSE events or collecting the whole response,
// with the client's connection watched so that a client that goes away cancels its request at once.
//
// Why submission is separate from streaming: an error found at submission (queue full, prompt too long) must
// still become an HTTP error status, and a streamed response commits to 200 when its first byte is written.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/backend.h"
#include "server/metrics.h"
#include "server/response_format.h"

namespace glint::server {

// The server's view of what it has handed the backend: bounds the queue (429 beyond it) and lets shutdown cancel
// everything still running.
class InFlightRegistry {
 public:
  // `capacity`: sequences (requests × n) accepted at once = what runs + what may wait.
  explicit InFlightRegistry(int64_t capacity) : capacity_(capacity) {}

  // Reserves room for `sequences`; false when the bound would be passed (or the server is draining).
  bool TryReserve(int64_t sequences);
  void Release(int64_t sequences);
  void Track(GenerationId id);
  void Untrack(GenerationId id);
  // Refuses new reservations from now on; returns the ids still running (to cancel them).
  std::vector<GenerationId> Drain();
  bool draining() const;
  int64_t requests() const;
  int64_t sequences() const;
  int64_t capacity() const { return capacity_; }

 private:
  mutable std::mutex mutex_;
  const int64_t capacity_;
  int64_t sequences_ = 0;
  std::set<GenerationId> ids_;
  bool draining_ = false;
};

// The client end of a response.
class ClientConnection {
 public:
  virtual ~ClientConnection() = default;
  // Sends bytes now; false when the client is gone.
  virtual bool Write(std::string_view data) = 0;
  // False once the client has closed the connection (checked while waiting for outputs).
  virtual bool Alive() = 0;
};

class GenerationSession {
 public:
  using Clock = std::chrono::steady_clock;

  GenerationSession(GenerationBackend& backend, InFlightRegistry& registry, ServerMetrics* metrics,
                    std::unique_ptr<ResponseFormatter> formatter, Clock::time_point arrival);
  // Cancels whatever has not finished and releases the reservation.
  ~GenerationSession();
  GenerationSession(const GenerationSession&) = delete;
  GenerationSession& operator=(const GenerationSession&) = delete;

  // Reserves room and submits every request (their sinks are set here). 429 when the queue is full, 503 while
  // shutting down, 400 when the backend refuses a request (nothing stays submitted then).
  std::optional<ApiError> Submit(std::vector<GenerationRequest> requests);

  // Writes the formatter's head events, then its events as outputs arrive, then its tail (for chat: the usage
  // chunk if asked and `data: [DONE]`), each framed by the formatter; the request is counted in the metrics before
  // that last write. Returns false if the client went away (the requests are cancelled).
  bool Stream(ClientConnection& connection, bool include_usage);

  // Waits for every output; the response JSON, or an error: 500 when the backend failed, 503 when the server
  // cancelled the request (shutdown), 499 when the client went away (nobody reads that one).
  ApiOr<Json> Collect(ClientConnection& connection);

  bool client_gone() const { return client_gone_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const { return completion_tokens_; }
  Json Usage() const;

  // How often the connection is checked while no output arrives.
  static constexpr std::chrono::milliseconds kPollInterval{25};

 private:
  struct Tagged {
    int tag;
    GenerationOutput output;
  };
  class Queue;

  // Waits for the next output; nullopt when all requests have finished or the client is gone.
  std::optional<Tagged> Next(ClientConnection& connection);
  void Record(const Tagged& item);
  void CancelUnfinished();
  void ReportFinished();

  GenerationBackend& backend_;
  InFlightRegistry& registry_;
  ServerMetrics* metrics_;
  std::unique_ptr<ResponseFormatter> formatter_;
  std::shared_ptr<Queue> queue_;
  Clock::time_point arrival_;
  Clock::time_point last_alive_check_;
  std::vector<GenerationId> ids_;
  std::vector<bool> finished_;  // [requests]
  int64_t reserved_sequences_ = 0;
  int64_t prompt_tokens_ = 0;
  int64_t completion_tokens_ = 0;
  int64_t cached_prompt_tokens_ = 0;
  bool client_gone_ = false;
  bool error_seen_ = false;
  bool cancelled_seen_ = false;
  std::string first_error_;
  bool reported_ = false;
  std::optional<Clock::time_point> first_output_;
  std::optional<Clock::time_point> first_token_;
  std::vector<std::optional<Clock::time_point>> last_token_;  // per (tag, sample) for inter-token latency
  int64_t samples_per_request_ = 1;
};

}  // namespace glint::server
