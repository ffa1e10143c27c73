// The engine (engine/engine.h) as the server's GenerationBackend: requests and outputs are converted field by
// field; the engine's own thread runs the model, its sinks hand outputs to the server's sessions.
#pragma once

#include "engine/engine.h"
#include "server/backend.h"

namespace glint::server {

class EngineBackend final : public GenerationBackend {
 public:
  // `engine` must outlive the backend.
  explicit EngineBackend(Engine& engine) : engine_(engine) {}

  Result<GenerationId> Submit(GenerationRequest request) override;
  void Cancel(GenerationId id) override { engine_.Cancel(id); }
  BackendMetrics Metrics() const override;
  BackendHealth Health() const override;
  int64_t max_model_len() const override { return engine_.capacity().max_model_len; }
  int64_t max_running_sequences() const override { return engine_.capacity().num_slots; }

 private:
  Engine& engine_;
};

}  // namespace glint::server
