#include "engine/engine.h"

#include <chrono>

#include "base/file.h"
#include "base/log.h"

namespace glint {

Engine::Engine(std::unique_ptr<EngineCore> core) : core_(std::move(core)) { metrics_ = core_->Metrics(); }

Result<std::unique_ptr<Engine>> Engine::Start(const Model& model, const EngineOptions& options,
                                              const Tokenizer* tokenizer, ImageEncoder* images) {
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core, EngineCore::Create(model, options, tokenizer, images));
  std::unique_ptr<Engine> engine(new Engine(std::move(core)));
  engine->thread_ = std::thread([raw = engine.get()] { raw->Loop(); });
  return engine;
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

namespace {

int64_t SteadyNanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<RequestId> Engine::Submit(Request request) {
  GLINT_RETURN_IF_ERROR(core_->Validate(request));
  const RequestId id = next_id_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return Unavailable("the engine is stopping");
    submitted_.emplace_back(id, std::move(request));
  }
  wake_.notify_one();
  return id;
}

Result<uint64_t> Engine::Lease(std::vector<int32_t> prompt, double seconds, int64_t local_below, double wait_seconds) {
  const uint64_t id = next_lease_.fetch_add(1);
  auto answer = std::make_shared<std::promise<Status>>();
  std::future<Status> answered = answer->get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return Unavailable("the engine is stopping");
    leases_.push_back({id, std::move(prompt), seconds, local_below, answer});
  }
  wake_.notify_one();
  if (answered.wait_for(std::chrono::duration<double>(wait_seconds)) != std::future_status::ready) {
    ReleaseLease(id);  // in case the engine takes the order later
    return Unavailable("the engine did not take the lease within ", wait_seconds, " s (a long step)");
  }
  GLINT_RETURN_IF_ERROR(answered.get());
  return id;
}

void Engine::ReleaseLease(uint64_t lease) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    leases_.push_back({lease, {}, 0, 0, nullptr});
  }
  wake_.notify_one();
}

void Engine::RunLeaseOrders(std::vector<LeaseOrder>& orders) {
  for (LeaseOrder& order : orders) {
    if (order.answer == nullptr) {
      core_->ReleaseLease(order.id);
    } else {
      const int64_t length = static_cast<int64_t>(order.prompt.size());
      const int64_t cached = core_->CachedPrefix(order.prompt);
      if (order.local_below > 0 && length - cached < order.local_below) {
        order.answer->set_value(FailedPrecondition("the prefix cache holds ", cached, " of its ", length, " tokens"));
        continue;
      }
      order.answer->set_value(core_->Lease(order.id, length, order.seconds));
    }
  }
  core_->ExpireLeases();
}

void Engine::AddSubmitted(std::vector<std::pair<RequestId, Request>>& submitted) {
  for (auto& [id, request] : submitted) {
    std::shared_ptr<RequestSink> sink = request.sink;
    const Status status = core_->Add(id, std::move(request));
    if (status.ok()) continue;
    // Validated at Submit; what only the engine thread can check (the lease of an imported state) fails here.
    LogError("engine: request ", id, " refused: ", status.message());
    RequestOutput output;
    output.request = id;
    output.finish_reason = FinishReason::kError;
    output.error = status.message();
    output.request_finished = true;
    sink->OnOutput(std::move(output));
  }
}

void Engine::Cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_.push_back(id);
  }
  wake_.notify_one();
}

EngineMetrics Engine::Metrics() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return metrics_;
}

void Engine::Loop() {
  for (;;) {
    std::vector<std::pair<RequestId, Request>> submitted;
    std::vector<RequestId> cancelled;
    std::vector<LeaseOrder> leases;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto ready = [&] {
        return stopping_ || !submitted_.empty() || !cancelled_.empty() || !leases_.empty() || core_->HasWork();
      };
      // Leases held while nothing runs expire on time: wake at the next deadline.
      if (const std::optional<double> expiry = core_->SecondsToNextExpiry()) {
        wake_.wait_for(lock, std::chrono::duration<double>(*expiry + 1e-3), ready);
      } else {
        wake_.wait(lock, ready);
      }
      submitted.swap(submitted_);
      cancelled.swap(cancelled_);
      leases.swap(leases_);
      stopping = stopping_;
    }
    round_started_ns_.store(SteadyNanoseconds(), std::memory_order_relaxed);
    RunLeaseOrders(leases);
    AddSubmitted(submitted);
    for (RequestId id : cancelled) core_->Cancel(id);
    if (stopping) {
      core_->FailAll("the engine stopped", FinishReason::kCancelled);
      std::lock_guard<std::mutex> lock(mutex_);
      metrics_ = core_->Metrics();
      return;
    }
    if (core_->HasWork()) {
      const Status status = core_->Step();
      if (!status.ok()) {
        LogError("engine: ", status.ToString(), "; failing every request");
        core_->FailAll(StrCat("internal engine error: ", status.message()));
      }
    }
    round_started_ns_.store(0, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mutex_);
    metrics_ = core_->Metrics();
  }
}

double Engine::SecondsInStep() const {
  const int64_t started = round_started_ns_.load(std::memory_order_relaxed);
  return started == 0 ? 0.0 : static_cast<double>(SteadyNanoseconds() - started) * 1e-9;
}

Status Engine::Damage() const {
  if (MappingFaults() > 0) return MappingDamage();
  return core_->model().WeightsDamage();
}

}  // namespace glint
