#include "server/generation_session.h"

#include <algorithm>

namespace glint::server {
namespace {

// Whether a backend's refusal is the server's fault (503) rather than the request's (400): backend.h Submit.
bool ServerFault(ErrorCode code) {
  return code == ErrorCode::kIo || code == ErrorCode::kDataLoss || code == ErrorCode::kUnavailable ||
         code == ErrorCode::kInternal;
}

}  // namespace

// ---- InFlightRegistry ----

bool InFlightRegistry::TryReserve(int64_t sequences) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (draining_ || sequences_ + sequences > capacity_) return false;
  sequences_ += sequences;
  return true;
}

void InFlightRegistry::Release(int64_t sequences) {
  std::lock_guard<std::mutex> lock(mutex_);
  sequences_ -= sequences;
}

void InFlightRegistry::Track(GenerationId id) {
  std::lock_guard<std::mutex> lock(mutex_);
  ids_.insert(id);
}

void InFlightRegistry::Untrack(GenerationId id) {
  std::lock_guard<std::mutex> lock(mutex_);
  ids_.erase(id);
}

std::vector<GenerationId> InFlightRegistry::Drain() {
  std::lock_guard<std::mutex> lock(mutex_);
  draining_ = true;
  return std::vector<GenerationId>(ids_.begin(), ids_.end());
}

bool InFlightRegistry::draining() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return draining_;
}

int64_t InFlightRegistry::requests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(ids_.size());
}

int64_t InFlightRegistry::sequences() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sequences_;
}

// ---- the output queue shared by the session's requests ----

class GenerationSession::Queue {
 public:
  class Sink final : public GenerationSink {
   public:
    Sink(std::shared_ptr<Queue> queue, int tag) : queue_(std::move(queue)), tag_(tag) {}
    void OnOutput(GenerationOutput output) override { queue_->Push(tag_, std::move(output)); }

   private:
    std::shared_ptr<Queue> queue_;
    int tag_;
  };

  void Push(int tag, GenerationOutput output) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      items_.push_back({tag, std::move(output)});
    }
    ready_.notify_one();
  }

  std::optional<Tagged> Pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!ready_.wait_for(lock, timeout, [&] { return !items_.empty(); })) return std::nullopt;
    Tagged item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Tagged> items_;
};

// ---- GenerationSession ----

GenerationSession::GenerationSession(GenerationBackend& backend, InFlightRegistry& registry, ServerMetrics* metrics,
                                     std::unique_ptr<ResponseFormatter> formatter, Clock::time_point arrival)
    : backend_(backend),
      registry_(registry),
      metrics_(metrics),
      formatter_(std::move(formatter)),
      queue_(std::make_shared<Queue>()),
      arrival_(arrival) {}

GenerationSession::~GenerationSession() {
  CancelUnfinished();
  ReportFinished();
  registry_.Release(reserved_sequences_);
  for (GenerationId id : ids_) registry_.Untrack(id);
  if (metrics_ != nullptr) metrics_->SetInFlight(registry_.requests(), registry_.sequences());
}

std::optional<ApiError> GenerationSession::Submit(std::vector<GenerationRequest> requests) {
  int64_t sequences = 0;
  for (const auto& request : requests) sequences += request.n;
  if (registry_.draining()) {
    return ApiError{503, "server_error", "the server is shutting down", "", "service_unavailable"};
  }
  if (!registry_.TryReserve(sequences)) {
    if (metrics_ != nullptr) metrics_->CountRejected();
    return ApiError{429, "rate_limit_error",
                    StrCat("the server is busy: ", registry_.sequences(), " sequences are running or queued (limit ",
                           registry_.capacity(), "); retry later"),
                    "", "server_busy"};
  }
  reserved_sequences_ = sequences;
  samples_per_request_ = requests.empty() ? 1 : requests[0].n;
  for (size_t tag = 0; tag < requests.size(); ++tag) {
    GenerationRequest& request = requests[tag];
    request.sink = std::make_shared<Queue::Sink>(queue_, static_cast<int>(tag));
    const int64_t prompt_size = static_cast<int64_t>(request.prompt.size());
    auto id = backend_.Submit(std::move(request));
    if (!id.ok()) {
      CancelUnfinished();
      ids_.clear();
      finished_.clear();
      if (ServerFault(id.status().code())) {  // damaged weights, a stopping engine: not the client's doing
        return ApiError{503, "server_error", id.status().message(), "", "service_unavailable"};
      }
      const bool too_long =
          id.status().message().find("context") != std::string::npos || id.status().code() == ErrorCode::kOutOfRange;
      return BadRequest(id.status().message(), too_long ? "messages" : "", too_long ? "context_length_exceeded" : "");
    }
    ids_.push_back(*id);
    finished_.push_back(false);
    registry_.Track(*id);
    prompt_tokens_ += prompt_size;
  }
  last_token_.assign(ids_.size() * static_cast<size_t>(samples_per_request_), std::nullopt);
  if (metrics_ != nullptr) metrics_->SetInFlight(registry_.requests(), registry_.sequences());
  return std::nullopt;
}

void GenerationSession::CancelUnfinished() {
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (!finished_[i]) backend_.Cancel(ids_[i]);
  }
}

std::optional<GenerationSession::Tagged> GenerationSession::Next(ClientConnection& connection, bool streaming) {
  while (std::find(finished_.begin(), finished_.end(), false) != finished_.end()) {
    // The connection is checked at least every kPollInterval, also while outputs keep arriving (a non-streaming
    // answer writes nothing until the end, so only this check notices a client that left).
    const auto now = Clock::now();
    if (streaming && now - last_write_ >= keep_alive_interval_) {
      // A long prefill writes nothing: clients and proxies that time out idle streams get a sign of life.
      const std::string keep_alive = formatter_->KeepAlive();
      if (!keep_alive.empty() && !Write(connection, keep_alive)) return std::nullopt;
      last_write_ = now;
    }
    if (now - last_alive_check_ >= kPollInterval) {
      last_alive_check_ = now;
      if (!connection.Alive()) {
        client_gone_ = true;
        CancelUnfinished();
        return std::nullopt;
      }
    }
    auto item = queue_->Pop(kPollInterval);
    if (item) return item;
  }
  return std::nullopt;
}

void GenerationSession::Record(const Tagged& item) {
  const GenerationOutput& output = item.output;
  const auto now = Clock::now();
  if (!first_output_) first_output_ = now;
  if (!output.tokens.empty()) {
    if (!first_token_) first_token_ = now;
    const size_t sample =
        static_cast<size_t>(item.tag) * static_cast<size_t>(samples_per_request_) + static_cast<size_t>(output.index);
    if (sample < last_token_.size()) {
      if (last_token_[sample] && metrics_ != nullptr) {
        metrics_->ObserveInterTokenLatency(std::chrono::duration<double>(now - *last_token_[sample]).count());
      }
      last_token_[sample] = now;
    }
  }
  completion_tokens_ += static_cast<int64_t>(output.tokens.size());
  if (output.finish != GenerationFinish::kNone && output.index == 0) {
    cached_prompt_tokens_ += output.cached_prompt_tokens;
  }
  if (output.finish == GenerationFinish::kCancelled) cancelled_seen_ = true;
  if (output.finish == GenerationFinish::kError && !error_seen_) {
    error_seen_ = true;
    first_error_ = output.error.empty() ? "the engine failed on this request" : output.error;
  }
  if (output.request_finished && item.tag >= 0 && item.tag < static_cast<int>(finished_.size())) {
    finished_[static_cast<size_t>(item.tag)] = true;
  }
}

Json GenerationSession::Usage() const {
  return {{"prompt_tokens", prompt_tokens_},
          {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt_tokens_ + completion_tokens_},
          {"prompt_tokens_details", {{"cached_tokens", cached_prompt_tokens_}}}};
}

bool GenerationSession::Write(ClientConnection& connection, const std::string& events) {
  if (events.empty()) return true;
  last_write_ = Clock::now();
  if (connection.Write(events)) return true;
  client_gone_ = true;
  CancelUnfinished();
  return false;
}

bool GenerationSession::Stream(ClientConnection& connection, bool include_usage) {
  if (!Write(connection, formatter_->StreamStart(Usage()))) return false;
  last_write_ = Clock::now();
  std::vector<Json> chunks;
  while (auto item = Next(connection, /*streaming=*/true)) {
    Record(*item);
    chunks.clear();
    formatter_->OnOutput(item->tag, item->output, chunks);
    if (item->output.finish == GenerationFinish::kError) {
      chunks.push_back(formatter_->StreamError(ApiError{500, "server_error", item->output.error, "", "engine_error"}));
    }
    std::string events;
    for (const Json& chunk : chunks) events += formatter_->EncodeEvent(chunk);
    if (!Write(connection, events)) return false;
  }
  if (client_gone_) return false;
  // Every output is in, so the request is finished: count it in /metrics before the client can see the end (chat's
  // [DONE]), or a client that reads it and then scrapes /metrics (glint bench does, after each level) may miss it.
  ReportFinished();
  return Write(connection, formatter_->StreamEnd(Usage(), include_usage));
}

ApiOr<Json> GenerationSession::Collect(ClientConnection& connection) {
  std::vector<Json> ignored;
  while (auto item = Next(connection)) {
    Record(*item);
    ignored.clear();
    formatter_->OnOutput(item->tag, item->output, ignored);
  }
  if (client_gone_) return ApiError{499, "invalid_request_error", "the client closed the connection", "", ""};
  ReportFinished();
  if (error_seen_) return ApiError{500, "server_error", first_error_, "", "engine_error"};
  // The client is here, so the cancellation came from the server: a shutdown that outlasted its grace period.
  if (cancelled_seen_) {
    return ApiError{503, "server_error", "the request was cancelled: the server is shutting down", "",
                    "service_unavailable"};
  }
  return formatter_->FinalResponse(Usage());
}

void GenerationSession::ReportFinished() {
  if (reported_ || metrics_ == nullptr || ids_.empty()) return;
  reported_ = true;
  const auto now = Clock::now();
  RequestFigures figures;
  const std::vector<std::string> reasons = formatter_->FinishReasons();
  figures.finish_reason = client_gone_ ? "abort" : error_seen_ ? "error" : "stop";
  if (!client_gone_ && !error_seen_) {
    for (const std::string& reason : reasons) {
      if (reason == "length" || reason == "tool_calls") figures.finish_reason = reason;
    }
  }
  figures.api = std::string(formatter_->api());
  figures.prompt_tokens = prompt_tokens_;
  figures.generation_tokens = completion_tokens_;
  figures.cached_prompt_tokens = cached_prompt_tokens_;
  figures.e2e_seconds = std::chrono::duration<double>(now - arrival_).count();
  figures.queue_seconds = std::chrono::duration<double>((first_output_ ? *first_output_ : now) - arrival_).count();
  if (first_token_) figures.first_token_seconds = std::chrono::duration<double>(*first_token_ - arrival_).count();
  metrics_->RequestFinished(figures);
}

}  // namespace glint::server
