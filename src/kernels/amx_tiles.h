// AMX tile configuration shared by the AMX int8 kernels (gemm_i8_amx.cc) and the AMX peak probe
// (machine_limits_amx.cc). Include it only from translation units whose functions carry GLINT_TARGET_AMX.
//
// A tile register tmm0..tmm7 holds up to 16 rows of up to 64 bytes; `ldtilecfg` reads a 64-byte configuration
// (palette 1: bytes per row and rows per tile) before any tile instruction. The OS must have granted tile data
// to the process first (isa.cc: IsSupported(Isa::kAmx) asks for it).
//
// The gcc 12 trap: its _tile_loadconfig declares only 8 bytes of its 64-byte operand as read, so the compiler may
// treat the stores that fill the rest of the configuration as dead and drop them (at -O2/-O3); the tiles then keep
// 0 rows and the first tile instruction raises SIGILL. LoadTileConfig issues `ldtilecfg` from an asm whose "m"
// operand is the whole 64-byte struct, so every byte is visibly read.
#pragma once

#include <cstdint>

#define GLINT_TARGET_AMX __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,amx-tile,amx-int8")))

namespace glint::internal {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};  // colsb of tmm0..tmm7 (8..15 reserved, 0)
  uint8_t rows[16] = {};            // rows of tmm0..tmm7 (8..15 reserved, 0)

  void Set(int tile, int tile_rows, int row_bytes) {
    rows[tile] = static_cast<uint8_t>(tile_rows);
    bytes_per_row[tile] = static_cast<uint16_t>(row_bytes);
  }
};
static_assert(sizeof(TileConfig) == 64);

GLINT_TARGET_AMX inline void LoadTileConfig(const TileConfig& config) {
  asm volatile("ldtilecfg %0" : : "m"(config) : "memory");
}

// Returns the tiles to their initial state (no configuration): the OS then need not save 8 KiB of tile data
// at a context switch, and the core may leave the AMX power state.
GLINT_TARGET_AMX inline void ReleaseTiles() { asm volatile("tilerelease" ::: "memory"); }

// The tile instructions as a policy, so that one kernel source runs on the tile unit (HardwareTiles) or on the
// software model of it (EmulatedTiles, amx_emulator.h) that tests the kernels' walks — tile shapes, addressing,
// the order of loads, products, stores and epilogues — on CPUs without AMX. Tile numbers are template arguments:
// the instructions take them as immediates. A kernel's functions carry GLINT_TARGET_AMX in both instantiations;
// the emulated one still runs on a CPU without AMX, since compilers emit tile instructions only where asked (here,
// in HardwareTiles' asm), so it needs only the AVX-512 level its epilogue uses.
//
// Through asm with "memory" clobbers: gcc 12's tile intrinsics are asm statements that name no memory, so the
// compiler could move the epilogue's reads of the stored C buffer before the `tilestored`.
struct HardwareTiles {
  GLINT_TARGET_AMX static void Configure(const TileConfig& config) { LoadTileConfig(config); }
  template <int T>
  GLINT_TARGET_AMX static void Load(const void* base, int64_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" : : "r"(base), "r"(stride), "n"(T) : "memory");
  }
  template <int T>
  GLINT_TARGET_AMX static void Store(void* base, int64_t stride) {
    asm volatile("tilestored %%tmm%c2, (%0,%1,1)" : : "r"(base), "r"(stride), "n"(T) : "memory");
  }
  template <int T>
  GLINT_TARGET_AMX static void Zero() {
    asm volatile("tilezero %%tmm%c0" : : "n"(T));
  }
  // C += A · B with A signed and B unsigned bytes (tdpbsud), or both signed (tdpbssd); int32 sums.
  template <int C, int A, int B>
  GLINT_TARGET_AMX static void DotSignedUnsigned() {
    asm volatile("tdpbsud %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "n"(C), "n"(A), "n"(B));
  }
  template <int C, int A, int B>
  GLINT_TARGET_AMX static void DotSigned() {
    asm volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "n"(C), "n"(A), "n"(B));
  }
  // C += A · B with A and B bf16 pairs and C fp32 (tdpbf16ps, AMX-BF16: check AmxBf16UnavailableReason first).
  template <int C, int A, int B>
  GLINT_TARGET_AMX static void DotBf16() {
    asm volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "n"(C), "n"(A), "n"(B));
  }
  GLINT_TARGET_AMX static void Release() { ReleaseTiles(); }
};

}  // namespace glint::internal
