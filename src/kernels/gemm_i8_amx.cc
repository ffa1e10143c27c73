// AMX int8 kernels (gemm_i8.h, Isa::kAmx): the integer products on tiles, the fp32 group epilogue on AVX-512.
//
// `tdpbsud` C += A·B multiplies signed bytes A [M tokens][K] by unsigned bytes B [K/4][16 rows × 4 k] into int32
// C [M tokens][16 rows] (1,024 multiply-adds per instruction at M = 16, K = 64). The packed int8 weights
// (int8_matrix.h: [row block][K/4][16 rows][4 k], biased +128 unsigned) are already B's layout: the 64 k of a row
// block from k on are 1 KiB at BlockCodes(b) + 16·k, rows of 64 bytes. The activation codes [tokens, padded_cols]
// are A as they are (row stride padded_cols). So the weights need no repacking, at load or in the container, and
// the VNNI kernels' bias correction holds unchanged: Σ x·(w + 128) − 128·Σx = Σ x·w, exact in int32.
//
// Tiles: C tmm0..tmm3 = (token tile m, row block n) at tmm(2m + n); A tmm4, tmm5 = token tiles 0, 1 (up to 16
// tokens each); B tmm6, tmm7 = row blocks 0, 1. A 32-token × 32-row step loads 2 A and 2 B tiles for 4
// multiplies. After each K-group the four C tiles go to a 4 KiB buffer and AVX-512 applies the same fp32 epilogue
// as the VNNI kernels (gemm_tile_avx512.h): y += float(C − 128·Σx) · (s_w · s_x), the first group storing.
// The tile unit and the vector ports are separate, so the next group's multiplies overlap this group's epilogue.
// GCC 12 reports its own AVX-512 intrinsics (the _mm*_undefined_* idiom) as maybe-uninitialized: GCC bug 105593.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/amx_tiles.h"
#include "kernels/gemm_i8.h"

namespace glint::internal {
namespace {

constexpr int kTileTokens = 16;
constexpr int kC = 0, kA = 4, kB = 6;  // first C, A and B tile registers

// Tile instructions through asm with "memory" clobbers: gcc 12's intrinsics are asm statements that name no memory,
// so the compiler could move the epilogue's reads of the stored C buffer before the `tilestored`.
template <int T>
GLINT_TARGET_AMX inline void TileLoad(const void* base, int64_t stride) {
  asm volatile("tileloadd (%0,%1,1), %%tmm%c2" : : "r"(base), "r"(stride), "n"(T) : "memory");
}
template <int T>
GLINT_TARGET_AMX inline void TileStore(void* base, int64_t stride) {
  asm volatile("tilestored %%tmm%c2, (%0,%1,1)" : : "r"(base), "r"(stride), "n"(T) : "memory");
}
template <int T>
GLINT_TARGET_AMX inline void TileZero() {
  asm volatile("tilezero %%tmm%c0" : : "n"(T));
}
// C += A · B, A signed and B unsigned bytes.
template <int C, int A, int B>
GLINT_TARGET_AMX inline void TileDotSignedUnsigned() {
  asm volatile("tdpbsud %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "n"(C), "n"(A), "n"(B));
}

// K bytes per tile step: 64 (a full tile row) when the group allows, else the group's largest power-of-two
// divisor ≥ 16 (groups are multiples of 16), so that no step crosses a group boundary.
int KStep(int64_t group) { return group % 64 == 0 ? 64 : group % 32 == 0 ? 32 : 16; }

// tokens0/tokens1: rows of token tiles 0 and 1 (tokens1 = 0: tile 1 unused).
GLINT_TARGET_AMX void ConfigureTiles(int tokens0, int tokens1, int k_step) {
  TileConfig config;
  for (int n = 0; n < 2; ++n) {
    config.Set(kC + n, tokens0, 64);
    if (tokens1 > 0) config.Set(kC + 2 + n, tokens1, 64);
    config.Set(kB + n, k_step / 4, 64);
  }
  config.Set(kA, tokens0, k_step);
  if (tokens1 > 0) config.Set(kA + 1, tokens1, k_step);
  LoadTileConfig(config);
}

struct GroupSpan {
  const uint8_t* w;     // row block b's codes at the group's first k
  int64_t block_bytes;  // to row block b + 1
  const int8_t* x;      // token t0's codes at the group's first k
  int64_t x_stride;     // to token t0 + 1
  int steps, k_step;
};

// The int32 sums of one K-group for MT token tiles × NB row blocks into c [2m + n][16 tokens][16 rows].
template <int MT, int NB>
GLINT_TARGET_AMX void GroupProducts(const GroupSpan& s, int32_t* c) {
  TileZero<kC>();
  if constexpr (NB == 2) TileZero<kC + 1>();
  if constexpr (MT == 2) TileZero<kC + 2>();
  if constexpr (MT == 2 && NB == 2) TileZero<kC + 3>();
  for (int step = 0; step < s.steps; ++step) {
    const int64_t k = int64_t{step} * s.k_step;
    TileLoad<kA>(s.x + k, s.x_stride);
    if constexpr (MT == 2) TileLoad<kA + 1>(s.x + kTileTokens * s.x_stride + k, s.x_stride);
    TileLoad<kB>(s.w + 16 * k, 64);
    if constexpr (NB == 2) TileLoad<kB + 1>(s.w + s.block_bytes + 16 * k, 64);
    TileDotSignedUnsigned<kC, kA, kB>();
    if constexpr (NB == 2) TileDotSignedUnsigned<kC + 1, kA, kB + 1>();
    if constexpr (MT == 2) TileDotSignedUnsigned<kC + 2, kA + 1, kB>();
    if constexpr (MT == 2 && NB == 2) TileDotSignedUnsigned<kC + 3, kA + 1, kB + 1>();
  }
  TileStore<kC>(c, 64);
  if constexpr (NB == 2) TileStore<kC + 1>(c + 256, 64);
  if constexpr (MT == 2) TileStore<kC + 2>(c + 512, 64);
  if constexpr (MT == 2 && NB == 2) TileStore<kC + 3>(c + 768, 64);
}

GLINT_TARGET_AMX void Products(int mt, int nb, const GroupSpan& s, int32_t* c) {
  if (mt == 2) {
    nb == 2 ? GroupProducts<2, 2>(s, c) : GroupProducts<2, 1>(s, c);
  } else {
    nb == 2 ? GroupProducts<1, 2>(s, c) : GroupProducts<1, 1>(s, c);
  }
}

// One C tile (`tokens` tokens from t × the 16 rows of row block b) of group g: y += float(C − correction) ·
// (s_w · s_x) into y's existing rows, or (sums != nullptr) the corrected int32 sums into the group_sums layout.
struct EpilogueArgs {
  const QuantizedActivations* x;
  const float* w_scales;  // row block b's 16 scales of group g
  int64_t t, g;
  int tokens;
  __mmask16 rows;
  float* y;  // token t, row 16·b
  int64_t y_stride;
  int32_t* sums;  // token t, row 16·(b − block_begin), group g; token stride sums_stride
  int64_t sums_stride;
};

GLINT_TARGET_AMX void Epilogue(const EpilogueArgs& a, const int32_t* c) {
  const int64_t groups = a.x->groups();
  const __m512 w_scale = _mm512_loadu_ps(a.w_scales);
  for (int i = 0; i < a.tokens; ++i) {
    const int64_t tg = (a.t + i) * groups + a.g;
    const __m512i corrected =
        _mm512_sub_epi32(_mm512_load_si512(c + 16 * i), _mm512_set1_epi32(a.x->bias_correction[tg]));
    if (a.sums != nullptr) {
      alignas(64) int32_t lanes[16];
      _mm512_store_si512(lanes, corrected);
      for (int lane = 0; lane < 16; ++lane) a.sums[i * a.sums_stride + lane * groups] = lanes[lane];
      continue;
    }
    float* out = a.y + i * a.y_stride;
    const __m512 scale = _mm512_mul_ps(w_scale, _mm512_set1_ps(a.x->scales[tg]));
    const __m512 previous = a.g == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(a.rows, out);
    _mm512_mask_storeu_ps(out, a.rows, _mm512_fmadd_ps(_mm512_cvtepi32_ps(corrected), scale, previous));
  }
}

// Token pairs (32 tokens) outer, so the tile shape is configured once per pair; row-block pairs inner, each
// pair's weights (32 rows × K) staying in L2 while the groups pass; then the K-groups.
GLINT_TARGET_AMX void Run(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin,
                          int64_t block_end, float* y, int64_t y_stride, int32_t* sums) {
  const int64_t groups = x.groups(), block_bytes = w.layout.block_code_bytes();
  const int k_step = KStep(x.group);
  const int64_t sums_rows = (block_end - block_begin) * 16;
  alignas(64) int32_t c[4 * 256];
  for (int64_t t0 = 0; t0 < x.tokens; t0 += 2 * kTileTokens) {
    const int tokens0 = static_cast<int>(std::min<int64_t>(kTileTokens, x.tokens - t0));
    const int tokens1 = static_cast<int>(std::clamp<int64_t>(x.tokens - t0 - kTileTokens, 0, kTileTokens));
    ConfigureTiles(tokens0, tokens1, k_step);
    const int mt = tokens1 > 0 ? 2 : 1;
    for (int64_t b = block_begin; b < block_end; b += 2) {
      const int nb = static_cast<int>(std::min<int64_t>(2, block_end - b));
      for (int64_t g = 0; g < groups; ++g) {
        const GroupSpan span{w.BlockCodes(b) + 16 * g * x.group, block_bytes, x.codes + t0 * x.padded_cols + g * x.group,
                             x.padded_cols, static_cast<int>(x.group / k_step), k_step};
        Products(mt, nb, span, c);
        for (int m = 0; m < mt; ++m) {
          for (int n = 0; n < nb; ++n) {
            const int64_t block = b + n, t = t0 + m * kTileTokens;
            const int64_t rows = std::min<int64_t>(16, w.layout.rows - block * 16);
            EpilogueArgs a{&x, w.BlockScales(block) + g * 16, t, g, m == 0 ? tokens0 : tokens1,
                           static_cast<__mmask16>((1u << rows) - 1), nullptr, y_stride, nullptr, sums_rows * groups};
            if (sums != nullptr) {
              a.sums = sums + (t * sums_rows + (block - block_begin) * 16) * groups + g;
            } else {
              a.y = y + t * y_stride + block * 16;
            }
            Epilogue(a, c + (2 * m + n) * 256);
          }
        }
      }
    }
  }
  ReleaseTiles();
}

void GemmAmx(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end,
             float* y, int64_t y_stride) {
  if (x.tokens < kAmxMinTokens) {
    Int8KernelsAvx512().gemm(w, x, block_begin, block_end, y, y_stride);
    return;
  }
  Run(w, x, block_begin, block_end, y, y_stride, nullptr);
}

}  // namespace

void Int8GemmAmxTiles(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin,
                      int64_t block_end, float* y, int64_t y_stride) {
  Run(w, x, block_begin, block_end, y, y_stride, nullptr);
}

void Int8GroupSumsAmxTiles(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin,
                           int64_t block_end, int32_t* sums) {
  Run(w, x, block_begin, block_end, nullptr, 0, sums);
}

// The quantizer is the VNNI level's (same codes, scales and corrections); group_sums is the tiles' whatever the
// token count, so the sweep tests of every level check the tile path's integers.
const Int8Kernels& Int8KernelsAmx() {
  static const Int8Kernels kernels{Int8KernelsAvx512().quantize, GemmAmx, Int8GroupSumsAmxTiles};
  return kernels;
}

}  // namespace glint::internal
