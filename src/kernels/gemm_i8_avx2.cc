// AVX2 int8 kernels (gemm_i8.h) for CPUs without AVX-512 VNNI. Functions carry the target attribute themselves.
//
// Without vpdpbusd the product goes through vpmaddubsw (unsigned × signed bytes → pairwise int16 sums, saturating)
// and vpmaddwd (int16 pairs → int32). Biased weights (≤ 255) times codes (≤ 127) could saturate the int16 pair
// sum (2 · 255 · 127 > 32767), so this level un-biases the weights and uses the sign trick: Σ w·x = Σ |x| · (w·sign x),
// where |x| ≤ 127 and |w| ≤ 127 keep every pair sum ≤ 2 · 127 · 127 = 32258: exact, and no bias correction.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/gemm_i8.h"

#define GLINT_TARGET_AVX2 __attribute__((target("avx2,fma")))

namespace glint::internal {
namespace {

GLINT_TARGET_AVX2 inline float ReduceMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

GLINT_TARGET_AVX2 inline int32_t ReduceAdd(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// Loads n < 8 floats (or 8) without reading past them.
GLINT_TARGET_AVX2 inline __m256 LoadPartial(const float* p, int64_t n) {
  if (n >= 8) return _mm256_loadu_ps(p);
  alignas(32) float tmp[8] = {};
  std::memcpy(tmp, p, static_cast<size_t>(std::max<int64_t>(n, 0)) * sizeof(float));
  return _mm256_load_ps(tmp);
}

GLINT_TARGET_AVX2 void QuantizeAvx2(const float* x, int64_t x_stride, int64_t tokens, int64_t cols, int64_t group,
                                    int64_t padded_cols, int8_t* codes, float* scales, int32_t* bias_correction) {
  const int64_t groups = padded_cols / group;
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 infinity = _mm256_set1_ps(__builtin_inff());
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = x + t * x_stride;
    int8_t* out = codes + t * padded_cols;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * group, end = std::min(cols, begin + group);
      __m256 vmax = _mm256_setzero_ps();
      int nonfinite = 0;
      for (int64_t c = begin; c < end; c += 8) {
        const __m256 magnitude = _mm256_and_ps(LoadPartial(row + c, end - c), sign_mask);
        nonfinite |= _mm256_movemask_ps(_mm256_cmp_ps(magnitude, infinity, _CMP_NLT_UQ));
        vmax = _mm256_max_ps(vmax, magnitude);
      }
      if (nonfinite) {
        std::memset(out + begin, 0, static_cast<size_t>(group));
        scales[t * groups + g] = __builtin_nanf("");
        bias_correction[t * groups + g] = 0;
        continue;
      }
      const float amax = ReduceMax(vmax);
      const __m256 inverse = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      __m256i sum = _mm256_setzero_si256();
      for (int64_t c = begin; c < begin + group; c += 8) {
        __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(LoadPartial(row + c, end - c), inverse));
        q = _mm256_max_epi32(_mm256_min_epi32(q, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
        sum = _mm256_add_epi32(sum, q);
        // int32 → int8: values are within [−127, 127], so the saturating packs are exact.
        const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        const __m128i q8 = _mm_packs_epi16(q16, q16);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out + c), q8);
      }
      scales[t * groups + g] = amax / 127.0f;
      bias_correction[t * groups + g] = 128 * ReduceAdd(sum);
    }
  }
}

constexpr int kMaxTileTokens = 4;

// int32 group sums of one row block (two halves of 8 rows) × NT tokens for K-group g.
template <int NT>
GLINT_TARGET_AVX2 inline void GroupTile(const uint8_t* codes, const int8_t* x, int64_t x_stride, int64_t g,
                                        int64_t group, __m256i (&acc)[2][NT]) {
  #pragma GCC unroll 8
  for (int h = 0; h < 2; ++h) {
    #pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) acc[h][j] = _mm256_setzero_si256();
  }
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t k4_begin = g * group / 4, k4_end = k4_begin + group / 4;
  for (int64_t k4 = k4_begin; k4 < k4_end; ++k4) {
    // (w + 128) xor 0x80 = w as a signed byte.
    const __m256i w0 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + k4 * 64)), bias);
    const __m256i w1 =
        _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + k4 * 64 + 32)), bias);
    #pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) {
      int32_t v;
      std::memcpy(&v, x + j * x_stride + 4 * k4, 4);
      const __m256i activation = _mm256_set1_epi32(v);
      const __m256i magnitude = _mm256_abs_epi8(activation);
      const __m256i p0 = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(w0, activation));
      const __m256i p1 = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(w1, activation));
      acc[0][j] = _mm256_add_epi32(acc[0][j], _mm256_madd_epi16(p0, ones));
      acc[1][j] = _mm256_add_epi32(acc[1][j], _mm256_madd_epi16(p1, ones));
    }
  }
}

struct TileArgs {
  const uint8_t* codes;  // this row block's codes
  const float* w_scales; // this row block's scales [groups][16]
  const int8_t* x;       // token t0's codes
  int64_t x_stride;
  const float* x_scales; // token t0's [groups]
  int64_t groups, group;
};

template <int NT>
GLINT_TARGET_AVX2 void Tile(const TileArgs& a, float* y, int64_t y_stride, int valid_rows) {
  __m256 facc[2][NT];
  #pragma GCC unroll 8
  for (int h = 0; h < 2; ++h) {
    #pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) facc[h][j] = _mm256_setzero_ps();
  }
  for (int64_t g = 0; g < a.groups; ++g) {
    __m256i acc[2][NT];
    GroupTile<NT>(a.codes, a.x, a.x_stride, g, a.group, acc);
    #pragma GCC unroll 8
    for (int h = 0; h < 2; ++h) {
      const __m256 w_scale = _mm256_loadu_ps(a.w_scales + g * 16 + h * 8);
      #pragma GCC unroll 8
      for (int j = 0; j < NT; ++j) {
        const __m256 scale = _mm256_mul_ps(w_scale, _mm256_set1_ps(a.x_scales[j * a.groups + g]));
        facc[h][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][j]), scale, facc[h][j]);
      }
    }
  }
  #pragma GCC unroll 8
  for (int j = 0; j < NT; ++j) {
    alignas(32) float lanes[16];
    _mm256_store_ps(lanes, facc[0][j]);
    _mm256_store_ps(lanes + 8, facc[1][j]);
    std::memcpy(y + j * y_stride, lanes, static_cast<size_t>(valid_rows) * sizeof(float));
  }
}

template <int NT>
GLINT_TARGET_AVX2 void SumsTile(const TileArgs& a, int32_t* sums, int64_t token_stride) {
  for (int64_t g = 0; g < a.groups; ++g) {
    __m256i acc[2][NT];
    GroupTile<NT>(a.codes, a.x, a.x_stride, g, a.group, acc);
    #pragma GCC unroll 8
    for (int j = 0; j < NT; ++j) {
      alignas(32) int32_t lanes[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[0][j]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 8), acc[1][j]);
      for (int lane = 0; lane < 16; ++lane) sums[j * token_stride + lane * a.groups + g] = lanes[lane];
    }
  }
}

template <typename F>
void WithTokens(int nt, F&& f) {
  switch (nt) {
    case 1: f.template operator()<1>(); break;
    case 2: f.template operator()<2>(); break;
    case 3: f.template operator()<3>(); break;
    default: f.template operator()<4>(); break;
  }
}

void GemmAvx2(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end,
              float* y, int64_t y_stride) {
  const int64_t groups = x.groups();
  for (int64_t b = block_begin; b < block_end; ++b) {
    const int valid_rows = static_cast<int>(std::min<int64_t>(16, w.layout.rows - b * 16));
    for (int64_t t = 0; t < x.tokens; t += kMaxTileTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kMaxTileTokens, x.tokens - t));
      const TileArgs a{w.BlockCodes(b), w.BlockScales(b), x.codes + t * x.padded_cols, x.padded_cols,
                       x.scales + t * groups, groups, x.group};
      float* out = y + t * y_stride + b * 16;
      WithTokens(nt, [&]<int NT>() { Tile<NT>(a, out, y_stride, valid_rows); });
    }
  }
}

void GroupSumsAvx2(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end,
                   int32_t* sums) {
  const int64_t groups = x.groups(), rows = (block_end - block_begin) * 16;
  for (int64_t b = block_begin; b < block_end; ++b) {
    for (int64_t t = 0; t < x.tokens; t += kMaxTileTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kMaxTileTokens, x.tokens - t));
      const TileArgs a{w.BlockCodes(b), w.BlockScales(b), x.codes + t * x.padded_cols, x.padded_cols,
                       x.scales + t * groups, groups, x.group};
      int32_t* out = sums + (t * rows + (b - block_begin) * 16) * groups;
      WithTokens(nt, [&]<int NT>() { SumsTile<NT>(a, out, rows * groups); });
    }
  }
}

}  // namespace

const Int8Kernels& Int8KernelsAvx2() {
  static const Int8Kernels kernels{QuantizeAvx2, GemmAvx2, GroupSumsAvx2};
  return kernels;
}

}  // namespace glint::internal
