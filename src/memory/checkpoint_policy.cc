#include "memory/checkpoint_policy.h"

#include <bit>

namespace glint {

bool TailPolicyKeeps(int64_t index, int64_t newest, int64_t dense) {
  GLINT_CHECK(index >= 1 && newest >= index && dense >= 1) << "checkpoint " << index << " behind " << newest;
  const uint64_t distance = static_cast<uint64_t>(newest - index);
  // level = ⌊log2(⌊r / dense⌋ + 1)⌋: the bit width of (r / dense + 1), minus one.
  const int level = std::bit_width(distance / static_cast<uint64_t>(dense) + 1) - 1;
  return (static_cast<uint64_t>(index) & ((uint64_t{1} << level) - 1)) == 0;
}

int64_t TailPolicyKeptCount(int64_t newest, int64_t dense) {
  int64_t kept = 0;
  for (int64_t index = 1; index <= newest; ++index) kept += TailPolicyKeeps(index, newest, dense) ? 1 : 0;
  return kept;
}

Result<CheckpointPolicy> ParseCheckpointPolicy(std::string_view name) {
  if (name == "tail") return CheckpointPolicy::kTail;
  if (name == "uniform") return CheckpointPolicy::kUniform;
  return InvalidArgument("checkpoint policy '", name, "'; expected tail or uniform");
}

const char* CheckpointPolicyName(CheckpointPolicy policy) {
  return policy == CheckpointPolicy::kTail ? "tail" : "uniform";
}

}  // namespace glint
