// The engine: one thread owns the model, the memory and the scheduler; any thread submits requests, cancels them
// and reads metrics; outputs go to each request's sink from the engine thread (docs/engine.md has an example).
//
//   auto engine = Engine::Start(model, options, &tokenizer).value();
//   auto queue = std::make_shared<OutputQueue>();
//   Request request{.prompt = ids, .sink = queue};
//   RequestId id = engine->Submit(std::move(request)).value();   // or a clear error: too long, bad sampling, …
//   for (;;) { RequestOutput out = queue->Pop(); … if (out.request_finished) break; }
//   engine->Cancel(id);                                            // any time, any thread
#pragma once

#include <atomic>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine_core.h"

namespace glint {

class Engine {
 public:
  // Creates the core (capacity planned, pools allocated) and starts the engine thread. `model` and `tokenizer`
  // (optional) must outlive the engine.
  // `images` (optional): the vision tower, which then runs on the engine thread.
  static Result<std::unique_ptr<Engine>> Start(const Model& model, const EngineOptions& options,
                                               const Tokenizer* tokenizer = nullptr, ImageEncoder* images = nullptr);
  // Stops the thread; requests still in flight finish as cancelled.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates the request on the calling thread (errors come back here, nothing is queued) and queues it.
  Result<RequestId> Submit(Request request);
  // Prefill/decode disaggregation (EngineCore::Lease, docs/disaggregation.md): reserves memory for the state of
  // `prompt` (its PrefixKeys when it has images) for `seconds`, on the engine thread; waits for its answer at most
  // `wait_seconds` (an engine in a long step). The id goes into Request::lease of the imported request. With
  // `local_below` > 0 it is refused (FailedPrecondition) when the prefix cache holds all but fewer than `local_below`
  // tokens of the prompt: computing the rest here is cheaper than a transfer.
  Result<uint64_t> Lease(std::vector<int32_t> prompt, double seconds, int64_t local_below = 0,
                         double wait_seconds = 30);
  void ReleaseLease(uint64_t lease);
  // The checks Submit makes, without queueing (thread-safe).
  Status Validate(const Request& request) const { return core_->Validate(request); }
  // EngineCore::PrefixKeys (thread-safe): what Lease takes for a prompt with images.
  std::vector<int32_t> PrefixKeys(const Request& request) const { return core_->PrefixKeys(request); }
  // Cancels a request: its samples finish as cancelled and free their memory at the engine's next step boundary.
  // Unknown or finished ids are ignored.
  void Cancel(RequestId id);
  // A snapshot taken after the latest step.
  EngineMetrics Metrics() const;
  // Seconds the engine thread has spent in its current round (admissions and one step); 0 while it waits for work.
  // A round that does not end (a read that blocks, a model that hangs) grows it without bound: /health reports
  // that engine as stalled (docs/server.md "Health").
  double SecondsInStep() const;
  // Why this engine cannot serve for good, or Ok: a mapped weights file that shrank (base/file.h MappingDamage), or
  // weights read at run time that failed their checksum (Model::WeightsDamage).
  Status Damage() const;
  const CapacityReport& capacity() const { return core_->capacity(); }
  const CacheLayout& layout() const { return core_->layout(); }
  const CacheLayout& transfer_layout() const { return core_->transfer_layout(); }
  int64_t vocab_size() const { return core_->model().config().vocab_size; }
  int64_t hidden_size() const { return core_->model().config().hidden_size; }

 private:
  struct LeaseOrder {
    uint64_t id = 0;
    std::vector<int32_t> prompt;
    double seconds = 0;
    int64_t local_below = 0;
    std::shared_ptr<std::promise<Status>> answer;  // null: a release
  };
  explicit Engine(std::unique_ptr<EngineCore> core);
  void Loop();
  void RunLeaseOrders(std::vector<LeaseOrder>& orders);
  // Adds the submitted requests; one refused here (a lease that expired meanwhile) finishes with the error.
  void AddSubmitted(std::vector<std::pair<RequestId, Request>>& submitted);

  std::unique_ptr<EngineCore> core_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::pair<RequestId, Request>> submitted_;  // guarded by mutex_
  std::vector<RequestId> cancelled_;                      // guarded by mutex_
  std::vector<LeaseOrder> leases_;                        // guarded by mutex_
  std::atomic<uint64_t> next_lease_{1};
  bool stopping_ = false;  // guarded by mutex_
  EngineMetrics metrics_;  // guarded by mutex_
  std::atomic<RequestId> next_id_{1};
  // steady_clock nanoseconds at which the engine thread began its current round; 0 while it waits.
  std::atomic<int64_t> round_started_ns_{0};
  std::thread thread_;
};

}  // namespace glint
