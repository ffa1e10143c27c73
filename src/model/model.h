// The GLM-5.3-Flash text model, fp32 reference forward pass over a ragged batch (model-glm53.md §3).
//
// Each batch entry is one sequence: a span of new tokens continuing from the caches in its SequenceState, which
// the caller owns (the engine pages them later). Logits are computed only for the positions asked for; the final
// normed hidden is returned where MTP needs it. The layer loop in model.cc reads like the model card:
//   X = 4 copies of embed(x)
//   per layer: (attention site) mHC read → RMSNorm → KDA or DSA → mHC write;
//              (FFN site)       mHC read → RMSNorm → dense MLP or MoE → mHC write
//   y = RMSNorm(mean of streams); logits = lm_head · y
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/config.h"
#include "model/dsa.h"
#include "model/ffn.h"
#include "model/kda.h"
#include "model/trace.h"
#include "model/weights.h"

namespace glint {

class Model;

// Every per-sequence cache of the trunk (and of the MTP layer). Created by ReferenceModel::NewSequence.
struct SequenceState {
  const Model* owner = nullptr;           // a state is only valid with the model that created it
  int64_t tokens = 0;                     // positions consumed by the trunk
  std::vector<KdaState> kda;              // [num_hidden_layers]; empty entries for DSA layers
  std::vector<DsaCache> dsa;              // [num_hidden_layers]; empty entries for KDA layers
  DsaCache mtp_dsa;                       // the MTP layer's own latent + indexer cache (pair positions)
  int64_t mtp_tokens = 0;                 // pairs consumed by the MTP layer
};

enum class LogitsWanted { kNone, kLast, kAll };

struct BatchEntry {
  std::span<const int32_t> tokens;  // [T] new tokens, T ≥ 1
  SequenceState* state = nullptr;
  LogitsWanted logits = LogitsWanted::kLast;
  bool want_hidden = false;         // return the final normed hidden [T, D] (MTP input)
};

struct EntryOutput {
  std::vector<float> logits;  // [rows, V]: rows = T (kAll), 1 (kLast) or 0
  std::vector<float> hidden;  // [T, D] when want_hidden
};

// Discrete choices to force instead of computing them (the quality gate of quantized paths compares with the
// choices of the fp32 path): per layer, per new token.
struct ForcedChoices {
  std::vector<std::vector<RouterChoice>> router;                // [layer][token]
  std::vector<std::vector<std::vector<int64_t>>> attended;     // [layer][token] → attended positions
};

struct ForwardOptions {
  KdaAlgorithm kda_algorithm = KdaAlgorithm::kChunked;  // HF: chunked for multi-token calls
  DsaOptions dsa;                                       // naive/absorbed MLA, indexer/dense selection
};

// What the engine knows of a model: the forward pass over a ragged batch and the per-sequence state. The fp32
// ReferenceModel implements it; faster implementations (int8, threads) implement it too and are tested against it.
class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual SequenceState NewSequence() const = 0;

  // Runs the trunk over every entry; outputs[i] belongs to batch[i]. Checks every entry first (token ids in
  // range, T ≥ 1, the state belongs to this model, the context limit) so a bad entry changes no state.
  virtual Status Forward(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                         const ForwardOptions& options = {}, Trace* trace = nullptr,
                         const ForcedChoices* forced = nullptr) const = 0;

  // The MTP layer (§10) over T pairs (h_t, x_{t+1}) continuing the state's MTP cache: hidden [T, D] is the trunk's
  // final normed hidden at positions t, next_tokens [T] the tokens at t+1. Returns draft logits [T, V] for t+2.
  virtual Status MtpForward(SequenceState& state, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                            std::vector<float>& logits, const ForwardOptions& options = {},
                            Trace* trace = nullptr) const = 0;
};

// The checks every Model::Forward makes before touching any state (shared so that all implementations refuse the
// same inputs with the same messages): each entry has tokens, in range, a state created by `model` whose caches
// all hold the sequence's positions, and stays within max_position_embeddings; no two entries share a state.
Status CheckBatch(const Model& model, std::span<const BatchEntry> batch);

// The fp32 reference: plain loops, FP8 weights dequantized to fp32 in memory. The oracle of every fast path.
class ReferenceModel final : public Model {
 public:
  ReferenceModel(ModelConfig config, ModelWeights weights);
  // Reads config.json and the safetensors of `dir`.
  static Result<std::unique_ptr<ReferenceModel>> Load(const std::string& dir, const LoadOptions& options = {});

  const ModelConfig& config() const override { return config_; }
  const ModelWeights& weights() const { return weights_; }
  SequenceState NewSequence() const override;
  Status Forward(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                 const ForwardOptions& options = {}, Trace* trace = nullptr,
                 const ForcedChoices* forced = nullptr) const override;
  Status MtpForward(SequenceState& state, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                    std::vector<float>& logits, const ForwardOptions& options = {},
                    Trace* trace = nullptr) const override;

 private:
  Status ForwardOne(const BatchEntry& entry, int sequence, EntryOutput& output, const ForwardOptions& options,
                    Trace* trace, const ForcedChoices* forced) const;

  ModelConfig config_;
  ModelWeights weights_;
};

}  // namespace glint
