// A hook for dumping named intermediates of a forward pass, with the golden files' names
// (`hidden.emb`, `layer.<l>.attn_in`, `layer.<l>.attn_out`, `layer.<l>.ffn_in`, `layer.<l>.ffn_out`,
// `layer.<l>.streams`, `final.normed`, `layer.<l>.indexer_selected`, `layer.<l>.moe_experts`, `mtp.*`).
// Tests compare them layer by layer; `glint score --dump-logits` writes logits through the same names.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace glint {

class Trace {
 public:
  virtual ~Trace() = default;
  // Whether the forward pass should record for batch entry `sequence` (the pass skips the work otherwise).
  virtual bool Wants(int sequence) const { return sequence == 0; }
  // A float tensor of `shape` (row-major), e.g. [T, D] for the new tokens of one sequence.
  virtual void Floats(int sequence, const std::string& name, std::span<const float> values,
                      std::vector<int64_t> shape) = 0;
  // An integer tensor, e.g. selected positions [T, W] padded with −1, or chosen experts [T, k].
  virtual void Ints(int sequence, const std::string& name, std::span<const int32_t> values,
                    std::vector<int64_t> shape) = 0;
};

}  // namespace glint
