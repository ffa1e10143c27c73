// W8A8 matrix products: int8 weights (quant/int8_matrix.h, a scale per output row and K-group) times int8
// activations quantized per token and K-group, accumulated exactly in int32 within each group and combined in
// fp32 across groups:
//
//   y[t, r] = Σ_g  s_w[r, g] · s_x[t, g] · Σ_{c ∈ g} w[r, c] · x[t, c]          (the inner sum is exact int32)
//
// One kernel serves decode (a GEMV: one token per sequence) and prefill (a GEMM over many tokens): tiles of up to
// 4 row blocks × 6 tokens keep the int32 sums in registers, and a row block's weights stay in L2 while every token
// tile passes over them. Each level (isa.h) is its own translation unit (gemm_i8_{scalar,avx2,avx512}.cc);
// gemm_i8_scalar.cc is the specification the others are tested against, exactly for the int32 group sums.
//
// Two walks on AVX-512: the tile walk above (gemm_tile_avx512.h), and from kLanesMinTokens to kLanesMaxTokens tokens
// the lane walk (gemm_i8_avx512.cc: a register holds 16 tokens' sums of one row, so a row block streams once per
// 16 tokens, requested far ahead). Both give the same bits for every token.
//
// Activation quantization (per token and group): s_x = amax/127, code = round_to_nearest_even(x · 127/amax),
// |code| ≤ 127; a zero group has s_x = 0 and codes 0. Because packed weights are biased by +128, the kernels
// subtract 128 · Σ codes per (token, group), which the quantizer stores as `bias_correction`.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/aligned_buffer.h"
#include "kernels/isa.h"
#include "quant/int8_matrix.h"

namespace glint {

// Activations quantized for one weight layout's K-grouping. Non-owning.
struct QuantizedActivations {
  int64_t tokens = 0;
  int64_t cols = 0;         // logical K
  int64_t padded_cols = 0;  // = the weight layout's padded_cols; codes past cols are 0
  int64_t group = 0;
  const int8_t* codes = nullptr;             // [tokens, padded_cols]
  const float* scales = nullptr;             // [tokens, groups]
  const int32_t* bias_correction = nullptr;  // [tokens, groups]  128 · Σ_{c ∈ g} code[t, c]

  int64_t groups() const { return group > 0 ? padded_cols / group : 0; }
};

// Scratch for quantized activations of up to `max_tokens` × `max_padded_cols`, reused across calls.
class ActivationScratch {
 public:
  ActivationScratch() = default;
  // Grows the buffers (never shrinks) to hold `tokens` rows of `padded_cols` codes and `groups` groups.
  void Reserve(int64_t tokens, int64_t padded_cols, int64_t groups);
  int8_t* codes() { return codes_.As<int8_t>(); }
  float* scales() { return scales_.As<float>(); }
  int32_t* bias_correction() { return corrections_.As<int32_t>(); }

 private:
  AlignedBuffer codes_, scales_, corrections_;
};

struct Int8Kernels {
  // x: [tokens] rows of `cols` fp32 values, row stride x_stride. Writes codes [tokens, padded_cols] (zero past
  // cols), scales and bias corrections [tokens, padded_cols / group].
  void (*quantize)(const float* x, int64_t x_stride, int64_t tokens, int64_t cols, int64_t group, int64_t padded_cols,
                   int8_t* codes, float* scales, int32_t* bias_correction);
  // y[t, r] for every token and the rows of row blocks [block_begin, block_end) that exist (r < rows); y has row
  // stride y_stride (≥ rows). Other rows of y are not touched, so row-block ranges can run on different threads.
  void (*gemm)(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end, float* y,
               int64_t y_stride);
  // The exact int32 group sums Σ_{c ∈ g} w[r, c] · x[t, c] for row blocks [block_begin, block_end):
  // sums [tokens, (block_end − block_begin) · 16, groups]. For tests: the integer part of `gemm`, observable.
  void (*group_sums)(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end,
                     int32_t* sums);
};

const Int8Kernels& GetInt8Kernels(Isa isa);
// At the AMX level, int8 products with at least this many tokens (rows per weight) run on AMX tiles and smaller
// ones on AVX-512 VNNI: below 8 one token's 16-row tile leaves most of the tile multiply idle while the weights
// stream from memory either way, and at 12–16 the VNNI lane walk (a register holds 16 tokens' sums of one row, the
// weights requested far ahead) streams a weight faster than the tiles. Threshold benchmark, 2 threads of a 2-vCPU
// Xeon with AMX (2026-12-07, medians of 3; docs/fast-path.md "AMX"): a 4,096 × 4,096 weight from memory (batched
// decode's dense products) VNNI ÷ tiles 1.09× at 8 tokens, 1.07× at 12, 1.27× at 16, 0.94× at 24, 0.73× at 32; an
// expert's share in L2 (512 × 2,048) 0.86–0.89× at 12–16, 0.80× at 24. From 17 the tiles.
inline constexpr int64_t kAmxMinTokens = 17;  // the level must be supported (IsaSupported)

// The view of `tokens` rows quantized into `scratch` (reserved for them) for `layout`'s K-grouping.
QuantizedActivations ActivationsIn(const Int8Layout& layout, int64_t tokens, ActivationScratch& scratch);

// Quantizes with `kernels` into `scratch` for the K-grouping of `layout` and returns the view.
QuantizedActivations QuantizeActivations(const Int8Kernels& kernels, const Int8Layout& layout, const float* x,
                                         int64_t x_stride, int64_t tokens, ActivationScratch& scratch);

namespace internal {
// Per-level tables, defined in the level's translation unit.
const Int8Kernels& Int8KernelsScalar();
const Int8Kernels& Int8KernelsAvx2();
const Int8Kernels& Int8KernelsAvx512();
const Int8Kernels& Int8KernelsAmx();  // gemm_i8_amx.cc

// Walks of the AMX tile kernel (gemm_i8_amx.cc "One call's walk"). The engine's is kEngineAmxWalk; the others
// stay beside it, checked on the software tiles and on the tile unit wherever the tests run on AMX, and timed by
// `glint_kernel_bench --benchmark_filter='LinearI8.*isa:[4-7]'` (isa 4–7: these walks in order).
// Timed on a 2-vCPU Xeon with AMX (2026-12-07, docs/fast-path.md "AMX"): row groups outer read a call's weights
// once instead of once per 32 tokens, 1.2–1.4× on products larger than L2 and even on the rest; zero start and
// start tiles within 3 % of each other.
enum class AmxWalk { kTokenPairsOuter, kRowGroups, kZeroStart, kRowGroupsZeroStart };
inline constexpr AmxWalk kEngineAmxWalk = AmxWalk::kRowGroupsZeroStart;
std::string_view AmxWalkName(AmxWalk walk);  // "TokenPairsOuter", …: test names and benchmark labels
// Row blocks in one row group of kRowGroups (whole pairs; the weights of 1 MiB of a K of `padded_cols`).
int64_t AmxRowGroupBlocks(int64_t padded_cols);

// The AVX-512 level's walks (see the top of this file). The level's `gemm` and `group_sums` take the lane walk for
// products of kLanesMinTokens to kLanesMaxTokens tokens and the tile walk otherwise. Against the tile walk, weights
// from memory, 2 threads of a Zen 5 (docs/performance.md, "Tokens in lanes"): 1.06–1.13× at 12 tokens, 1.33× at 16,
// 1.17–1.24× at 20–24, 1.1× at 32–48; in the model, batched decode's 16-token dense products 1.31×. An expert's
// share of a 512-token prefill (≈ 64 tokens) gained 1.06× alone but nothing inside the prefill (0.98×, five
// alternating rounds), so the range ends at 48. The lane walk itself takes any token count.
inline constexpr int64_t kLanesMinTokens = 12;
inline constexpr int64_t kLanesMaxTokens = 48;
void Int8GemmLanesAvx512(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end,
                         float* y, int64_t y_stride);
void Int8GroupSumsLanesAvx512(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin,
                              int64_t block_end, int32_t* sums);
// The AVX-512 level with the tile walk at every token count: for tests and benchmarks (the lane walk's baseline).
const Int8Kernels& Int8KernelsAvx512Tiles();

// The AMX level's tile kernels themselves, whatever the token count (the table's `gemm` hands products of fewer
// than kAmxMinTokens tokens to the VNNI kernel): for tests and benchmarks.
void Int8GemmAmxTiles(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin, int64_t block_end,
                      float* y, int64_t y_stride, AmxTiles tiles = AmxTiles::kHardware, AmxWalk walk = kEngineAmxWalk);
void Int8GroupSumsAmxTiles(const Int8MatrixView& w, const QuantizedActivations& x, int64_t block_begin,
                           int64_t block_end, int32_t* sums, AmxTiles tiles = AmxTiles::kHardware,
                           AmxWalk walk = kEngineAmxWalk);
}  // namespace internal

}  // namespace glint
