// The KPool indexer's pool scores over pooled keys stored compactly (--kv-cache-dtype; quant/kv_rows.h), Highway-
// dispatched, with the scalar specification of each beside it (tests compare the two):
//
//   scores[m] = Σ_h head_weights[h] · relu(scale · query_h · key_m)          (model-glm53.md §7.3)
//
// int8 keys (k_m = s_m · codes_m): the query is quantized per head (q_h ≈ t_h · codes_h, t_h = amax/127, the
// integers kept as int16 so that pairs of products accumulate with one multiply-add instruction), the dot
// product of the codes is exact in int32 (|Σ| ≤ dim · 127² < 2^31 for dim < 133,000), and the epilogue
//   dot_f = float(Σ codes_h · codes_m) · (scale · t_h · s_m);   scores[m] += w_h · max(dot_f, 0)   (h ascending)
// is the same fp32 arithmetic in the kernel and the reference, so the int8 scores are bit-exact.
// fp32, bf16 and fp8 keys (bf16 and fp8 decoded to fp32 a tile at a time): the fp32 query times the keys (bf16 widened
// to fp32), accumulated in fp32 lanes with heads in lanes (ScoresFp32); the references sum in double, the difference
// is fp32 rounding of a dim-term dot product and a heads-term sum.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/isa.h"

namespace glint::indexer {

// codes [heads, dim] (each in −127..127) and scales [heads] of query [heads, dim]: t_h = amax_h / 127, codes =
// round_to_nearest_even(q · 127 / amax_h); a zero head has t_h = 0 and codes 0; a non-finite head t_h = NaN.
void QuantizeQuery(const float* query, int64_t heads, int64_t dim, int16_t* codes, float* scales);

// query_codes, query_scales from QuantizeQuery; keys [pools, dim] int8 codes (row stride dim), key_scales [pools].
void ScoresInt8(const int16_t* query_codes, const float* query_scales, const float* head_weights, const int8_t* keys,
                const float* key_scales, int64_t pools, int64_t heads, int64_t dim, float scale, float* scores);

// fp32 products with the heads in lanes: the query and head weights go in packed once per query (PackQueryFp32)
// as blocks of kFp32HeadBlock heads, dims outer, then the weights, zeros past the heads:
//   packed[(b · dim + c) · 32 + l] = query[(32b + l) · dim + c],  packed[blocks · dim · 32 + h] = head_weights[h]
// (Fp32QueryFloats(heads, dim) floats). Each key value is broadcast into one multiply-add per vector of heads, so
// no horizontal sum runs per (head, pool). keys [pools, dim] fp32, or bf16 bits (widened to fp32), row stride dim.
inline constexpr int64_t kFp32HeadBlock = 32;
int64_t Fp32QueryFloats(int64_t heads, int64_t dim);
void PackQueryFp32(const float* query, const float* head_weights, int64_t heads, int64_t dim, float* packed);
void ScoresFp32(const float* packed_query, const float* keys, int64_t pools, int64_t heads, int64_t dim, float scale,
                float* scores);
void ScoresBf16(const float* packed_query, const uint16_t* keys, int64_t pools, int64_t heads, int64_t dim, float scale,
                float* scores);
// fp8 (E4M3FN) keys [pools, dim] with a scale per pool, decoded a tile at a time (DecodeFp8) into the fp32 tile.
void ScoresFp8(const float* packed_query, const uint8_t* keys, const float* key_scales, int64_t pools, int64_t heads,
               int64_t dim, float scale, float* scores);
// out[i] = Fp8E4m3Table()[codes[i]] · scale, bit for bit (vectorised; every code tested).
void DecodeFp8(const uint8_t* codes, int64_t n, float scale, float* out);

// int8 keys with AVX-512 VNNI (indexer_ops_vnni.cc: 16 keys × 16 heads per tile, each key's codes broadcast
// into vpdpbusd, no gathers), bit-exact with ScoresInt8Reference. Only where Int8VnniSupported(dim): the CPU has
// AVX-512 VNNI (isa.h kAvx512) and dim is a multiple of 4 and at most kVnniMaxDim (a partial tile of keys is
// copied into a stack buffer of 16 rows); ScoresInt8 (AVX2 / AVX-512 without VNNI / scalar,
// Highway-dispatched) otherwise. The query goes in packed as the tiles' operand (PackQueryForVnni, once per query):
// packed[((b · dim/4 + w) · 16 + l) · 4 + i] = codes[(16b + l) · dim + 4w + i] + 128, 128 past the heads
// (VnniQueryBytes(heads, dim) bytes).
inline constexpr int64_t kVnniMaxDim = 1024;
bool Int8VnniSupported(int64_t dim);
int64_t VnniQueryBytes(int64_t heads, int64_t dim);
void PackQueryForVnni(const int16_t* codes, int64_t heads, int64_t dim, uint8_t* packed);
void ScoresInt8Vnni(const uint8_t* packed_query, const float* query_scales, const float* head_weights,
                    const int8_t* keys, const float* key_scales, int64_t pools, int64_t heads, int64_t dim, float scale,
                    float* scores);

// int8 keys on AMX tiles (indexer_ops_amx.cc: 16 pools × 16 heads × 64 dims per tile product), bit-exact with
// ScoresInt8Reference. Only where Int8AmxSupported(dim): the CPU and the OS allow AMX (isa.h kAmx), dim is a
// multiple of 4 and at most kAmxMaxDim (a partial tile is copied into a stack buffer of 16 rows). The keys come
// as spans (a cache block's pooled keys each), scored as one sequence into scores[Σ span pools]; one call
// configures the tiles once. The query goes in packed as the tiles' B operand (PackQueryForAmx, once per query):
// packed[((g · chunks + c) · 16 + r) · 64 + n · 4 + j] = codes[(16g + n) · dim + 64c + 4r + j], zeros past the
// heads and dims (chunks = ceil(dim / 64), AmxQueryBytes(heads, dim) bytes).
struct Int8KeySpan {
  const int8_t* keys;   // [pools, dim] codes, row stride dim
  const float* scales;  // [pools]
  int64_t pools;
};
inline constexpr int64_t kAmxMaxDim = 1024;
bool Int8AmxSupported(int64_t dim);
int64_t AmxQueryBytes(int64_t heads, int64_t dim);
void PackQueryForAmx(const int16_t* codes, int64_t heads, int64_t dim, int8_t* packed);
// `tiles`: kEmulated runs the same walk on the software tiles (amx_emulator.h) for tests on CPUs without AMX.
void ScoresInt8Amx(const int8_t* packed_query, const float* query_scales, const float* head_weights,
                   std::span<const Int8KeySpan> spans, int64_t heads, int64_t dim, float scale, float* scores,
                   AmxTiles tiles = AmxTiles::kHardware);

// The first i < count with values[i] ≥ floor (a NaN never is), else count: the top-pool collector's skip over
// scores below its floor (model/indexer.h TopKeyCollector), Highway-dispatched.
int64_t FirstAtLeast(const float* values, int64_t count, float floor);

// The specifications (scalar, plain loops).
void ScoresInt8Reference(const int16_t* query_codes, const float* query_scales, const float* head_weights,
                         const int8_t* keys, const float* key_scales, int64_t pools, int64_t heads, int64_t dim,
                         float scale, float* scores);
int64_t FirstAtLeastReference(const float* values, int64_t count, float floor);
void ScoresBf16Reference(const float* query, const float* head_weights, const uint16_t* keys, int64_t pools,
                         int64_t heads, int64_t dim, float scale, float* scores);

}  // namespace glint::indexer
