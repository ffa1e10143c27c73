// A scripted GenerationBackend for server tests: each sample "generates" the pieces its script returns, one piece
// (one token) per step on its own thread, with the engine's semantics for max_tokens, stop strings, n, logprobs,
// cancellation and the running limit. Records what it was asked, so tests can check cancellation and requests.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/backend.h"

namespace glint::testing {

class FakeBackend final : public server::GenerationBackend {
 public:
  // Pieces sample `index` of `request` generates, in order; the last one ends with "stop" unless max_tokens or a
  // stop string comes first.
  using Script = std::function<std::vector<std::string>(const server::GenerationRequest& request, int64_t index)>;
  // A script piece that makes the sample fail (GenerationFinish::kError) instead of generating.
  static constexpr const char* kFailPiece =
      "\x01"
      "fail";

  FakeBackend(int64_t max_model_len = 4096, int64_t max_running = 4,
              std::chrono::microseconds step = std::chrono::microseconds(200))
      : max_model_len_(max_model_len), max_running_(max_running), step_(step) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeBackend() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  void set_script(Script script) {
    std::lock_guard<std::mutex> lock(mutex_);
    script_ = std::move(script);
  }
  // Pauses generation (requests are accepted and wait) until resumed.
  void set_paused(bool paused) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      paused_ = paused;
    }
    wake_.notify_all();
  }

  // What Health() reports, and an error every Submit returns (Ok: none), as the engine would with damaged weights.
  void set_health(server::BackendHealth health) {
    std::lock_guard<std::mutex> lock(mutex_);
    health_ = std::move(health);
  }
  void set_submit_error(Status error) {
    std::lock_guard<std::mutex> lock(mutex_);
    submit_error_ = std::move(error);
  }
  server::BackendHealth Health() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return health_;
  }

  Result<server::GenerationId> Submit(server::GenerationRequest request) override {
    if (request.prompt.empty()) return InvalidArgument("the prompt is empty");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!submit_error_.ok()) return submit_error_;
    }
    if (static_cast<int64_t>(request.prompt.size()) >= max_model_len_) {
      return OutOfRange("the prompt has ", request.prompt.size(), " tokens but the context limit is ", max_model_len_);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    const server::GenerationId id = next_id_++;
    Active active;
    active.request = request;
    for (int64_t i = 0; i < request.n; ++i) {
      Sample sample;
      sample.pieces = script_ ? script_(request, i) : std::vector<std::string>{"ok"};
      active.samples.push_back(std::move(sample));
    }
    submitted_.push_back(request);
    order_.push_back(id);
    active_.emplace(id, std::move(active));
    wake_.notify_all();
    return id;
  }

  void Cancel(server::GenerationId id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_.insert(id);
    pending_cancel_.insert(id);
    wake_.notify_all();
  }

  server::BackendMetrics Metrics() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    server::BackendMetrics metrics;
    metrics.requests_running = std::min<int64_t>(static_cast<int64_t>(active_.size()), max_running_);
    metrics.requests_waiting = static_cast<int64_t>(active_.size()) - metrics.requests_running;
    metrics.kv_blocks_total = 64;
    metrics.kv_blocks_used = 2 * metrics.requests_running;
    metrics.state_slots_total = max_running_;
    metrics.state_slots_used = metrics.requests_running;
    metrics.steps = steps_;
    return metrics;
  }
  int64_t max_model_len() const override { return max_model_len_; }
  int64_t max_running_sequences() const override { return max_running_; }

  std::vector<server::GenerationRequest> submitted() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return submitted_;
  }
  std::set<server::GenerationId> cancelled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancelled_;
  }
  int64_t active() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(active_.size());
  }
  // Waits until no request is active (or the timeout passes); returns whether it got there.
  bool WaitIdle(std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (active() == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return active() == 0;
  }

 private:
  struct Sample {
    std::vector<std::string> pieces;
    size_t next = 0;
    std::string text;  // emitted so far
    bool done = false;
    int64_t generated = 0;
  };
  struct Active {
    server::GenerationRequest request;
    std::vector<Sample> samples;
  };

  // Emits the next piece of `sample` (or its end) into `output`.
  void Advance(const server::GenerationRequest& request, Sample& sample, server::GenerationOutput& output) {
    if (sample.next >= sample.pieces.size()) {
      output.finish = server::GenerationFinish::kStop;
      return;
    }
    const std::string piece = sample.pieces[sample.next++];
    if (piece == kFailPiece) {  // the engine failing mid-generation
      output.finish = server::GenerationFinish::kError;
      output.error = "scripted failure";
      return;
    }
    const int32_t token = 1 + static_cast<int32_t>(sample.generated % 50);
    ++sample.generated;
    output.tokens.push_back(token);
    if (request.logprobs >= 0) {
      output.logprobs.push_back({token, -0.25f});
      std::vector<server::TokenLogprob> top;
      for (int64_t k = 0; k < request.logprobs; ++k) top.push_back({static_cast<int32_t>(60 + k), -0.5f - k});
      output.top_logprobs.push_back(std::move(top));
    }
    // A stop string ends the text just before it, as the engine does.
    const std::string combined = sample.text + piece;
    for (const std::string& stop : request.stop_strings) {
      const size_t at = combined.find(stop);
      if (at != std::string::npos) {
        output.text = combined.substr(sample.text.size(), at > sample.text.size() ? at - sample.text.size() : 0);
        sample.text = combined.substr(0, at);
        output.finish = server::GenerationFinish::kStop;
        output.stop_string = stop;
        return;
      }
    }
    output.text = piece;
    sample.text = combined;
    if (request.max_tokens > 0 && sample.generated >= request.max_tokens) {
      output.finish = server::GenerationFinish::kLength;
    } else if (static_cast<int64_t>(request.prompt.size()) + sample.generated >= max_model_len_) {
      output.finish = server::GenerationFinish::kLength;
    } else if (sample.next >= sample.pieces.size()) {
      output.finish = server::GenerationFinish::kStop;
    }
  }

  void Loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      wake_.wait_for(lock, step_,
                     [&] { return stopping_ || (!paused_ && !active_.empty()) || !pending_cancel_.empty(); });
      if (stopping_) break;
      std::vector<std::pair<std::shared_ptr<server::GenerationSink>, server::GenerationOutput>> deliveries;
      int64_t running = 0;
      for (auto it = order_.begin(); it != order_.end();) {
        const server::GenerationId id = *it;
        auto found = active_.find(id);
        if (found == active_.end()) {
          it = order_.erase(it);
          continue;
        }
        Active& active = found->second;
        const bool cancel = pending_cancel_.count(id) > 0;
        const bool runs = running < max_running_ && !paused_;
        if (!cancel && !runs) {
          ++it;
          continue;
        }
        ++running;
        bool all_done = true;
        for (size_t i = 0; i < active.samples.size(); ++i) {
          Sample& sample = active.samples[i];
          if (sample.done) continue;
          server::GenerationOutput output;
          output.index = static_cast<int64_t>(i);
          if (cancel) {
            output.finish = server::GenerationFinish::kCancelled;
          } else {
            Advance(active.request, sample, output);
          }
          if (output.finish != server::GenerationFinish::kNone) {
            sample.done = true;
            output.generated_tokens = sample.generated;
          } else {
            all_done = false;
          }
          deliveries.emplace_back(active.request.sink, std::move(output));
        }
        if (all_done) {
          for (auto d = deliveries.rbegin(); d != deliveries.rend(); ++d) {
            if (d->first == active.request.sink) {
              d->second.request_finished = true;
              break;
            }
          }
          active_.erase(found);
          it = order_.erase(it);
        } else {
          ++it;
        }
      }
      ++steps_;
      for (auto cancelled = pending_cancel_.begin(); cancelled != pending_cancel_.end();) {
        cancelled = active_.count(*cancelled) ? std::next(cancelled) : pending_cancel_.erase(cancelled);
      }
      lock.unlock();
      for (auto& [sink, output] : deliveries) {
        if (sink) sink->OnOutput(std::move(output));
      }
      if (!deliveries.empty()) std::this_thread::sleep_for(step_);
      lock.lock();
    }
    // Stopping: finish what is left as cancelled.
    for (auto& [id, active] : active_) {
      for (size_t i = 0; i < active.samples.size(); ++i) {
        if (active.samples[i].done) continue;
        server::GenerationOutput output;
        output.index = static_cast<int64_t>(i);
        output.finish = server::GenerationFinish::kCancelled;
        output.request_finished = i + 1 == active.samples.size();
        if (active.request.sink) active.request.sink->OnOutput(std::move(output));
      }
    }
  }

  const int64_t max_model_len_;
  const int64_t max_running_;
  const std::chrono::microseconds step_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  Script script_;
  std::map<server::GenerationId, Active> active_;
  std::vector<server::GenerationId> order_;
  std::set<server::GenerationId> cancelled_;       // every id Cancel was called with
  std::set<server::GenerationId> pending_cancel_;  // not yet finished as cancelled
  std::vector<server::GenerationRequest> submitted_;
  server::GenerationId next_id_ = 1;
  server::BackendHealth health_;
  Status submit_error_;
  int64_t steps_ = 0;
  bool paused_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace glint::testing
