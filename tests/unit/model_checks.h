// Properties every Model implementation must have, checked the same way for each (the fp32 reference in
// model_test.cc, the fast path in fast_model_test.cc).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/trace.h"

namespace glint::testing {

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
