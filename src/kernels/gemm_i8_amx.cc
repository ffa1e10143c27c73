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
// multiplies. The C tiles of a K-group start from −128·Σx (the bias correction done by the tile unit), and after
// the group they go to a 4 KiB buffer where AVX-512 applies the VNNI kernels' fp32 epilogue (gemm_tile_avx512.h):
// y += float(C) · (s_w · s_x), the first group storing. The tile unit and the vector ports are separate, so the
// next group's multiplies overlap this group's epilogue.
// The walk is a template on the tile instructions (amx_tiles.h HardwareTiles; amx_emulator.h EmulatedTiles, the
// software model that tests it on CPUs without AMX).
// GCC 12 reports its own AVX-512 intrinsics (the _mm*_undefined_* idiom) as maybe-uninitialized: GCC bug 105593.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>

#include "base/aligned_buffer.h"
#include "kernels/amx_emulator.h"
#include "kernels/amx_tiles.h"
#include "kernels/gemm_i8.h"

namespace glint::internal {
namespace {

constexpr int kTileTokens = 16;
constexpr int kC = 0, kA = 4, kB = 6;  // first C, A and B tile registers

// K bytes per tile step: 64 (a full tile row) when the group allows, else the group's largest power-of-two
// divisor ≥ 16 (groups are multiples of 16), so that no step crosses a group boundary.
int KStep(int64_t group) { return group % 64 == 0 ? 64 : group % 32 == 0 ? 32 : 16; }

// tokens0/tokens1: rows of token tiles 0 and 1 (tokens1 = 0: tile 1 unused).
template <typename Tiles>
GLINT_TARGET_AMX void ConfigureTiles(int tokens0, int tokens1, int k_step) {
  TileConfig config;
  for (int n = 0; n < 2; ++n) {
    config.Set(kC + n, tokens0, 64);
    if (tokens1 > 0) config.Set(kC + 2 + n, tokens1, 64);
    config.Set(kB + n, k_step / 4, 64);
  }
  config.Set(kA, tokens0, k_step);
  if (tokens1 > 0) config.Set(kA + 1, tokens1, k_step);
  Tiles::Configure(config);
}

struct GroupSpan {
  const uint8_t* w;      // row block b's codes at the group's first k
  int64_t block_bytes;   // to row block b + 1
  const int8_t* x;       // token t0's codes at the group's first k
  int64_t x_stride;      // to token t0 + 1
  const int32_t* start;  // the group's starting C tiles [MT][16 tokens][16 rows]: row i = −128·Σx of token i
  int steps, k_step;
};

// The corrected int32 sums of one K-group for MT token tiles × NB row blocks into c [2m + n][16 tokens][16 rows].
// The C tiles start from −128·Σx instead of zero, so the tile unit applies the bias correction (int32, exact)
// and the epilogue is left with the fp32 scaling.
// With s.start null the C tiles start from zero (`tilezero`, no loads) and the epilogue subtracts 128·Σx instead.
template <typename Tiles, int MT, int NB>
GLINT_TARGET_AMX void GroupProducts(const GroupSpan& s, int32_t* c) {
  if (s.start == nullptr) {
    Tiles::template Zero<kC>();
    if constexpr (NB == 2) Tiles::template Zero<kC + 1>();
    if constexpr (MT == 2) Tiles::template Zero<kC + 2>();
    if constexpr (MT == 2 && NB == 2) Tiles::template Zero<kC + 3>();
  } else {
    Tiles::template Load<kC>(s.start, 64);
    if constexpr (NB == 2) Tiles::template Load<kC + 1>(s.start, 64);
    if constexpr (MT == 2) Tiles::template Load<kC + 2>(s.start + 256, 64);
    if constexpr (MT == 2 && NB == 2) Tiles::template Load<kC + 3>(s.start + 256, 64);
  }
  for (int step = 0; step < s.steps; ++step) {
    const int64_t k = int64_t{step} * s.k_step;
    Tiles::template Load<kA>(s.x + k, s.x_stride);
    if constexpr (MT == 2) Tiles::template Load<kA + 1>(s.x + kTileTokens * s.x_stride + k, s.x_stride);
    Tiles::template Load<kB>(s.w + 16 * k, 64);
    if constexpr (NB == 2) Tiles::template Load<kB + 1>(s.w + s.block_bytes + 16 * k, 64);
    Tiles::template DotSignedUnsigned<kC, kA, kB>();
    if constexpr (NB == 2) Tiles::template DotSignedUnsigned<kC + 1, kA, kB + 1>();
    if constexpr (MT == 2) Tiles::template DotSignedUnsigned<kC + 2, kA + 1, kB>();
    if constexpr (MT == 2 && NB == 2) Tiles::template DotSignedUnsigned<kC + 3, kA + 1, kB + 1>();
  }
  Tiles::template Store<kC>(c, 64);
  if constexpr (NB == 2) Tiles::template Store<kC + 1>(c + 256, 64);
  if constexpr (MT == 2) Tiles::template Store<kC + 2>(c + 512, 64);
  if constexpr (MT == 2 && NB == 2) Tiles::template Store<kC + 3>(c + 768, 64);
}

template <typename Tiles>
GLINT_TARGET_AMX void Products(int mt, int nb, const GroupSpan& s, int32_t* c) {
  if (mt == 2) {
    nb == 2 ? GroupProducts<Tiles, 2, 2>(s, c) : GroupProducts<Tiles, 2, 1>(s, c);
  } else {
    nb == 2 ? GroupProducts<Tiles, 1, 2>(s, c) : GroupProducts<Tiles, 1, 1>(s, c);
  }
}

// acc += float(C − corrections) · (s_w · s_x) for one C tile (`tokens` tokens × one row block) of one group; acc
// [16][16] is the tile's fp32 sums, the first group stores. `corrections` (128·Σx of each token's group, stride
// `groups`) is null where the C tiles started from −128·Σx; the subtraction is int32 and exact either way, so both
// give the same bits. fmadd onto +0 in the first group, as the VNNI epilogue, keeps the bits equal. (The sums stay
// in this contiguous 1 KiB until the last group: y's rows are a whole matrix row apart, often a multiple of 4 KiB,
// so 16-32 of them fall into one L1 set and would miss on every group.)
template <bool kFirst>
GLINT_TARGET_AMX void ScaleInto(const int32_t* c, int tokens, const float* x_scales, const int32_t* corrections,
                                int64_t groups, const float* w_scales, float* acc) {
  const __m512 w_scale = _mm512_loadu_ps(w_scales);
  for (int i = 0; i < tokens; ++i) {
    const __m512 scale = _mm512_mul_ps(w_scale, _mm512_set1_ps(x_scales[i * groups]));
    __m512i ints = _mm512_load_si512(c + 16 * i);
    if (corrections != nullptr) ints = _mm512_sub_epi32(ints, _mm512_set1_epi32(corrections[i * groups]));
    const __m512 sums = _mm512_cvtepi32_ps(ints);
    const __m512 previous = kFirst ? _mm512_setzero_ps() : _mm512_load_ps(acc + 16 * i);
    _mm512_store_ps(acc + 16 * i, _mm512_fmadd_ps(sums, scale, previous));
  }
}

// Row groups (AmxWalk::kRowGroups): the row blocks whose weights fill this many bytes — half a Sapphire Rapids
// core's 2 MiB L2, the other half left to a token pair's activations (32 × K bytes) and the C and sum buffers.
constexpr int64_t kRowGroupBytes = int64_t{1} << 20;

// One call's walk (kEngineAmxWalk, gemm_i8.h): the call's row blocks taken kRowGroupBytes of weights at a time
// (row groups), so that a call larger than L2 (a big matrix on few threads) reads its weights from memory once
// instead of once per 32 tokens; inside a row group, token pairs (32 tokens; the tile shape configured once per
// pair), then row-block pairs, each pair's weights (32 rows × K) read from L2 while the K-groups pass; the C tiles
// of a group start from `tilezero` and the epilogue subtracts the −128·Σx correction (int32, exact). The C tiles
// alternate between two buffers so that group g's epilogue reads stores the tile unit finished a group earlier
// (reading a `tilestored` result at once stalls on the store) while group g + 1 multiplies.
// The other walks (AmxWalk): token pairs outer over the whole call (the first engine walk: weights from memory
// once per token pair), and the C tiles started by four tile loads of −128·Σx a group instead of `tilezero`.
// Where the time goes (docs/fast-path.md "AMX", measured on L2-resident weights): the products alone, tile loads
// of activations and weights included, run at ≈ 55–65 % of the tile unit's peak; the four `tilestored` a group
// (a 128-k group is only two `tdpbsud` per C tile) take that to ≈ 37 %, the fp32 epilogue to ≈ 25 %.
template <typename Tiles>
class TileWalk {
 public:
  GLINT_TARGET_AMX TileWalk(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin,
                            int64_t block_end, float* y, int64_t y_stride, int32_t* sums, AmxWalk walk)
      : w_(w),
        x_(x),
        block_begin_(block_begin),
        block_end_(block_end),
        y_(y),
        y_stride_(y_stride),
        sums_(sums),
        groups_(x.groups()),
        k_step_(KStep(x.group)),
        zero_start_(walk == AmxWalk::kZeroStart || walk == AmxWalk::kRowGroupsZeroStart),
        row_group_blocks_(walk == AmxWalk::kRowGroups || walk == AmxWalk::kRowGroupsZeroStart
                              ? AmxRowGroupBlocks(w.layout.padded_cols())
                              : std::max<int64_t>(1, block_end - block_begin)) {}

  GLINT_TARGET_AMX void Run() {
    for (int64_t group_begin = block_begin_; group_begin < block_end_; group_begin += row_group_blocks_) {
      const int64_t group_end = std::min(group_begin + row_group_blocks_, block_end_);
      for (t0_ = 0; t0_ < x_.tokens; t0_ += 2 * kTileTokens) {
        tokens_[0] = static_cast<int>(std::min<int64_t>(kTileTokens, x_.tokens - t0_));
        tokens_[1] = static_cast<int>(std::clamp<int64_t>(x_.tokens - t0_ - kTileTokens, 0, kTileTokens));
        ConfigureTiles<Tiles>(tokens_[0], tokens_[1], k_step_);
        if (!zero_start_) FillStartTiles();
        for (int64_t b = group_begin; b < group_end; b += 2) {
          RowPair(b, static_cast<int>(std::min<int64_t>(2, group_end - b)));
        }
      }
    }
    Tiles::Release();
  }

 private:
  // start_ [groups][2 token tiles][16 tokens][16 rows] = −128·Σx of the token, the C tiles' starting values.
  GLINT_TARGET_AMX void FillStartTiles() {
    thread_local AlignedBuffer buffer;
    const size_t bytes = static_cast<size_t>(groups_) * 2 * 256 * 4;
    if (buffer.size() < bytes) buffer = AlignedBuffer(bytes);
    start_ = buffer.As<int32_t>();
    for (int64_t g = 0; g < groups_; ++g) {
      for (int m = 0; m < 2; ++m) {
        for (int i = 0; i < tokens_[m]; ++i) {
          const int32_t correction = x_.bias_correction[(t0_ + m * kTileTokens + i) * groups_ + g];
          _mm512_store_si512(start_ + (g * 2 + m) * 256 + 16 * i, _mm512_set1_epi32(-correction));
        }
      }
    }
  }

  GLINT_TARGET_AMX void RowPair(int64_t b, int nb) {
    const int mt = tokens_[1] > 0 ? 2 : 1;
    for (int64_t g = 0; g < groups_; ++g) {
      const GroupSpan span{w_.BlockCodes(b) + 16 * g * x_.group,
                           w_.layout.block_code_bytes(),
                           x_.codes + t0_ * x_.padded_cols + g * x_.group,
                           x_.padded_cols,
                           zero_start_ ? nullptr : start_ + g * 512,
                           static_cast<int>(x_.group / k_step_),
                           k_step_};
      Products<Tiles>(mt, nb, span, c_ + (g & 1) * 1024);
      if (g > 0) Finish(b, mt, nb, g - 1);
    }
    Finish(b, mt, nb, groups_ - 1);
  }

  GLINT_TARGET_AMX void Finish(int64_t b, int mt, int nb, int64_t g) {
    const int32_t* c = c_ + (g & 1) * 1024;
    for (int m = 0; m < mt; ++m) {
      for (int n = 0; n < nb; ++n) {
        const int32_t* tile = c + (2 * m + n) * 256;
        const int64_t block = b + n, t = t0_ + m * kTileTokens;
        const int32_t* corrections = zero_start_ ? x_.bias_correction + t * groups_ + g : nullptr;
        if (sums_ != nullptr) {
          CopySums(tile, corrections, tokens_[m], t, block, g);
          continue;
        }
        const float* x_scales = x_.scales + t * groups_ + g;
        const float* w_scales = w_.BlockScales(block) + g * 16;
        float* acc = acc_ + (2 * m + n) * 256;
        if (g == 0) {
          ScaleInto<true>(tile, tokens_[m], x_scales, corrections, groups_, w_scales, acc);
        } else {
          ScaleInto<false>(tile, tokens_[m], x_scales, corrections, groups_, w_scales, acc);
        }
        if (g == groups_ - 1) Store(acc, tokens_[m], t, block);
      }
    }
  }

  // The finished sums of one C tile into y's rows that exist.
  GLINT_TARGET_AMX void Store(const float* acc, int tokens, int64_t t, int64_t block) {
    const int64_t rows = std::min<int64_t>(16, w_.layout.rows - block * 16);
    const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
    for (int i = 0; i < tokens; ++i) {
      _mm512_mask_storeu_ps(y_ + (t + i) * y_stride_ + block * 16, mask, _mm512_load_ps(acc + 16 * i));
    }
  }

  // The group_sums layout: sums [tokens, (block_end − block_begin)·16, groups]; `corrections` as in ScaleInto.
  GLINT_TARGET_AMX void CopySums(const int32_t* tile, const int32_t* corrections, int tokens, int64_t t, int64_t block,
                                 int64_t g) {
    const int64_t rows = (block_end_ - block_begin_) * 16;
    for (int i = 0; i < tokens; ++i) {
      const int32_t correction = corrections != nullptr ? corrections[i * groups_] : 0;
      for (int lane = 0; lane < 16; ++lane) {
        sums_[((t + i) * rows + (block - block_begin_) * 16 + lane) * groups_ + g] = tile[16 * i + lane] - correction;
      }
    }
  }

  const Int8MatrixView& w_;
  const QuantizedActivations& x_;
  const int64_t block_begin_, block_end_;
  float* const y_;
  const int64_t y_stride_;
  int32_t* const sums_;
  const int64_t groups_;
  const int k_step_;
  const bool zero_start_;
  const int64_t row_group_blocks_;
  int64_t t0_ = 0;
  int tokens_[2] = {0, 0};
  int32_t* start_ = nullptr;
  alignas(64) int32_t c_[2 * 4 * 256];  // two groups' C tiles
  alignas(64) float acc_[4 * 256];      // the fp32 sums of the four C tiles over the groups so far
};

template <typename Tiles>
GLINT_TARGET_AMX void Run(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin,
                          int64_t block_end, float* y, int64_t y_stride, int32_t* sums, AmxWalk walk) {
  TileWalk<Tiles>(w, x, block_begin, block_end, y, y_stride, sums, walk).Run();
}

void GemmAmx(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end, float* y,
             int64_t y_stride) {
  if (x.tokens < kAmxMinTokens) {
    Int8KernelsAvx512().gemm(w, x, block_begin, block_end, y, y_stride);
    return;
  }
  Run<HardwareTiles>(w, x, block_begin, block_end, y, y_stride, nullptr, kEngineAmxWalk);
}

}  // namespace

std::string_view AmxWalkName(AmxWalk walk) {
  switch (walk) {
    case AmxWalk::kTokenPairsOuter:
      return "TokenPairsOuter";
    case AmxWalk::kRowGroups:
      return "RowGroups";
    case AmxWalk::kZeroStart:
      return "ZeroStart";
    case AmxWalk::kRowGroupsZeroStart:
      return "RowGroupsZeroStart";
  }
  return "?";
}

int64_t AmxRowGroupBlocks(int64_t padded_cols) {
  const int64_t blocks = kRowGroupBytes / (kInt8RowBlock * std::max<int64_t>(1, padded_cols));
  return std::max<int64_t>(2, blocks / 2 * 2);  // whole row-block pairs
}

void Int8GemmAmxTiles(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end,
                      float* y, int64_t y_stride, AmxTiles tiles, AmxWalk walk) {
  if (tiles == AmxTiles::kEmulated) {
    Run<EmulatedTiles>(w, x, block_begin, block_end, y, y_stride, nullptr, walk);
  } else {
    Run<HardwareTiles>(w, x, block_begin, block_end, y, y_stride, nullptr, walk);
  }
}

void Int8GroupSumsAmxTiles(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin,
                           int64_t block_end, int32_t* sums, AmxTiles tiles, AmxWalk walk) {
  if (tiles == AmxTiles::kEmulated) {
    Run<EmulatedTiles>(w, x, block_begin, block_end, nullptr, 0, sums, walk);
  } else {
    Run<HardwareTiles>(w, x, block_begin, block_end, nullptr, 0, sums, walk);
  }
}

// The quantizer is the VNNI level's (same codes, scales and corrections); group_sums is the tiles' whatever the
// token count, so the sweep tests of every level check the tile path's integers.
const Int8Kernels& Int8KernelsAmx() {
  static const Int8Kernels kernels{
      Int8KernelsAvx512().quantize, GemmAmx,
      [](const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end,
         int32_t* sums) { Run<HardwareTiles>(w, x, block_begin, block_end, nullptr, 0, sums, kEngineAmxWalk); }};
  return kernels;
}

}  // namespace glint::internal
