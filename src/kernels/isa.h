// Instruction-set levels of the fast kernels, detected at run time (one binary runs everywhere).
//
//   kScalar  plain C++: the reference every other level is tested against
//   kAvx2    AVX2 + FMA (x86-64-v3): int8 dot products through vpmaddubsw with the sign trick
//   kAvx512  AVX-512 F/BW/DQ/VL + VNNI (vpdpbusd): Ice Lake, Sapphire Rapids, Zen 4 and later
//   kAmx     kAvx512 plus AMX tiles (AMX-TILE + AMX-INT8, tdpbsud) with the OS's permission to use them
//            (Sapphire Rapids and later Xeons): the int8 products with at least kAmxMinTokens tokens run on tiles
//            (gemm_i8_amx.cc); everything else at this level is the kAvx512 code. Opt-in: BestIsa() does not
//            pick it yet (isa.cc says why)
// Kernels take the level explicitly (no process-wide switch): the model picks BestIsa() unless told otherwise,
// tests run every supported level against kScalar, benchmarks compare levels in one run.
#pragma once

#include <string_view>
#include <vector>

#include "base/status.h"

namespace glint {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

std::string_view IsaName(Isa isa);  // "scalar", "avx2", "avx512", "amx"
Result<Isa> ParseIsa(std::string_view name);
bool IsaSupported(Isa isa);
Isa BestIsa();
std::vector<Isa> SupportedIsas();  // ascending
// Whether the CPU has AVX512-BF16 (vdpbf16ps), reported by benchmarks.
bool CpuHasAvx512Bf16();
// Why kAmx is not supported here (no AMX in CPUID, or the kernel refused the tile-data permission), for
// messages and test skips; empty when it is supported.
std::string_view AmxUnavailableReason();
// Where an AMX kernel's tile instructions run, for tests and benchmarks: on the tile unit (IsaSupported(kAmx)), or
// on the software model of it (amx_emulator.h: the same walk, run on any CPU with kAvx512, whose instructions the
// kernels' epilogues use).
enum class AmxTiles { kHardware, kEmulated };
// Whether `tiles` can run here, and why not (empty when it can), for test skips (amx_emulator.cc).
std::string_view AmxTilesUnavailableReason(AmxTiles tiles);
// The same for the bf16 tile kernels (tdpbf16ps): AMX-BF16 as well on the tile unit, AVX512-BF16 either way (their
// conversions); empty when they can run (amx_emulator.cc).
bool CpuHasAmxBf16();
std::string_view AmxBf16UnavailableReason(AmxTiles tiles);
// The kernels' level names joined for --help and errors: "amx, avx512, avx2 or scalar".
inline constexpr std::string_view kIsaNames = "amx, avx512, avx2 or scalar";

}  // namespace glint
