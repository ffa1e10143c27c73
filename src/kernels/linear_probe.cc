#include "kernels/linear_probe.h"

#include <algorithm>
#include <random>
#include <vector>

#include "base/timer.h"
#include "kernels/linear.h"

namespace glint {

Int8Matrix RandomInt8Matrix(int64_t rows, int64_t cols, int64_t group, uint64_t seed) {
  Int8Matrix m(Int8Layout{rows, cols, group});
  uint64_t state = seed | 1;
  uint8_t* codes = m.codes();
  for (int64_t i = 0; i < m.layout().code_bytes(); i += 8) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;  // xorshift64
    for (int64_t b = 0; b < 8 && i + b < m.layout().code_bytes(); ++b) {
      codes[i + b] = static_cast<uint8_t>(1 + ((state >> (8 * b)) & 0xff) % 255);
    }
  }
  std::fill(m.scales(), m.scales() + m.layout().scale_count(), 0.01f);
  return m;
}

namespace {

std::vector<float> NormalActivations(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);
  return x;
}

// Calls call(copy) cycling over `copies` weight copies for about `seconds` (at least 5 calls) after one warm pass;
// returns the rate of the median call.
template <typename Call>
LinearRate TimeProduct(const LinearShape& shape, int64_t matrix_bytes, size_t copies, double seconds, Call&& call) {
  for (size_t copy = 0; copy < copies; ++copy) call(copy);  // warm: pages touched, pool threads awake
  std::vector<double> times;
  Stopwatch total;
  for (size_t next = 0; total.Seconds() < seconds || times.size() < 5; next = (next + 1) % copies) {
    Stopwatch watch;
    call(next);
    times.push_back(watch.Seconds());
  }
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  LinearRate rate;
  rate.seconds_per_call = times[times.size() / 2];
  rate.gops = 2.0 * static_cast<double>(shape.rows * shape.cols * shape.tokens) / rate.seconds_per_call / 1e9;
  rate.weight_gbps = static_cast<double>(matrix_bytes) / rate.seconds_per_call / 1e9;
  return rate;
}

size_t CopiesFor(int64_t stream_bytes, int64_t matrix_bytes) {
  return static_cast<size_t>(std::max<int64_t>(1, stream_bytes / matrix_bytes + 1));
}

}  // namespace

LinearRate MeasureLinearI8(WorkerPool& pool, Isa isa, const LinearShape& shape, int64_t stream_bytes, double seconds) {
  const Int8Layout layout{shape.rows, shape.cols, shape.group};
  const int64_t matrix_bytes = layout.code_bytes() + layout.scale_count() * 4;
  std::vector<Int8Matrix> matrices;
  for (size_t i = 0; i < CopiesFor(stream_bytes, matrix_bytes); ++i) {
    matrices.push_back(RandomInt8Matrix(shape.rows, shape.cols, shape.group, i + 1));
  }
  const std::vector<float> x = NormalActivations(shape.tokens * shape.cols);  // [tokens, cols]
  std::vector<float> y(static_cast<size_t>(shape.tokens * shape.rows));       // [tokens, rows]
  ActivationScratch scratch;
  const Int8Kernels& kernels = GetInt8Kernels(isa);
  return TimeProduct(shape, matrix_bytes, matrices.size(), seconds, [&](size_t copy) {
    LinearI8(pool, kernels, matrices[copy].view(), x.data(), shape.cols, shape.tokens, y.data(), shape.rows, scratch);
  });
}

LinearRate MeasureLinearBf16(WorkerPool& pool, Isa isa, const LinearShape& shape, int64_t stream_bytes,
                             double seconds) {
  const Bf16Layout layout{shape.rows, shape.cols};
  const int64_t matrix_bytes = layout.value_count() * 2;
  std::vector<Bf16Matrix> matrices;
  for (size_t i = 0; i < CopiesFor(stream_bytes, matrix_bytes); ++i) {
    Bf16Matrix m(layout);
    std::fill(m.values(), m.values() + layout.value_count(), uint16_t{0x3c23});  // 0.00995: any finite value
    matrices.push_back(std::move(m));
  }
  const std::vector<float> x = NormalActivations(shape.tokens * shape.cols);  // [tokens, cols]
  std::vector<float> y(static_cast<size_t>(shape.tokens * shape.rows));       // [tokens, rows]
  const Bf16Kernels& kernels = GetBf16Kernels(isa);
  return TimeProduct(shape, matrix_bytes, matrices.size(), seconds, [&](size_t copy) {
    LinearBf16(pool, kernels, matrices[copy].view(), x.data(), shape.cols, shape.tokens, y.data(), shape.rows);
  });
}

}  // namespace glint
