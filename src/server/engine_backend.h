// The engine (engine/engine.h) as the server's GenerationBackend: requests and outputs are converted field by
// field; the engine's own thread runs the model, its sinks hand outputs to the server's sessions.
#pragma once

#include <atomic>
#include <optional>

#include "engine/engine.h"
#include "server/backend.h"
#include "server/state_transfer.h"
#include "server/transfer_phases.h"

namespace glint::server {

// The decode role of prefill/decode disaggregation (docs/disaggregation.md).
struct DecodeRole {
  TransferLayout layout;  // this engine's
  TransferTimeouts timeouts;
  int64_t local_prefill_below = 0;    // prompts shorter than this prefill here (a request's header can change it)
  bool fail_without_prefill = false;  // --pd-fallback fail: a failed transfer fails the request (else: local prefill)
  std::shared_ptr<const TransferSecret> secret;  // --transfer-secret-file: prefill servers must prove it (null: none)
};

// A prompt below this many tokens is prefilled on the decode server by default (X-Glint-Local-Prefill-Below and the
// router's --local-prefill-below change it): below it, moving the state costs more than computing it. A first
// estimate, not yet measured on a quiet machine (docs/disaggregation.md "When it pays").
inline constexpr int64_t kDefaultLocalPrefillBelow = 256;

class EngineBackend final : public GenerationBackend {
 public:
  // `engine` must outlive the backend. `decode`: this server decodes for prefill servers (null: it does not).
  explicit EngineBackend(Engine& engine, std::optional<DecodeRole> decode = std::nullopt)
      : engine_(engine), decode_(std::move(decode)) {}

  Result<GenerationId> Submit(GenerationRequest request) override;
  void Cancel(GenerationId id) override { engine_.Cancel(id); }
  BackendMetrics Metrics() const override;
  BackendHealth Health() const override;
  int64_t max_model_len() const override { return engine_.capacity().max_model_len; }
  int64_t max_running_sequences() const override { return engine_.capacity().num_slots; }
  // A prefill server: its transfer plane, whose counters Metrics reports (not owned; outlives the backend's use).
  void set_transfer_server(const TransferServer* transfer) { transfer_ = transfer; }

 private:
  // A request that names a prefill server: the state fetched into a lease, or the reason it is prefilled here
  // (counted and logged); an error only with --pd-fallback fail. `laps`: set when the state was fetched, its phases
  // up to the state held (the import phase ends with the first token out).
  Status ImportState(const GenerationRequest& request, Request& converted, std::optional<PhaseLaps>& laps);

  Engine& engine_;
  std::optional<DecodeRole> decode_;
  const TransferServer* transfer_ = nullptr;
  std::atomic<int64_t> pd_transfers_{0}, pd_bytes_{0}, pd_local_{0}, pd_failures_{0}, pd_nanoseconds_{0};
  std::atomic<int64_t> pd_authentication_failures_{0};
  // The phases of each imported state, observed as its first token goes out (on the engine thread: shared).
  std::shared_ptr<PhaseHistograms> decode_phases_ = std::make_shared<PhaseHistograms>(kDecodePhaseNames);
};

}  // namespace glint::server
