// Helpers shared by the kernel tests (gemm_*_test, vector_ops_test): random inputs, activation quantization, the
// ISA levels to compare with the scalar specification.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm_i8.h"
#include "kernels/isa.h"

namespace glint::testing {

// n values ~ N(0, scale²) from a fixed seed: the same inputs on every machine.
inline std::vector<float> Random(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Activations quantized by one level's quantizer, owning their buffers; `view` points into them.
struct QuantizedRows {
  std::vector<int8_t> codes;
  std::vector<float> scales;
  std::vector<int32_t> corrections;
  QuantizedActivations view;
};

// Quantizes x [tokens, x_stride] with `kernels`. The code buffer starts poisoned (99) with a tail beyond the padded
// rows, so a quantizer that leaves any code (padding included) unwritten is seen by the comparisons.
inline QuantizedRows QuantizeRows(const Int8Kernels& kernels, const Int8Layout& layout, const std::vector<float>& x,
                                  int64_t tokens, int64_t x_stride) {
  QuantizedRows q;
  const int64_t padded = layout.padded_cols(), groups = layout.groups();
  q.codes.assign(tokens * padded + 64, 99);
  q.scales.assign(tokens * groups, -1.0f);
  q.corrections.assign(tokens * groups, -1);
  kernels.quantize(x.data(), x_stride, tokens, layout.cols, layout.group, padded, q.codes.data(), q.scales.data(),
                   q.corrections.data());
  q.codes.resize(tokens * padded);
  q.view = {tokens, layout.cols, padded, layout.group, q.codes.data(), q.scales.data(), q.corrections.data()};
  return q;
}

// The levels above scalar that this CPU runs; scalar alone when there are none (it is then checked against itself).
inline std::vector<Isa> FastIsas() {
  std::vector<Isa> isas;
  for (Isa isa : SupportedIsas()) {
    if (isa != Isa::kScalar) isas.push_back(isa);
  }
  if (isas.empty()) isas.push_back(Isa::kScalar);
  return isas;
}

// Test-name suffix of a level parameter.
inline std::string IsaParamName(const ::testing::TestParamInfo<Isa>& info) { return std::string(IsaName(info.param)); }

}  // namespace glint::testing
