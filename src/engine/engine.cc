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
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !submitted_.empty() || !cancelled_.empty() || core_->HasWork(); });
      submitted.swap(submitted_);
      cancelled.swap(cancelled_);
      stopping = stopping_;
    }
    round_started_ns_.store(SteadyNanoseconds(), std::memory_order_relaxed);
    for (auto& [id, request] : submitted) {
      const Status status = core_->Add(id, std::move(request));
      // Validated at Submit; only a duplicate id could fail here, which next_id_ rules out.
      if (!status.ok()) LogError("engine: request ", id, " refused after validation: ", status.message());
    }
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
