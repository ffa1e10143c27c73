// Highway implementations of vector_ops.h. The SSE levels are not compiled: x86-64 CPUs without AVX2 take the
// scalar (EMU128/SCALAR) path, which keeps the number of generated variants (and the build time) down.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/vector_ops.cc"
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL)
#endif
#include "kernels/vector_ops.h"

#include <algorithm>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace glint::vec {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;

float Dot(const float* a, const float* b, int64_t n) {
  const D d;
  const int64_t lanes = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + lanes), hn::LoadU(d, b + i + lanes), s1);
    s2 = hn::MulAdd(hn::LoadU(d, a + i + 2 * lanes), hn::LoadU(d, b + i + 2 * lanes), s2);
    s3 = hn::MulAdd(hn::LoadU(d, a + i + 3 * lanes), hn::LoadU(d, b + i + 3 * lanes), s3);
  }
  for (; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    s0 = hn::MulAdd(hn::MaskedLoad(mask, d, a + i), hn::MaskedLoad(mask, d, b + i), s0);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
}

float SumSquares(const float* x, int64_t n) { return Dot(x, x, n); }

void DotRows(const float* rows, int64_t count, int64_t stride, const float* x, int64_t n, float* out) {
  const D d;
  const int64_t lanes = hn::Lanes(d);
  int64_t r = 0;
  for (; r + 4 <= count; r += 4) {  // four rows share each load of x
    const float* r0 = rows + r * stride;
    auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
    for (int64_t i = 0; i < n; i += lanes) {
      const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
      const auto xv = hn::MaskedLoad(mask, d, x + i);
      s0 = hn::MulAdd(hn::MaskedLoad(mask, d, r0 + i), xv, s0);
      s1 = hn::MulAdd(hn::MaskedLoad(mask, d, r0 + stride + i), xv, s1);
      s2 = hn::MulAdd(hn::MaskedLoad(mask, d, r0 + 2 * stride + i), xv, s2);
      s3 = hn::MulAdd(hn::MaskedLoad(mask, d, r0 + 3 * stride + i), xv, s3);
    }
    out[r] = hn::GetLane(hn::SumOfLanes(d, s0));
    out[r + 1] = hn::GetLane(hn::SumOfLanes(d, s1));
    out[r + 2] = hn::GetLane(hn::SumOfLanes(d, s2));
    out[r + 3] = hn::GetLane(hn::SumOfLanes(d, s3));
  }
  for (; r < count; ++r) out[r] = Dot(rows + r * stride, x, n);
}

// One tile of DotRowsTokens: 4 rows × 4 tokens (a partial tile repeats its last token and stores only the real ones).
HWY_INLINE void DotTile(D d, const float* rows, int64_t stride, const float* const* x, int64_t n, float (&sums)[4][4]) {
  const int64_t lanes = hn::Lanes(d);
  using V = hn::Vec<D>;
  V acc[4][4];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) acc[r][t] = hn::Zero(d);
  }
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    V xv[4];
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) xv[t] = hn::MaskedLoad(mask, d, x[t] + i);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const V row = hn::MaskedLoad(mask, d, rows + r * stride + i);
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) acc[r][t] = hn::MulAdd(row, xv[t], acc[r][t]);  // as DotRows: row · x + s
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) sums[r][t] = hn::GetLane(hn::SumOfLanes(d, acc[r][t]));
  }
}

void DotRowsTokens(const float* rows, int64_t count, int64_t stride, const float* x, int64_t x_stride, int64_t tokens,
                   int64_t n, float* out, int64_t out_stride) {
  const D d;
  if (tokens == 1) {  // decode: a 4-token tile would be 3/4 repeats
    DotRows(rows, count, stride, x, n, out);
    return;
  }
  for (int64_t t0 = 0; t0 < tokens; t0 += 4) {
    const float* xs[4];
    for (int64_t t = 0; t < 4; ++t) xs[t] = x + std::min(t0 + t, tokens - 1) * x_stride;
    int64_t r = 0;
    for (; r + 4 <= count; r += 4) {
      float sums[4][4];
      DotTile(d, rows + r * stride, stride, xs, n, sums);
      for (int64_t t = 0; t < std::min<int64_t>(4, tokens - t0); ++t) {
        for (int64_t k = 0; k < 4; ++k) out[(t0 + t) * out_stride + r + k] = sums[k][t];
      }
    }
    for (; r < count; ++r) {  // as DotRows' remainder
      for (int64_t t = 0; t < std::min<int64_t>(4, tokens - t0); ++t) {
        out[(t0 + t) * out_stride + r] = Dot(rows + r * stride, xs[t], n);
      }
    }
  }
}

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  const D d;
  const int64_t lanes = hn::Lanes(d);
  const float inverse = 1.0f / std::sqrt(Dot(x, x, n) / static_cast<float>(n) + eps);
  const auto scale = hn::Set(d, inverse);
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    auto v = hn::Mul(hn::MaskedLoad(mask, d, x + i), scale);
    if (weight != nullptr) v = hn::Mul(v, hn::MaskedLoad(mask, d, weight + i));
    hn::BlendedStore(v, mask, d, y + i);
  }
}

template <class V>
V SigmoidV(D d, V x) {
  // 1 / (1 + exp(−x)); exp saturates to +inf for very negative x, giving 0 as it should.
  return hn::Div(hn::Set(d, 1.0f), hn::Add(hn::Set(d, 1.0f), hn::Exp(d, hn::Neg(x))));
}

void SwiGlu(const float* gate, const float* up, int64_t n, float limit, float* out) {
  const D d;
  const int64_t lanes = hn::Lanes(d);
  const auto high = hn::Set(d, limit), low = hn::Set(d, -limit);
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    const auto g = hn::Min(hn::MaskedLoad(mask, d, gate + i), high);
    const auto u = hn::Min(hn::Max(hn::MaskedLoad(mask, d, up + i), low), high);
    hn::BlendedStore(hn::Mul(hn::Mul(g, SigmoidV(d, g)), u), mask, d, out + i);
  }
}

void Sigmoid(const float* x, int64_t n, float* y) {
  const D d;
  const int64_t lanes = hn::Lanes(d);
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    hn::BlendedStore(SigmoidV(d, hn::MaskedLoad(mask, d, x + i)), mask, d, y + i);
  }
}

void Silu(const float* x, int64_t n, float* y) {
  const D d;
  const int64_t lanes = hn::Lanes(d);
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    const auto v = hn::MaskedLoad(mask, d, x + i);
    hn::BlendedStore(hn::Mul(v, SigmoidV(d, v)), mask, d, y + i);
  }
}

float SoftmaxNumerators(float* x, int64_t n, float scale) {
  const D d;
  const int64_t lanes = hn::Lanes(d);
  auto top = hn::Set(d, -hwy::HighestValue<float>());
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    top = hn::IfThenElse(mask, hn::Max(top, hn::MaskedLoad(mask, d, x + i)), top);
  }
  const auto s = hn::Set(d, scale), shift = hn::Mul(hn::Set(d, hn::GetLane(hn::MaxOfLanes(d, top))), s);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {  // four sums: the adds do not wait on each other
    const auto e0 = hn::Exp(d, hn::MulSub(hn::LoadU(d, x + i), s, shift));
    const auto e1 = hn::Exp(d, hn::MulSub(hn::LoadU(d, x + i + lanes), s, shift));
    const auto e2 = hn::Exp(d, hn::MulSub(hn::LoadU(d, x + i + 2 * lanes), s, shift));
    const auto e3 = hn::Exp(d, hn::MulSub(hn::LoadU(d, x + i + 3 * lanes), s, shift));
    hn::StoreU(e0, d, x + i), hn::StoreU(e1, d, x + i + lanes);
    hn::StoreU(e2, d, x + i + 2 * lanes), hn::StoreU(e3, d, x + i + 3 * lanes);
    s0 = hn::Add(s0, e0), s1 = hn::Add(s1, e1), s2 = hn::Add(s2, e2), s3 = hn::Add(s3, e3);
  }
  for (; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    const auto e = hn::IfThenElseZero(mask, hn::Exp(d, hn::MulSub(hn::MaskedLoad(mask, d, x + i), s, shift)));
    hn::BlendedStore(e, mask, d, x + i);
    s0 = hn::Add(s0, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
}

void Axpy(float a, const float* x, int64_t n, float* y) {
  const D d;
  const int64_t lanes = hn::Lanes(d);
  const auto av = hn::Set(d, a);
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    hn::BlendedStore(hn::MulAdd(av, hn::MaskedLoad(mask, d, x + i), hn::MaskedLoad(mask, d, y + i)), mask, d, y + i);
  }
}

void Scale(float a, const float* x, int64_t n, float* y) {
  const D d;
  const int64_t lanes = hn::Lanes(d);
  const auto av = hn::Set(d, a);
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    hn::BlendedStore(hn::Mul(av, hn::MaskedLoad(mask, d, x + i)), mask, d, y + i);
  }
}

void MhcRead(const float* streams, const float* pre, int64_t hc, int64_t n, float* h) {
  const D d;
  const int64_t lanes = hn::Lanes(d);
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    auto sum = hn::Zero(d);
    for (int64_t s = 0; s < hc; ++s)
      sum = hn::MulAdd(hn::Set(d, pre[s]), hn::MaskedLoad(mask, d, streams + s * n + i), sum);
    hn::BlendedStore(sum, mask, d, h + i);
  }
}

void MhcWrite(const float* post, const float* comb, const float* y, int64_t hc, int64_t n, float* streams) {
  const D d;
  const int64_t lanes = hn::Lanes(d);
  for (int64_t i = 0; i < n; i += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - i));
    hn::Vec<D> old[8];
    for (int64_t j = 0; j < hc; ++j) old[j] = hn::MaskedLoad(mask, d, streams + j * n + i);
    const auto yv = hn::MaskedLoad(mask, d, y + i);
    for (int64_t k = 0; k < hc; ++k) {
      auto sum = hn::Mul(hn::Set(d, post[k]), yv);
      for (int64_t j = 0; j < hc; ++j) sum = hn::MulAdd(hn::Set(d, comb[j * hc + k]), old[j], sum);
      hn::BlendedStore(sum, mask, d, streams + k * n + i);
    }
  }
}

// vec::ShortConvSilu, one block of `lanes` channels at a time: the block's taps and window are transposed into
// [K][lanes] buffers (four and three vectors by interleaved loads when K = 4 and the block is whole), then every row
// is one chain of K vector fused multiply-adds, the SiLU, and a shift of the window buffer. The window's rows stay
// in L1 between rows; each row of x is read and written once.
//
// The walk goes down a column of x, rows a projection row apart (96 KB at the model's widths, a new page each row),
// and every row's load misses: perf put 65 % of the kernel's samples on that load, the loop holding only a few rows'
// misses in flight. A request kConvPrefetchRows ahead (≈ the DRAM latency over a row's work) took "KDA conv, norms,
// gates" from 2.7–3.3 % to 2.1–2.2 % of a 512-token prefill (3 alternating rounds each; 40 rows ahead: the same).
// Rows outer and blocks inner instead (contiguous runs of a row) measured worse: 4.8–5.8 %.
constexpr int64_t kConvPrefetchRows = 16;

void ShortConvSilu(const float* taps, int64_t width, int64_t kernel, float* window, float* x, int64_t stride,
                   int64_t count, const std::pair<int64_t, float*>* copies, size_t copy_count) {
  const D d;
  const int64_t lanes = hn::Lanes(d), history = kernel - 1;
  constexpr int64_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
  HWY_ALIGN float tap_rows[kMaxConvKernel * kMaxLanes];     // [K][lanes]
  HWY_ALIGN float window_rows[kMaxConvKernel * kMaxLanes];  // [K − 1][lanes], oldest first
  const auto write_window = [&](float* to, int64_t c0, int64_t n) {
    for (int64_t c = 0; c < n; ++c) {
      for (int64_t i = 0; i < history; ++i) to[(c0 + c) * history + i] = window_rows[i * lanes + c];
    }
  };
  for (int64_t c0 = 0; c0 < width; c0 += lanes) {
    const int64_t n = std::min(lanes, width - c0);
    const auto mask = hn::FirstN(d, static_cast<size_t>(n));
    if (kernel == 4 && n == lanes) {
      hn::Vec<D> t0, t1, t2, t3, w0, w1, w2;
      hn::LoadInterleaved4(d, taps + c0 * 4, t0, t1, t2, t3);
      hn::LoadInterleaved3(d, window + c0 * 3, w0, w1, w2);
      hn::Store(t0, d, tap_rows), hn::Store(t1, d, tap_rows + lanes), hn::Store(t2, d, tap_rows + 2 * lanes);
      hn::Store(t3, d, tap_rows + 3 * lanes);
      hn::Store(w0, d, window_rows), hn::Store(w1, d, window_rows + lanes), hn::Store(w2, d, window_rows + 2 * lanes);
    } else {
      std::fill(tap_rows, tap_rows + kernel * lanes, 0.0f);
      std::fill(window_rows, window_rows + history * lanes, 0.0f);
      for (int64_t c = 0; c < n; ++c) {
        for (int64_t i = 0; i < kernel; ++i) tap_rows[i * lanes + c] = taps[(c0 + c) * kernel + i];
        for (int64_t i = 0; i < history; ++i) window_rows[i * lanes + c] = window[(c0 + c) * history + i];
      }
    }
    for (size_t k = 0; k < copy_count; ++k) {
      if (copies[k].first == 0) write_window(copies[k].second, c0, n);
    }
    for (int64_t t = 0; t < count; ++t) {
      float* row = x + t * stride + c0;
      if (t + kConvPrefetchRows < count) __builtin_prefetch(row + kConvPrefetchRows * stride, 1);
      const auto input = hn::MaskedLoad(mask, d, row);
      auto y = hn::Mul(hn::Load(d, tap_rows), history > 0 ? hn::Load(d, window_rows) : input);
      for (int64_t i = 1; i < history; ++i) {
        y = hn::MulAdd(hn::Load(d, tap_rows + i * lanes), hn::Load(d, window_rows + i * lanes), y);
      }
      if (history > 0) y = hn::MulAdd(hn::Load(d, tap_rows + history * lanes), input, y);
      hn::BlendedStore(hn::Mul(y, SigmoidV(d, y)), mask, d, row);
      if (history == 0) continue;  // one tap: no window to carry (nor copies to write)
      for (int64_t i = 0; i + 1 < history; ++i) {
        hn::Store(hn::Load(d, window_rows + (i + 1) * lanes), d, window_rows + i * lanes);
      }
      hn::Store(input, d, window_rows + (history - 1) * lanes);
      for (size_t k = 0; k < copy_count; ++k) {
        if (copies[k].first == t + 1) write_window(copies[k].second, c0, n);
      }
    }
    if (kernel == 4 && n == lanes) {
      hn::StoreInterleaved3(hn::Load(d, window_rows), hn::Load(d, window_rows + lanes),
                            hn::Load(d, window_rows + 2 * lanes), d, window + c0 * 3);
    } else {
      write_window(window, c0, n);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace glint::vec
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace glint::vec {
HWY_EXPORT(Dot);
HWY_EXPORT(SumSquares);
HWY_EXPORT(DotRows);
HWY_EXPORT(DotRowsTokens);
HWY_EXPORT(RmsNorm);
HWY_EXPORT(SwiGlu);
HWY_EXPORT(Sigmoid);
HWY_EXPORT(Silu);
HWY_EXPORT(SoftmaxNumerators);
HWY_EXPORT(Axpy);
HWY_EXPORT(Scale);
HWY_EXPORT(MhcRead);
HWY_EXPORT(MhcWrite);
HWY_EXPORT(ShortConvSilu);

float Dot(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(Dot)(a, b, n); }
float SumSquares(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(SumSquares)(x, n); }
void DotRows(const float* rows, int64_t count, int64_t stride, const float* x, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(DotRows)(rows, count, stride, x, n, out);
}
void DotRowsTokens(const float* rows, int64_t count, int64_t stride, const float* x, int64_t x_stride, int64_t tokens,
                   int64_t n, float* out, int64_t out_stride) {
  HWY_DYNAMIC_DISPATCH(DotRowsTokens)(rows, count, stride, x, x_stride, tokens, n, out, out_stride);
}
void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  HWY_DYNAMIC_DISPATCH(RmsNorm)(x, weight, n, eps, y);
}
void SwiGlu(const float* gate, const float* up, int64_t n, float limit, float* out) {
  HWY_DYNAMIC_DISPATCH(SwiGlu)(gate, up, n, limit, out);
}
void Sigmoid(const float* x, int64_t n, float* y) { HWY_DYNAMIC_DISPATCH(Sigmoid)(x, n, y); }
void Silu(const float* x, int64_t n, float* y) { HWY_DYNAMIC_DISPATCH(Silu)(x, n, y); }
float SoftmaxNumerators(float* x, int64_t n, float scale) {
  return HWY_DYNAMIC_DISPATCH(SoftmaxNumerators)(x, n, scale);
}
void Axpy(float a, const float* x, int64_t n, float* y) { HWY_DYNAMIC_DISPATCH(Axpy)(a, x, n, y); }
void Scale(float a, const float* x, int64_t n, float* y) { HWY_DYNAMIC_DISPATCH(Scale)(a, x, n, y); }
void MhcRead(const float* streams, const float* pre, int64_t hc, int64_t n, float* h) {
  HWY_DYNAMIC_DISPATCH(MhcRead)(streams, pre, hc, n, h);
}
void MhcWrite(const float* post, const float* comb, const float* y, int64_t hc, int64_t n, float* streams) {
  HWY_DYNAMIC_DISPATCH(MhcWrite)(post, comb, y, hc, n, streams);
}
void ShortConvSilu(const float* taps, int64_t width, int64_t kernel, float* window, float* x, int64_t stride,
                   int64_t count, std::span<const std::pair<int64_t, float*>> copies) {
  HWY_DYNAMIC_DISPATCH(ShortConvSilu)(taps, width, kernel, window, x, stride, count, copies.data(), copies.size());
}
}  // namespace glint::vec
#endif  // HWY_ONCE
