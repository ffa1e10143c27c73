// A software model of the AMX tile unit (palette 1; AMX-TILE and AMX-INT8) with the interface of HardwareTiles
// (amx_tiles.h): the tile kernels are templates on that interface, so the same walks — tile shapes, addressing,
// the order of loads, products, stores and epilogues — run against their references on every CPU with AVX-512
// (their epilogues are AVX-512), not only on the Xeons that expose AMX. Where AMX exists the tests run both and
// both must match the reference bit for bit, which checks this model against the hardware too.
//
// What it models, from the instruction set reference:
//   ldtilecfg   palette 1, reserved bytes 0, each tile at most 16 rows of at most 64 bytes (0 and 0: unused);
//               every tile becomes zero.
//   tileloadd   rows(T) rows of colsb(T) bytes from base + r·stride; the bytes past colsb and the rows past
//               rows(T) become zero.
//   tilestored  rows(T) rows of colsb(T) bytes to base + r·stride.
//   tilezero    the whole tile zero.
//   tdpbsud / tdpbssd
//               C[m][n] += Σ_{k < colsb(A)/4} Σ_{i < 4} A[m][4k + i] · B[k][4n + i] for m < rows(C), n < colsb(C)/4,
//               in int32 with wraparound; A signed, B unsigned (bsud) or signed (bssd) bytes. Shapes must agree:
//               rows(A) = rows(C), colsb(A) = 4·rows(B), colsb(B) = colsb(C), colsb(C) a multiple of 4.
//   tdpbf16ps   C[m][n] (fp32) += A[m][2k + 1] · B[k][2n + 1], then += A[m][2k] · B[k][2n], for k < colsb(A)/4, in that
//               order (the reference's pseudo-code), each addition rounded to nearest even; bf16 inputs that are
//               denormal read as zero and denormal results are flushed to zero; the same shape rules.
//   tilerelease back to no configuration.
// Where the hardware would fault (#UD: no configuration, an unused tile, shapes that disagree; #GP: a bad
// configuration), the model fails a GLINT_CHECK naming the instruction. Not modelled: timing, palettes other than
// 1, the restart row after a page fault, the fp16 products. State is per thread, as the hardware's is
// per logical core.
#pragma once

#include <cstdint>

#include "kernels/amx_tiles.h"

namespace glint::internal {

namespace amx_emulator {
void Configure(const TileConfig& config);
void Load(int tile, const void* base, int64_t stride);
void Store(int tile, void* base, int64_t stride);
void Zero(int tile);
void Dot(int c, int a, int b, bool b_signed);
void DotBf16(int c, int a, int b);
void Release();
bool Configured();  // for tests: whether this thread holds a configuration
}  // namespace amx_emulator

struct EmulatedTiles {
  static void Configure(const TileConfig& config) { amx_emulator::Configure(config); }
  template <int T>
  static void Load(const void* base, int64_t stride) {
    amx_emulator::Load(T, base, stride);
  }
  template <int T>
  static void Store(void* base, int64_t stride) {
    amx_emulator::Store(T, base, stride);
  }
  template <int T>
  static void Zero() {
    amx_emulator::Zero(T);
  }
  template <int C, int A, int B>
  static void DotSignedUnsigned() {
    amx_emulator::Dot(C, A, B, false);
  }
  template <int C, int A, int B>
  static void DotSigned() {
    amx_emulator::Dot(C, A, B, true);
  }
  template <int C, int A, int B>
  static void DotBf16() {
    amx_emulator::DotBf16(C, A, B);
  }
  static void Release() { amx_emulator::Release(); }
};

}  // namespace glint::internal
