// Properties every Model implementation must have, checked the same way for each (the fp32 reference in
// model_test.cc, the fast path in fast_model_test.cc).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/trace.h"

namespace glint::testing {

// A Model that hands everything to `inner` (not owned; the sequences are inner's): the base of test wrappers that
// watch or record some calls. Forward and MtpForward pass the call on; MtpForwardBatch is Model's default (one
// MtpForward per entry) unless a wrapper overrides it.
class ForwardingModel : public Model {
 public:
  explicit ForwardingModel(const Model& inner) : inner_(&inner) {}
  EngineMirror* engine_mirror() const override { return inner_->engine_mirror(); }
  const ModelConfig& config() const override { return inner_->config(); }
  bool has_mtp() const override { return inner_->has_mtp(); }
  Result<CacheLayout> CacheLayoutFor(const CacheOptions& options) const override {
    return inner_->CacheLayoutFor(options);
  }
  SequenceState NewSequence() const override { return inner_->NewSequence(); }
  SequenceState BindSequence(std::shared_ptr<const CacheLayout> layout, SequenceMemory memory, int64_t tokens,
                             int64_t mtp_tokens) const override {
    return inner_->BindSequence(std::move(layout), memory, tokens, mtp_tokens);
  }
  Status Forward(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                 const ForwardOptions& options = {}, Trace* trace = nullptr,
                 const ForcedChoices* forced = nullptr) const override {
    return inner_->Forward(batch, outputs, options, trace, forced);
  }
  Status MtpForward(SequenceState& state, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                    std::vector<float>& logits, const ForwardOptions& options = {}, Trace* trace = nullptr,
                    const MtpReplacedEmbeddings& replaced = {}) const override {
    return inner_->MtpForward(state, hidden, next_tokens, logits, options, trace, replaced);
  }

 protected:
  const Model& inner() const { return *inner_; }

 private:
  const Model* inner_;
};

// Keeps every traced value of sequence 0, by name, in call order.
class RecordingTrace : public Trace {
 public:
  bool Wants(int sequence) const override { return sequence == 0; }
  void Floats(int, const std::string& name, std::span<const float> values, std::vector<int64_t>) override {
    floats[name].insert(floats[name].end(), values.begin(), values.end());
  }
  void Ints(int, const std::string& name, std::span<const int32_t> values, std::vector<int64_t>) override {
    ints[name].insert(ints[name].end(), values.begin(), values.end());
  }
  std::map<std::string, std::vector<float>> floats;
  std::map<std::string, std::vector<int32_t>> ints;
};

// The discrete choices (routed experts, attended positions) of one `tokens`-token sequence's Forward, from its
// trace, to force on another run of it.
ForcedChoices ForcedChoicesOf(const RecordingTrace& trace, const ModelConfig& c, int64_t tokens);

// Prefix-cache state checkpoints written inside one Forward call (BatchEntry::checkpoints at positions 40 and 64
// of a 70-token call, block size 8) equal, byte for byte, the state of a sequence whose calls end at those
// positions; the logits after the call do not change; an unaligned checkpoint is refused and changes nothing.
void ExpectCheckpointsInsideACallEqualTheStateAtThatPosition(const Model& model);

// Top-1 agreement and KL(p_reference ‖ p_other) of next-token distributions, accumulated over rows of logits.
struct Agreement {
  int64_t rows = 0, top1_equal = 0;
  double kl_sum = 0;
  double top1() const { return static_cast<double>(top1_equal) / rows; }
  double mean_kl() const { return kl_sum / rows; }
};
// reference, other: logits [rows, vocab]; KL in nats, per row in double.
void Accumulate(const std::vector<float>& reference, const std::vector<float>& other, int64_t vocab, Agreement& a);

}  // namespace glint::testing
