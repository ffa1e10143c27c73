// The AMX int8 peak loop (machine_limits.h): 4 independent `tdpbsud` into tmm0..tmm3 from operand tiles
// tmm4..tmm7 that never change, so the loop runs at the tile unit's throughput with no memory traffic: each
// instruction is 16 × 16 × 64 = 16,384 multiply-adds (Sapphire Rapids issues one every 16 cycles: 1,024 per cycle).
#include "kernels/amx_tiles.h"
#include "kernels/machine_limits.h"

namespace glint::internal {

GLINT_TARGET_AMX int64_t AmxLoop(int64_t iterations) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.Set(t, 16, 64);
  LoadTileConfig(config);
  alignas(64) int8_t operand[16 * 64];
  for (int i = 0; i < 16 * 64; ++i) operand[i] = static_cast<int8_t>(i % 7 - 3);
  const int64_t stride = 64;
  asm volatile(
      "tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3\n\t"
      "tileloadd (%0,%1,1), %%tmm4\n\ttileloadd (%0,%1,1), %%tmm5\n\t"
      "tileloadd (%0,%1,1), %%tmm6\n\ttileloadd (%0,%1,1), %%tmm7"
      :
      : "r"(operand), "r"(stride)
      : "memory");
  for (int64_t it = 0; it < iterations; ++it) {
    asm volatile(
        "tdpbsud %%tmm6, %%tmm4, %%tmm0\n\ttdpbsud %%tmm7, %%tmm4, %%tmm1\n\t"
        "tdpbsud %%tmm6, %%tmm5, %%tmm2\n\ttdpbsud %%tmm7, %%tmm5, %%tmm3" ::);
  }
  alignas(64) int32_t result[16 * 16];
  asm volatile("tilestored %%tmm0, (%0,%1,1)" : : "r"(result), "r"(stride) : "memory");
  ReleaseTiles();
  uint32_t sum = 0;  // wraps by design: the value only has to depend on the work
  for (int32_t v : result) sum += static_cast<uint32_t>(v);
  return static_cast<int64_t>(sum);
}

}  // namespace glint::internal
