// Highway implementation of mla_ops.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/mla_ops.cc"
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4 | HWY_AVX3_DL)
#endif
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "kernels/mla_ops.h"

#include <algorithm>
#include <cmath>

HWY_BEFORE_NAMESPACE();
namespace glint::mla {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;

constexpr int64_t kTile = 4;

// scores[h, i] for a tile of up to 4 heads × 4 positions.
void ScoreTile(D d, const float* q, int64_t rank, const float* const* rows, int64_t nh, int64_t np, float* scores,
               int64_t count, float scale) {
  const int64_t lanes = hn::Lanes(d);
  hn::Vec<D> acc[kTile][kTile];
  for (int64_t h = 0; h < kTile; ++h) {
    for (int64_t i = 0; i < kTile; ++i) acc[h][i] = hn::Zero(d);
  }
  for (int64_t r = 0; r < rank; r += lanes) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(rank - r));
    hn::Vec<D> c[kTile];
    for (int64_t i = 0; i < kTile; ++i) c[i] = i < np ? hn::MaskedLoad(mask, d, rows[i] + r) : hn::Zero(d);
    for (int64_t h = 0; h < nh; ++h) {
      const auto qv = hn::MaskedLoad(mask, d, q + h * rank + r);
      for (int64_t i = 0; i < kTile; ++i) acc[h][i] = hn::MulAdd(qv, c[i], acc[h][i]);
    }
  }
  for (int64_t h = 0; h < nh; ++h) {
    for (int64_t i = 0; i < np; ++i) scores[h * count + i] = scale * hn::GetLane(hn::SumOfLanes(d, acc[h][i]));
  }
}

void Attend(const float* q_latent, int64_t heads, int64_t rank, const LatentRows& rows, const int64_t* positions,
            int64_t count, float scale, float* out, float* scratch) {
  const D d;
  const int64_t lanes = hn::Lanes(d);
  float* scores = scratch;  // [heads, count]
  // [count] row pointers, after the scores at an even float offset (8-byte aligned for a 16-byte aligned scratch)
  const float** row = reinterpret_cast<const float**>(scratch + (heads * count + 1) / 2 * 2);
  for (int64_t i = 0; i < count; ++i) row[i] = rows.Row(positions[i]);

  for (int64_t i = 0; i < count; i += kTile) {
    for (int64_t h = 0; h < heads; h += kTile) {
      ScoreTile(d, q_latent + h * rank, rank, row + i, std::min(kTile, heads - h), std::min(kTile, count - i),
                scores + h * count + i, count, scale);
    }
  }
  // Softmax per head, in fp32 with the maximum subtracted.
  for (int64_t h = 0; h < heads; ++h) {
    float* s = scores + h * count;
    const float max_score = *std::max_element(s, s + count);
    auto sum = hn::Zero(d);
    for (int64_t i = 0; i < count; i += lanes) {
      const auto mask = hn::FirstN(d, static_cast<size_t>(count - i));
      const auto e = hn::IfThenElseZero(mask, hn::Exp(d, hn::Sub(hn::MaskedLoad(mask, d, s + i), hn::Set(d, max_score))));
      sum = hn::Add(sum, e);
      hn::BlendedStore(e, mask, d, s + i);
    }
    const auto inverse = hn::Set(d, 1.0f / hn::GetLane(hn::SumOfLanes(d, sum)));
    for (int64_t i = 0; i < count; i += lanes) {
      const auto mask = hn::FirstN(d, static_cast<size_t>(count - i));
      hn::BlendedStore(hn::Mul(hn::MaskedLoad(mask, d, s + i), inverse), mask, d, s + i);
    }
  }
  // ō = P C: 4 heads × 4 vectors of rank per pass over the positions (a rank slice stays in L1/L2 across heads).
  const int64_t width = kTile * lanes;
  for (int64_t r = 0; r < rank; r += width) {
    hn::Mask<D> masks[kTile];
    for (int64_t v = 0; v < kTile; ++v) {
      const int64_t begin = r + v * lanes;
      masks[v] = hn::FirstN(d, static_cast<size_t>(std::max<int64_t>(0, std::min(lanes, rank - begin))));
    }
    for (int64_t h = 0; h < heads; h += kTile) {
      const int64_t nh = std::min(kTile, heads - h);
      hn::Vec<D> acc[kTile][kTile];
      for (int64_t a = 0; a < kTile; ++a) {
        for (int64_t v = 0; v < kTile; ++v) acc[a][v] = hn::Zero(d);
      }
      for (int64_t i = 0; i < count; ++i) {
        hn::Vec<D> c[kTile];
        for (int64_t v = 0; v < kTile; ++v) c[v] = hn::MaskedLoad(masks[v], d, row[i] + r + v * lanes);
        for (int64_t a = 0; a < nh; ++a) {
          const auto p = hn::Set(d, scores[(h + a) * count + i]);
          for (int64_t v = 0; v < kTile; ++v) acc[a][v] = hn::MulAdd(p, c[v], acc[a][v]);
        }
      }
      for (int64_t a = 0; a < nh; ++a) {
        for (int64_t v = 0; v < kTile; ++v) hn::BlendedStore(acc[a][v], masks[v], d, out + (h + a) * rank + r + v * lanes);
      }
    }
  }
}

void IndexerScores(const float* query, const float* head_weights, const float* pooled, int64_t pools, int64_t heads,
                   int64_t dim, float scale, float* scores) {
  const D d;
  float dots[kTile * kTile];
  const float* rows[kTile];
  for (int64_t m = 0; m < pools; m += kTile) {
    const int64_t np = std::min(kTile, pools - m);
    for (int64_t i = 0; i < np; ++i) rows[i] = pooled + (m + i) * dim;
    float total[kTile] = {0, 0, 0, 0};
    for (int64_t h = 0; h < heads; h += kTile) {
      const int64_t nh = std::min(kTile, heads - h);
      ScoreTile(d, query + h * dim, dim, rows, nh, np, dots, kTile, scale);
      for (int64_t a = 0; a < nh; ++a) {
        for (int64_t i = 0; i < np; ++i) total[i] += head_weights[h + a] * std::max(0.0f, dots[a * kTile + i]);
      }
    }
    for (int64_t i = 0; i < np; ++i) scores[m + i] = total[i];
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace glint::mla
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace glint::mla {
HWY_EXPORT(Attend);
HWY_EXPORT(IndexerScores);

void IndexerScores(const float* query, const float* head_weights, const float* pooled, int64_t pools, int64_t heads,
                   int64_t dim, float scale, float* scores) {
  HWY_DYNAMIC_DISPATCH(IndexerScores)(query, head_weights, pooled, pools, heads, dim, scale, scores);
}

int64_t AttendScratchFloats(int64_t heads, int64_t count) {
  return (heads * count + 1) / 2 * 2 + 2 * count;  // scores, then count row pointers (2 floats each)
}

void Attend(const float* q_latent, int64_t heads, int64_t rank, const LatentRows& rows, const int64_t* positions,
            int64_t count, float scale, float* out, float* scratch) {
  HWY_DYNAMIC_DISPATCH(Attend)(q_latent, heads, rank, rows, positions, count, scale, out, scratch);
}
}  // namespace glint::mla
#endif  // HWY_ONCE
