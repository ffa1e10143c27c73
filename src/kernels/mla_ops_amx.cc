// mla::AttendBf16Amx (mla_ops.h): AttendBf16's attention with both products on AMX-BF16 tiles, what
// `--mla-attention bf16` runs where the kernels are AMX (1.5–3.4× AttendBf16 on a 2-vCPU Xeon; docs/fast-path.md
// "MLA attention in bf16"). Checked against ref::LatentAttentionBf16 on the software tiles (amx_emulator.h) and on
// the tile unit wherever the tests run with AMX-BF16.
//
// tdpbf16ps C += A·B: C [16 rows][16 fp32], A [16 rows][16 bf16 pairs], B [16 pair rows][16 columns × a pair]:
// C[m][n] += Σ_k A[m][2k]·B[k][2n] + A[m][2k+1]·B[k][2n+1], 16 × 16 × 32 products an instruction. A's rows are
// plain row-major bf16; B pairs consecutive values of the summed index per column, so each product needs one of
// its operands in that pair layout:
//   scores, as their transpose: Sᵀ[i][h] = Σ_r c_i[r] q̃_h[r], A = 16 latent rows as they are (copied to one
//     contiguous bf16 block, since the selected rows are scattered), B = q̃ rearranged once a call into
//     qT[r/2][h] = (q̃_h[r], q̃_h[r+1]);
//   output: ō[h][r] = Σ_i p[h][i] c_i[r], A = 16 heads' probabilities (row-major), B = the latents with pairs of
//     positions interleaved, pairs[i/2][r] = (c_i[r], c_{i+1}[r]), built once a call.
// Sᵀ is transposed back (× scale) for the softmax, SoftmaxRows in fp32 (the row form of AttendBf16's), then bf16.
// Padding (heads to 16, positions to 16 or 32, the rank to 32) is zeros, which add exact zeros. Tiles: C tmm0–3 (2 ×
// 2), A tmm4–5, B tmm6–7, every tile 16 rows × 64 bytes: one configuration for the whole call.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, see gemm_i8_avx512.cc
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/status.h"
#include "kernels/amx_emulator.h"
#include "kernels/amx_tiles.h"
#include "kernels/isa.h"
#include "kernels/mla_bf16_common.h"
#include "kernels/mla_ops.h"

#define GLINT_TARGET_AMX_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx512bf16,amx-tile,amx-int8,amx-bf16")))

namespace glint::mla {
namespace {

constexpr int64_t kTileRows = 16;  // heads or positions per tile
constexpr int64_t kTileK = 32;     // bf16 values of the summed index per tile (16 pairs)
constexpr int kC = 0, kA = 4, kB = 6;

int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// The scratch: sections on 64-byte boundaries.
struct Scratch {
  Scratch(float* scratch, int64_t heads, int64_t count, int64_t rank) { Lay(scratch, heads, count, rank); }
  static int64_t Floats(int64_t heads, int64_t count, int64_t rank) {
    Scratch sizes;
    return 16 + sizes.Lay(nullptr, heads, count, rank);
  }

  int64_t heads16 = 0, count16 = 0, count32 = 0, rank32 = 0;
  uint16_t* q = nullptr;        // [heads16][rank32] bf16 q̃, heads past `heads` zero
  uint16_t* q_pairs = nullptr;  // [rank32 / 2][heads16] pairs: qT
  uint16_t* rows = nullptr;     // [count16][rank32] bf16, rows past count zero
  uint16_t* pairs = nullptr;    // [count32 / 2][rank32] pairs of positions
  float* scores_t = nullptr;    // [count16][heads16] Sᵀ
  float* scores = nullptr;      // [heads][count] scale · S, then the softmax
  uint16_t* p = nullptr;        // [heads16][count32] bf16 probabilities, padding zero
  float* sums = nullptr;        // [heads16][rank32] ō

 private:
  Scratch() = default;
  int64_t Lay(float* base, int64_t heads, int64_t count, int64_t rank) {
    heads16 = RoundUp(heads, kTileRows), count16 = RoundUp(count, kTileRows), count32 = RoundUp(count, kTileK);
    rank32 = RoundUp(rank, kTileK);
    float* at =
        base == nullptr ? nullptr : reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(base) + 63) / 64 * 64);
    int64_t used = 0;
    const auto take = [&](int64_t bytes) {
      float* section = at == nullptr ? nullptr : at + used;
      used += Floats64(bytes);
      return section;
    };
    q = reinterpret_cast<uint16_t*>(take(heads16 * rank32 * 2));
    q_pairs = reinterpret_cast<uint16_t*>(take(heads16 * rank32 * 2));
    rows = reinterpret_cast<uint16_t*>(take(count16 * rank32 * 2));
    pairs = reinterpret_cast<uint16_t*>(take(count32 * rank32 * 2));
    scores_t = take(count16 * heads16 * 4);
    scores = take(heads * count * 4);
    p = reinterpret_cast<uint16_t*>(take(heads16 * count32 * 2));
    sums = take(heads16 * rank32 * 4);
    return used;
  }
};

template <typename Tiles>
GLINT_TARGET_AMX_BF16 void ConfigureTiles() {
  internal::TileConfig config;
  for (int t = 0; t < 8; ++t) config.Set(t, kTileRows, 64);
  Tiles::Configure(config);
}

// C tiles (m, n) of an mt × nb block (each 1 or 2) from zero, summed over `steps` k-steps: A_m at a + m·a_tile +
// step·a_step, B_n at b + n·b_tile + step·b_step (byte offsets), then stored to out + m·out_m + n·out_n.
struct Block {
  const uint8_t* a;
  int64_t a_stride, a_tile, a_step;
  const uint8_t* b;
  int64_t b_stride, b_tile, b_step;
  uint8_t* out;
  int64_t out_stride, out_m, out_n;
  int64_t steps;
  int mt, nb;
};

template <typename Tiles>
GLINT_TARGET_AMX_BF16 void Products(const Block& block) {
  Tiles::template Zero<kC>();
  if (block.nb == 2) Tiles::template Zero<kC + 1>();
  if (block.mt == 2) Tiles::template Zero<kC + 2>();
  if (block.mt == 2 && block.nb == 2) Tiles::template Zero<kC + 3>();
  for (int64_t step = 0; step < block.steps; ++step) {
    Tiles::template Load<kA>(block.a + step * block.a_step, block.a_stride);
    if (block.mt == 2) Tiles::template Load<kA + 1>(block.a + block.a_tile + step * block.a_step, block.a_stride);
    Tiles::template Load<kB>(block.b + step * block.b_step, block.b_stride);
    if (block.nb == 2) Tiles::template Load<kB + 1>(block.b + block.b_tile + step * block.b_step, block.b_stride);
    Tiles::template DotBf16<kC, kA, kB>();
    if (block.nb == 2) Tiles::template DotBf16<kC + 1, kA, kB + 1>();
    if (block.mt == 2) Tiles::template DotBf16<kC + 2, kA + 1, kB>();
    if (block.mt == 2 && block.nb == 2) Tiles::template DotBf16<kC + 3, kA + 1, kB + 1>();
  }
  Tiles::template Store<kC>(block.out, block.out_stride);
  if (block.nb == 2) Tiles::template Store<kC + 1>(block.out + block.out_n, block.out_stride);
  if (block.mt == 2) Tiles::template Store<kC + 2>(block.out + block.out_m, block.out_stride);
  if (block.mt == 2 && block.nb == 2)
    Tiles::template Store<kC + 3>(block.out + block.out_m + block.out_n, block.out_stride);
}

// pairs[j][r] = (rows[2j][r], rows[2j + 1][r]) for j < count32 / 2; rows past count16 read as zeros.
GLINT_TARGET_AMX_BF16 void InterleavePositionPairs(const Scratch& s) {
  for (int64_t j = 0; j < s.count32 / 2; ++j) {
    uint32_t* out = reinterpret_cast<uint32_t*>(s.pairs) + j * s.rank32;
    if (2 * j >= s.count16) {
      std::memset(out, 0, static_cast<size_t>(s.rank32) * 4);
      continue;
    }
    const uint16_t* even = s.rows + 2 * j * s.rank32;
    InterleavePositions(even, even + s.rank32, s.rank32, out);
  }
}

// The attention over s.rows (filled, count16 rows) for q_latent [heads, rank] into out [heads, rank].
template <typename Tiles>
GLINT_TARGET_AMX_BF16 void Attention(const Scratch& s, const float* q_latent, int64_t heads, int64_t rank,
                                     int64_t count, float scale, float* out) {
  // qT: each head's q̃ in bf16, then pairs of rank values per head.
  for (int64_t h = 0; h < s.heads16; ++h) {
    if (h < heads) {
      ToBf16(q_latent + h * rank, rank, s.rank32, s.q + h * s.rank32);
    } else {
      std::memset(s.q + h * s.rank32, 0, static_cast<size_t>(s.rank32) * 2);
    }
  }
  TransposeRankPairs(s.q, s.heads16, s.rank32, reinterpret_cast<uint32_t*>(s.q_pairs));
  InterleavePositionPairs(s);

  ConfigureTiles<Tiles>();
  // Sᵀ [count16][heads16]: position tiles × head tiles, two of each at a time, over the rank in 32-value steps.
  for (int64_t i0 = 0; i0 < s.count16; i0 += 2 * kTileRows) {
    for (int64_t h0 = 0; h0 < s.heads16; h0 += 2 * kTileRows) {
      // A: 16 latent rows (bytes 2·rank32 apart), B: 16 heads' pairs (rows 4·heads16 apart), 32 rank values a step.
      const Block block{.a = reinterpret_cast<const uint8_t*>(s.rows + i0 * s.rank32),
                        .a_stride = s.rank32 * 2,
                        .a_tile = kTileRows * s.rank32 * 2,
                        .a_step = kTileK * 2,
                        .b = reinterpret_cast<const uint8_t*>(s.q_pairs + h0 * 2),
                        .b_stride = s.heads16 * 4,
                        .b_tile = kTileRows * 4,
                        .b_step = kTileK / 2 * s.heads16 * 4,
                        .out = reinterpret_cast<uint8_t*>(s.scores_t + i0 * s.heads16 + h0),
                        .out_stride = s.heads16 * 4,
                        .out_m = kTileRows * s.heads16 * 4,
                        .out_n = kTileRows * 4,
                        .steps = s.rank32 / kTileK,
                        .mt = i0 + kTileRows < s.count16 ? 2 : 1,
                        .nb = h0 + kTileRows < s.heads16 ? 2 : 1};
      Products<Tiles>(block);
    }
  }
  // scale · S [heads][count], its softmax (SoftmaxRows), and the probabilities in bf16 [heads16][count32].
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < count; ++i) s.scores[h * count + i] = s.scores_t[i * s.heads16 + h] * scale;
  }
  SoftmaxRows(heads, count, s.scores);
  for (int64_t h = 0; h < s.heads16; ++h) {
    if (h < heads) {
      ToBf16(s.scores + h * count, count, s.count32, s.p + h * s.count32);
    } else {
      std::memset(s.p + h * s.count32, 0, static_cast<size_t>(s.count32) * 2);
    }
  }
  // ō [heads16][rank32]: head tiles × rank tiles, over the positions in 32-position (16-pair) steps.
  for (int64_t h0 = 0; h0 < s.heads16; h0 += 2 * kTileRows) {
    for (int64_t r0 = 0; r0 < s.rank32; r0 += 2 * kTileRows) {
      // A: 16 heads' probabilities (bytes 2·count32 apart), B: position pairs (rows 4·rank32 apart) of 16 rank
      // values, 32 positions a step; rank32 is a multiple of 32, so always two rank tiles.
      const Block block{.a = reinterpret_cast<const uint8_t*>(s.p + h0 * s.count32),
                        .a_stride = s.count32 * 2,
                        .a_tile = kTileRows * s.count32 * 2,
                        .a_step = kTileK * 2,
                        .b = reinterpret_cast<const uint8_t*>(s.pairs + r0 * 2),
                        .b_stride = s.rank32 * 4,
                        .b_tile = kTileRows * 4,
                        .b_step = kTileK / 2 * s.rank32 * 4,
                        .out = reinterpret_cast<uint8_t*>(s.sums + h0 * s.rank32 + r0),
                        .out_stride = s.rank32 * 4,
                        .out_m = kTileRows * s.rank32 * 4,
                        .out_n = kTileRows * 4,
                        .steps = s.count32 / kTileK,
                        .mt = h0 + kTileRows < s.heads16 ? 2 : 1,
                        .nb = 2};
      Products<Tiles>(block);
    }
  }
  Tiles::Release();
  for (int64_t h = 0; h < heads; ++h) std::memcpy(out + h * rank, s.sums + h * s.rank32, rank * sizeof(float));
}

template <typename Tiles, typename Rows>
GLINT_TARGET_AMX_BF16 void Attend(const float* q_latent, int64_t heads, int64_t rank, const Rows& rows,
                                  const int64_t* positions, int64_t count, float scale, float* out, float* scratch) {
  const Scratch s(scratch, heads, count, rank);
  for (int64_t i = 0; i < s.count16; ++i) {
    uint16_t* row = s.rows + i * s.rank32;
    if (i >= count) {
      std::memset(row, 0, static_cast<size_t>(s.rank32) * 2);
    } else if constexpr (std::is_same_v<Rows, LatentRows>) {
      ToBf16(rows.Row(positions[i]), rank, s.rank32, row);
    } else {
      std::memcpy(row, rows.Row(positions[i]), static_cast<size_t>(rank) * 2);
      std::memset(row + rank, 0, static_cast<size_t>(s.rank32 - rank) * 2);
    }
  }
  Attention<Tiles>(s, q_latent, heads, rank, count, scale, out);
}

}  // namespace

int64_t AttendBf16AmxScratchFloats(int64_t heads, int64_t count, int64_t rank) {
  return Scratch::Floats(heads, count, rank);
}

void AttendBf16Amx(const float* q_latent, int64_t heads, int64_t rank, const LatentRows& rows, const int64_t* positions,
                   int64_t count, float scale, float* out, float* scratch, AmxTiles tiles) {
  const std::string_view why = AmxBf16UnavailableReason(tiles);
  GLINT_CHECK(why.empty()) << "AttendBf16Amx cannot run here: " << why;
  if (tiles == AmxTiles::kEmulated) {
    Attend<internal::EmulatedTiles>(q_latent, heads, rank, rows, positions, count, scale, out, scratch);
  } else {
    Attend<internal::HardwareTiles>(q_latent, heads, rank, rows, positions, count, scale, out, scratch);
  }
}

void AttendBf16AmxInPlace(const float* q_latent, int64_t heads, int64_t rank, const LatentRowsBf16& rows,
                          const int64_t* positions, int64_t count, float scale, float* out, float* scratch,
                          AmxTiles tiles) {
  const std::string_view why = AmxBf16UnavailableReason(tiles);
  GLINT_CHECK(why.empty()) << "AttendBf16AmxInPlace cannot run here: " << why;
  if (tiles == AmxTiles::kEmulated) {
    Attend<internal::EmulatedTiles>(q_latent, heads, rank, rows, positions, count, scale, out, scratch);
  } else {
    Attend<internal::HardwareTiles>(q_latent, heads, rank, rows, positions, count, scale, out, scratch);
  }
}

}  // namespace glint::mla
