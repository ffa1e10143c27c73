// AVX-512 VNNI int8 kernels (gemm_i8.h). Functions carry the target attribute themselves (no per-file flags), so
// nothing compiled here can leak AVX-512 instructions into code that runs on other CPUs.
//
// The tile walk — its tiles, register allocation and fp32 epilogue — is gemm_tile_avx512.h, shared with the int4
// kernels; this file holds the activation quantizer, the int8 inner step of the tiles (Int8Codes), and the lane walk.
//
// The lane walk (gemm_i8.h, "Two walks on AVX-512"), for products of kLanesMinTokens to kLanesMaxTokens tokens —
// batched decode, an expert's share of a prefill. The tile walk passes over each row group once per token tile and
// streams it from memory in a one-token lead tile whose arithmetic does not overlap the stream. Here a register
// holds 16 *tokens'* int32 sums for one weight row instead of 16 rows' sums for one token:
//
//   acc[r] (16 tokens) += vpdpbusd(broadcast of row r's 4 biased codes, the 16 tokens' 4 codes at k)
//
// One 64-byte line of a row block (16 rows × 4 k) feeds 16 `vpdpbusd` through 16 broadcasts, and one load of 16
// tokens' codes feeds all 16 rows, so a row block streams once per 16 tokens as one sequential stream, which a
// software prefetch far ahead (kPrefetchBytes) keeps in flight while the arithmetic runs. The activations are put in
// lane order once per call (a 16 × 16 transpose of 4-byte words per 16 k-steps). Tokens past the last whole tile
// run as the tile walk's tiles over the same row group while its weights are in L2; a product of kLanesMinTokens to
// 15 tokens is one partial lane tile.
//
// Exactness: every int32 group sum is the tile walk's (the same integers, each accumulator starting at −128·Σx of its
// token), and the fp32 epilogue is the same operations in the same order — float(sum) · (s_w · s_x) fused-added to
// the previous groups' total — so a token's outputs are the same bits under either walk, alone or beside others
// (tests/unit/gemm_i8_test.cc compares them bit for bit).
// GCC 12 reports its own AVX-512 intrinsics (the _mm*_undefined_* idiom) as maybe-uninitialized: GCC bug 105593.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "base/aligned_buffer.h"
#include "kernels/gemm_i8.h"
#include "kernels/gemm_tile_avx512.h"
#include "kernels/transpose_avx512.h"

namespace glint::internal {
namespace {

GLINT_TARGET_AVX512 void QuantizeAvx512(const float* x, int64_t x_stride, int64_t tokens, int64_t cols, int64_t group,
                                        int64_t padded_cols, int8_t* codes, float* scales, int32_t* bias_correction) {
  const int64_t groups = padded_cols / group;
  const __m512 sign_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 infinity = _mm512_set1_ps(__builtin_inff());
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = x + t * x_stride;
    int8_t* out = codes + t * padded_cols;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * group, end = std::min(cols, begin + group);
      __m512 vmax = _mm512_setzero_ps();
      __mmask16 nonfinite = 0;
      for (int64_t c = begin; c < end; c += 16) {
        const __mmask16 valid = end - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (end - c)) - 1);
        const __m512 magnitude = _mm512_and_ps(_mm512_maskz_loadu_ps(valid, row + c), sign_mask);
        nonfinite |= _mm512_cmp_ps_mask(magnitude, infinity, _CMP_NLT_UQ);  // NaN or ±inf
        vmax = _mm512_max_ps(vmax, magnitude);
      }
      if (nonfinite) {  // int8 cannot carry it: the group's scale is NaN, so every output it touches is NaN
        std::memset(out + begin, 0, static_cast<size_t>(group));
        scales[t * groups + g] = __builtin_nanf("");
        bias_correction[t * groups + g] = 0;
        continue;
      }
      const float amax = _mm512_reduce_max_ps(vmax);
      const __m512 inverse = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      __m512i sum = _mm512_setzero_si512();
      for (int64_t c = begin; c < begin + group; c += 16) {
        const __mmask16 valid = c >= end        ? __mmask16(0)
                                : end - c >= 16 ? __mmask16(0xffff)
                                                : __mmask16((1u << (end - c)) - 1);
        // cvtps rounds to nearest even (MXCSR default), as std::nearbyint in the scalar reference.
        __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(valid, row + c), inverse));
        q = _mm512_max_epi32(_mm512_min_epi32(q, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
        sum = _mm512_add_epi32(sum, q);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c), _mm512_cvtepi32_epi8(q));
      }
      scales[t * groups + g] = amax / 127.0f;
      bias_correction[t * groups + g] = 128 * _mm512_reduce_add_epi32(sum);
    }
  }
}

// Biased int8 codes (int8_matrix.h): one 64-byte load per 4-k step is the vpdpbusd operand.
struct Int8Codes {
  template <int RB, int NT>
  GLINT_INLINE_AVX512 static void Accumulate(__m512i (&acc)[RB][NT], const uint8_t* codes, int64_t block_bytes,
                                             const int8_t* x, int64_t x_stride, int64_t k_begin, int64_t k_end) {
    for (int64_t k4 = k_begin / 4; k4 < k_end / 4; ++k4) {
      __m512i weights[RB];
#pragma GCC unroll 8
      for (int i = 0; i < RB; ++i) weights[i] = _mm512_loadu_si512(codes + i * block_bytes + k4 * 64);
#pragma GCC unroll 8
      for (int j = 0; j < NT; ++j) {
        const __m512i activation = avx512_tiles::Broadcast4(x + j * x_stride + 4 * k4);
#pragma GCC unroll 8
        for (int i = 0; i < RB; ++i) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], weights[i], activation);
      }
    }
  }
  static int32_t Correction(int32_t int8_correction) { return int8_correction; }  // 128·Σx
};

// ---- The lane walk ----

constexpr int64_t kLanes = 16;  // tokens per register: one int32 lane each
// Row blocks whose weights stay in L2 (4 × 16 rows × K bytes: 256 KiB at K = 4,096) while a call's token tiles pass
// over them; only the first tile reads them from memory.
constexpr int64_t kRowGroupBlocks = 4;
// How far ahead of the first tile's loads the weight stream is requested. The first tile consumes a 64-byte line per
// 16 `vpdpbusd` (≈ 8 cycles); DRAM latency times the VM's bandwidth is a few KiB, and the hardware prefetcher alone
// kept too few lines in flight. A/B harness, 4,096 × 4,096 at 16 tokens (Zen 5, weights cycled through 256 MiB),
// against the tile walk: one thread, 512 B ahead 0.7×, 2 KiB 1.1–1.2×, 16–32 KiB 1.3–1.35×, none 0.8–0.85×; two
// threads, 16 KiB ahead 1.45×, none 0.91× (docs/performance.md "Tokens in lanes").
constexpr int64_t kPrefetchBytes = 16384;

// The tokens a call's lane tiles take: whole tiles of 16, the rest (fewer than 16) to the tile walk over each row
// group while its weights are in L2; below 16 tokens one partial lane tile from kLanesMinTokens on. Measured against
// the tile walk from memory (docs/performance.md "Tokens in lanes"): a partial tile of 9 tokens 0.96×, of 12
// 1.06–1.13×; 24 tokens as a whole and a partial lane tile 0.90–0.93×, as a lane tile and a tail 1.16–1.17×.
int64_t LaneTokens(int64_t tokens) {
  if (tokens < kLanes) return tokens >= kLanesMinTokens ? tokens : 0;
  return tokens - tokens % kLanes;
}

// The first `tokens` of x in lane order: codes [tiles][padded_cols / 4][16 tokens][4 k] (lanes past the last token
// hold 0, so they add nothing), and per tile and group the 16 tokens' scales and −128·Σx starts. Thread-local
// buffers: valid until this thread's next call.
struct LaneActivations {
  const int8_t* codes;
  const float* scales;    // [tiles][groups][16]
  const int32_t* starts;  // [tiles][groups][16]  −bias_correction
  int64_t tiles;
};

GLINT_TARGET_AVX512 LaneActivations ToLanes(const QuantizedActivations& x, int64_t tokens) {
  const int64_t tiles = (tokens + kLanes - 1) / kLanes, steps = x.padded_cols / 4, groups = x.groups();
  thread_local AlignedBuffer codes_buffer, scales_buffer, starts_buffer;
  const size_t code_bytes = static_cast<size_t>(tiles * steps * 64);
  const size_t group_bytes = static_cast<size_t>(tiles * groups * kLanes) * 4;
  if (codes_buffer.size() < code_bytes) codes_buffer = AlignedBuffer(code_bytes);
  if (scales_buffer.size() < group_bytes) scales_buffer = AlignedBuffer(group_bytes);
  if (starts_buffer.size() < group_bytes) starts_buffer = AlignedBuffer(group_bytes);
  int8_t* codes = codes_buffer.As<int8_t>();
  float* scales = scales_buffer.As<float>();
  int32_t* starts = starts_buffer.As<int32_t>();
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int64_t t0 = tile * kLanes, lanes = std::min(kLanes, tokens - t0);
    // 16 k-steps at a time: row t holds token t's 16 four-byte words, column s after the transpose is k-step s.
    for (int64_t s0 = 0; s0 < steps; s0 += 16) {
      const int64_t width = std::min<int64_t>(16, steps - s0);
      const __mmask16 words = width == 16 ? __mmask16(0xffff) : __mmask16((1u << width) - 1);
      __m512i r[16];
      for (int64_t t = 0; t < 16; ++t) {
        r[t] = t < lanes ? _mm512_maskz_loadu_epi32(words, x.codes + (t0 + t) * x.padded_cols + s0 * 4)
                         : _mm512_setzero_si512();
      }
      Transpose16x16(r);
      for (int64_t s = 0; s < width; ++s) _mm512_store_si512(codes + (tile * steps + s0 + s) * 64, r[s]);
    }
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t t = 0; t < kLanes; ++t) {
        const bool real = t < lanes;
        scales[(tile * groups + g) * kLanes + t] = real ? x.scales[(t0 + t) * groups + g] : 0.0f;
        starts[(tile * groups + g) * kLanes + t] = real ? -x.bias_correction[(t0 + t) * groups + g] : 0;
      }
    }
  }
  return {codes, scales, starts, tiles};
}

// The tokens of x from `first` on, as a view for the tile walk.
QuantizedActivations TokensFrom(const QuantizedActivations& x, int64_t first) {
  QuantizedActivations rest = x;
  rest.tokens = x.tokens - first;
  rest.codes += first * x.padded_cols;
  rest.scales += first * x.groups();
  rest.bias_correction += first * x.groups();
  return rest;
}

// Sixteen accumulators as named registers: with an array GCC 12 copies every accumulator twice per k-step (two
// vmovdqa per vpdpbusd, checked with objdump); named values keep them in place.
#define GLINT_LANES_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

// One K-group of one row block × one token tile. `w` is the block's codes at the group's first k-step, `x` the
// tile's codes at the same step, `steps` = group / 4. Either the fp32 epilogue into totals [16 rows][16 lanes]
// (the first group stores), or the int32 sums into sums [16 rows][16 lanes].
template <bool kPrefetch, bool kSums>
GLINT_TARGET_AVX512 __attribute__((noinline)) void LaneGroup(const uint8_t* w, const float* w_scales, const int8_t* x,
                                                             const float* x_scales, const int32_t* starts,
                                                             int64_t steps, bool first, float* totals, int32_t* sums) {
  const __m512i start = _mm512_loadu_si512(starts);
#define GLINT_LANES_START(r) \
  __m512i acc##r = start;    \
  asm volatile("" : "+v"(acc##r));
#define GLINT_LANES_STEP(r)                                                      \
  {                                                                              \
    int32_t codes;                                                               \
    std::memcpy(&codes, w + s * 64 + 4 * (r), 4);                                \
    acc##r = _mm512_dpbusd_epi32(acc##r, _mm512_set1_epi32(codes), activations); \
  }
  GLINT_LANES_ROWS(GLINT_LANES_START)
  for (int64_t s = 0; s < steps; ++s) {
    const __m512i activations = _mm512_load_si512(x + s * 64);
    if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(w + s * 64 + kPrefetchBytes), _MM_HINT_T0);
    GLINT_LANES_ROWS(GLINT_LANES_STEP)
  }
  if constexpr (kSums) {
#define GLINT_LANES_SUMS(r) _mm512_store_si512(sums + (r)*kLanes, acc##r);
    GLINT_LANES_ROWS(GLINT_LANES_SUMS)
#undef GLINT_LANES_SUMS
  } else {
    // totals[r] += float(acc) · (s_w[r] · s_x): the tile walk's product of the same two scales, the same rounding.
    const __m512 x_scale = _mm512_loadu_ps(x_scales);
#define GLINT_LANES_EPILOGUE(r)                                                                         \
  {                                                                                                     \
    asm volatile("" : "+v"(acc##r));                                                                    \
    const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(w_scales[r]), x_scale);                           \
    const __m512 previous = first ? _mm512_setzero_ps() : _mm512_load_ps(totals + (r)*kLanes);          \
    _mm512_store_ps(totals + (r)*kLanes, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc##r), scale, previous)); \
  }
    GLINT_LANES_ROWS(GLINT_LANES_EPILOGUE)
#undef GLINT_LANES_EPILOGUE
  }
#undef GLINT_LANES_STEP
#undef GLINT_LANES_START
}
#undef GLINT_LANES_ROWS

// A block's totals [16 rows][16 tokens] into y [tokens][rows]: one transpose, then a store per token masked to the
// rows that exist.
GLINT_TARGET_AVX512 void StoreTotals(const float* totals, int64_t rows, int64_t tokens, float* y, int64_t y_stride) {
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(totals + i * kLanes);
  Transpose16x16(r);
  const __mmask16 mask = rows == 16 ? __mmask16(0xffff) : __mmask16((1u << rows) - 1);
  for (int64_t t = 0; t < tokens; ++t) _mm512_mask_storeu_ps(y + t * y_stride, mask, _mm512_castsi512_ps(r[t]));
}

// Row groups outer, token tiles inner, each row block's groups innermost; the first tile of a row group requests the
// stream ahead. `group(tile, b, g, prefetch)` runs one LaneGroup, `done(tile, b)` takes a finished block, and
// `tail(first_block, end_block)` runs the tile walk's tokens over the row group while its weights are in L2.
template <typename Group, typename Done, typename Tail>
GLINT_TARGET_AVX512 void ForEachLaneGroup(const LaneActivations& lanes, int64_t block_begin, int64_t block_end,
                                          int64_t groups, Group&& group, Done&& done, Tail&& tail) {
  for (int64_t first_block = block_begin; first_block < block_end; first_block += kRowGroupBlocks) {
    const int64_t end_block = std::min(block_end, first_block + kRowGroupBlocks);
    for (int64_t tile = 0; tile < lanes.tiles; ++tile) {
      for (int64_t b = first_block; b < end_block; ++b) {
        for (int64_t g = 0; g < groups; ++g) group(tile, b, g, tile == 0);
        done(tile, b);
      }
    }
    tail(first_block, end_block);
  }
}

}  // namespace

GLINT_TARGET_AVX512 void Int8GemmLanesAvx512(const Int8MatrixView& w, const QuantizedActivations& x,
                                             int64_t block_begin, int64_t block_end, float* y, int64_t y_stride) {
  if (x.tokens <= 0 || block_begin >= block_end) return;
  const int64_t lane_tokens = LaneTokens(x.tokens);
  const LaneActivations lanes = ToLanes(x, lane_tokens);
  const QuantizedActivations tail = TokensFrom(x, lane_tokens);
  const int64_t groups = x.groups(), steps = x.group / 4, tile_steps = x.padded_cols / 4;
  alignas(64) float totals[16 * kLanes];  // [16 rows][16 tokens]
  ForEachLaneGroup(
      lanes, block_begin, block_end, groups,
      [&](int64_t tile, int64_t b, int64_t g, bool prefetch) {
        const uint8_t* codes = w.BlockCodes(b) + g * steps * 64;
        const float* w_scales = w.BlockScales(b) + g * 16;
        const int8_t* xs = lanes.codes + (tile * tile_steps + g * steps) * 64;
        const int64_t at = (tile * groups + g) * kLanes;
        if (prefetch) {
          LaneGroup<true, false>(codes, w_scales, xs, lanes.scales + at, lanes.starts + at, steps, g == 0, totals,
                                 nullptr);
        } else {
          LaneGroup<false, false>(codes, w_scales, xs, lanes.scales + at, lanes.starts + at, steps, g == 0, totals,
                                  nullptr);
        }
      },
      [&](int64_t tile, int64_t b) {
        StoreTotals(totals, std::min<int64_t>(16, w.layout.rows - b * 16),
                    std::min(kLanes, lane_tokens - tile * kLanes), y + tile * kLanes * y_stride + b * 16, y_stride);
      },
      [&](int64_t first_block, int64_t end_block) {
        if (tail.tokens > 0) {
          avx512_tiles::Gemm<Int8Codes, Int8MatrixView>(w, tail, first_block, end_block, y + lane_tokens * y_stride,
                                                        y_stride);
        }
      });
}

GLINT_TARGET_AVX512 void Int8GroupSumsLanesAvx512(const Int8MatrixView& w, const QuantizedActivations& x,
                                                  int64_t block_begin, int64_t block_end, int32_t* sums) {
  if (x.tokens <= 0 || block_begin >= block_end) return;
  const int64_t lane_tokens = LaneTokens(x.tokens);
  const LaneActivations lanes = ToLanes(x, lane_tokens);
  const int64_t groups = x.groups(), steps = x.group / 4, tile_steps = x.padded_cols / 4;
  const int64_t rows = (block_end - block_begin) * 16;
  alignas(64) int32_t group_sums[16 * kLanes];  // [16 rows][16 tokens]
  ForEachLaneGroup(
      lanes, block_begin, block_end, groups,
      [&](int64_t tile, int64_t b, int64_t g, bool) {
        const int64_t at = (tile * groups + g) * kLanes;
        LaneGroup<false, true>(w.BlockCodes(b) + g * steps * 64, w.BlockScales(b) + g * 16,
                               lanes.codes + (tile * tile_steps + g * steps) * 64, lanes.scales + at, lanes.starts + at,
                               steps, g == 0, nullptr, group_sums);
        const int64_t tokens = std::min(kLanes, lane_tokens - tile * kLanes);
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t r = 0; r < 16; ++r) {
            const int64_t row = (b - block_begin) * 16 + r;
            sums[((tile * kLanes + t) * rows + row) * groups + g] = group_sums[r * kLanes + t];
          }
        }
      },
      [](int64_t, int64_t) {}, [](int64_t, int64_t) {});
  // The tail's sums, [tokens][rows][groups] like the rest: its tokens' block starts after the lane tokens'.
  if (lane_tokens < x.tokens) {
    avx512_tiles::GroupSums<Int8Codes, Int8MatrixView>(w, TokensFrom(x, lane_tokens), block_begin, block_end,
                                                       sums + lane_tokens * rows * groups);
  }
}

namespace {

bool InLanesRange(const QuantizedActivations& x) { return x.tokens >= kLanesMinTokens && x.tokens <= kLanesMaxTokens; }

GLINT_TARGET_AVX512 void GemmAvx512(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin,
                                    int64_t block_end, float* y, int64_t y_stride) {
  if (InLanesRange(x)) {
    Int8GemmLanesAvx512(w, x, block_begin, block_end, y, y_stride);
  } else {
    avx512_tiles::Gemm<Int8Codes, Int8MatrixView>(w, x, block_begin, block_end, y, y_stride);
  }
}

GLINT_TARGET_AVX512 void GroupSumsAvx512(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin,
                                         int64_t block_end, int32_t* sums) {
  if (InLanesRange(x)) {
    Int8GroupSumsLanesAvx512(w, x, block_begin, block_end, sums);
  } else {
    avx512_tiles::GroupSums<Int8Codes, Int8MatrixView>(w, x, block_begin, block_end, sums);
  }
}

}  // namespace

const Int8Kernels& Int8KernelsAvx512() {
  static const Int8Kernels kernels{QuantizeAvx512, GemmAvx512, GroupSumsAvx512};
  return kernels;
}

const Int8Kernels& Int8KernelsAvx512Tiles() {
  static const Int8Kernels kernels{QuantizeAvx512, avx512_tiles::Gemm<Int8Codes, Int8MatrixView>,
                                   avx512_tiles::GroupSums<Int8Codes, Int8MatrixView>};
  return kernels;
}

}  // namespace glint::internal
