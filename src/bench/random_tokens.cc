#include "bench/random_tokens.h"

namespace glint::bench {

std::vector<int32_t> UniformTokenIds(std::mt19937_64& rng, int64_t vocab, int64_t count) {
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> tokens(count);
  for (int32_t& token : tokens) token = pick(rng);
  return tokens;
}

}  // namespace glint::bench
