#include "kernels/amx_emulator.h"

#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "base/status.h"
#include "kernels/isa.h"

namespace glint {

// Here rather than in isa.cc: clang-tidy 14 cannot parse isa.cc's AMX feature checks.
std::string_view AmxTilesUnavailableReason(AmxTiles tiles) {
  if (tiles == AmxTiles::kHardware) return AmxUnavailableReason();
  return IsaSupported(Isa::kAvx512) ? std::string_view()
                                    : std::string_view("the emulated tiles' epilogues need AVX-512 (F/BW/DQ/VL, VNNI)");
}

bool CpuHasAmxBf16() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (edx >> 22 & 1) != 0;  // CPUID.(7,0):EDX[22]
#else
  return false;
#endif
}

std::string_view AmxBf16UnavailableReason(AmxTiles tiles) {
  if (!CpuHasAvx512Bf16() || !IsaSupported(Isa::kAvx512)) {
    return "the bf16 tile kernels convert with AVX512-BF16 (vcvtne2ps2bf16), which this CPU lacks";
  }
  if (tiles == AmxTiles::kEmulated) return {};
  if (const std::string_view why = AmxUnavailableReason(); !why.empty()) return why;
  return CpuHasAmxBf16() ? std::string_view() : std::string_view("the CPU has AMX-INT8 but not AMX-BF16 (CPUID)");
}

namespace internal::amx_emulator {
namespace {

constexpr int kTiles = 8, kMaxRows = 16, kMaxRowBytes = 64;

struct State {
  bool configured = false;
  int rows[kTiles] = {};
  int row_bytes[kTiles] = {};
  alignas(64) uint8_t data[kTiles][kMaxRows][kMaxRowBytes] = {};
};

State& ThisThread() {
  thread_local State state;
  return state;
}

// A tile byte read as a signed (two's complement) byte.
int32_t SignedByte(uint8_t byte) { return byte < 128 ? int32_t{byte} : int32_t{byte} - 256; }

// The tile a tile instruction names: configured, and in use (the hardware raises #UD otherwise).
State& Checked(const char* instruction, int tile) {
  State& s = ThisThread();
  GLINT_CHECK(s.configured) << instruction << " without a tile configuration (ldtilecfg): #UD on hardware";
  GLINT_CHECK(tile >= 0 && tile < kTiles) << instruction << ": no tile tmm" << tile;
  GLINT_CHECK(s.rows[tile] > 0) << instruction << " on tmm" << tile << ", which the configuration leaves unused";
  return s;
}

// The three tiles of a product (C += A·B): configured, distinct, and of shapes that agree (#UD otherwise).
State& CheckedProduct(const char* instruction, int c, int a, int b) {
  State& s = Checked(instruction, c);
  Checked(instruction, a);
  Checked(instruction, b);
  GLINT_CHECK(c != a && c != b && a != b)
      << instruction << ": tmm" << c << ", tmm" << a << ", tmm" << b << " must be three different tiles (#UD)";
  GLINT_CHECK(s.rows[a] == s.rows[c] && s.row_bytes[a] == 4 * s.rows[b] && s.row_bytes[b] == s.row_bytes[c] &&
              s.row_bytes[c] % 4 == 0)
      << instruction << ": C " << s.rows[c] << "×" << s.row_bytes[c] << " bytes, A " << s.rows[a] << "×"
      << s.row_bytes[a] << ", B " << s.rows[b] << "×" << s.row_bytes[b]
      << "; expected rows(A) = rows(C), colsb(A) = 4·rows(B), colsb(B) = colsb(C) (#UD)";
  return s;
}

}  // namespace

void Configure(const TileConfig& config) {
  GLINT_CHECK(config.palette == 1) << "ldtilecfg: palette " << int{config.palette} << ", the model knows palette 1";
  GLINT_CHECK(config.start_row == 0) << "ldtilecfg: start_row " << int{config.start_row}
                                     << " (a restart) is not modelled";
  for (uint8_t reserved : config.reserved) GLINT_CHECK(reserved == 0) << "ldtilecfg: reserved bytes must be 0 (#GP)";
  State& s = ThisThread();
  for (int t = 0; t < 16; ++t) {
    const int rows = config.rows[t], bytes = config.bytes_per_row[t];
    if (t >= kTiles) {
      GLINT_CHECK(rows == 0 && bytes == 0) << "ldtilecfg: tmm" << t << " does not exist in palette 1 (#GP)";
      continue;
    }
    GLINT_CHECK(rows <= kMaxRows && bytes <= kMaxRowBytes)
        << "ldtilecfg: tmm" << t << " of " << rows << " rows × " << bytes << " bytes; at most 16 × 64 (#GP)";
    GLINT_CHECK((rows == 0) == (bytes == 0))
        << "ldtilecfg: tmm" << t << " has " << rows << " rows of " << bytes << " bytes; an unused tile has neither";
    s.rows[t] = rows, s.row_bytes[t] = bytes;
  }
  s.configured = true;
  std::memset(s.data, 0, sizeof(s.data));
}

void Load(int tile, const void* base, int64_t stride) {
  State& s = Checked("tileloadd", tile);
  std::memset(s.data[tile], 0, sizeof(s.data[tile]));
  for (int r = 0; r < s.rows[tile]; ++r) {
    std::memcpy(s.data[tile][r], static_cast<const uint8_t*>(base) + r * stride,
                static_cast<size_t>(s.row_bytes[tile]));
  }
}

void Store(int tile, void* base, int64_t stride) {
  State& s = Checked("tilestored", tile);
  for (int r = 0; r < s.rows[tile]; ++r) {
    std::memcpy(static_cast<uint8_t*>(base) + r * stride, s.data[tile][r], static_cast<size_t>(s.row_bytes[tile]));
  }
}

void Zero(int tile) {
  State& s = Checked("tilezero", tile);
  std::memset(s.data[tile], 0, sizeof(s.data[tile]));
}

void Dot(int c, int a, int b, bool b_signed) {
  const char* instruction = b_signed ? "tdpbssd" : "tdpbsud";
  State& s = CheckedProduct(instruction, c, a, b);
  for (int m = 0; m < s.rows[c]; ++m) {
    uint8_t* out = s.data[c][m];
    for (int n = 0; n < s.row_bytes[c] / 4; ++n) {
      uint32_t sum;  // int32 arithmetic with wraparound, as the tile unit's
      std::memcpy(&sum, out + 4 * n, 4);
      for (int k = 0; k < s.row_bytes[a] / 4; ++k) {
        for (int i = 0; i < 4; ++i) {
          const int32_t x = SignedByte(s.data[a][m][4 * k + i]);
          const uint8_t b_byte = s.data[b][k][4 * n + i];
          const int32_t w = b_signed ? SignedByte(b_byte) : int32_t{b_byte};
          sum += static_cast<uint32_t>(x * w);
        }
      }
      std::memcpy(out + 4 * n, &sum, 4);
    }
  }
}

namespace {

// A bf16 value as the tile unit reads it: widened to fp32, a denormal read as zero (sign kept).
float Bf16Operand(const uint8_t* bytes) {
  const uint32_t bits = uint32_t{bytes[0]} << 16 | uint32_t{bytes[1]} << 24;
  if ((bits & 0x7f800000u) == 0) return (bits >> 31) != 0 ? -0.0f : 0.0f;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// A result as the tile unit writes it: a denormal flushed to zero (sign kept).
float FlushDenormal(float value) { return std::fpclassify(value) == FP_SUBNORMAL ? std::copysign(0.0f, value) : value; }

}  // namespace

void DotBf16(int c, int a, int b) {
  const char* instruction = "tdpbf16ps";
  State& s = CheckedProduct(instruction, c, a, b);
  for (int m = 0; m < s.rows[c]; ++m) {
    uint8_t* out = s.data[c][m];
    for (int n = 0; n < s.row_bytes[c] / 4; ++n) {
      float sum;
      std::memcpy(&sum, out + 4 * n, 4);
      for (int k = 0; k < s.row_bytes[a] / 4; ++k) {
        for (int i : {1, 0}) {  // the odd element of the pair first
          // The product of two bf16 values is exact in fp32, so fma rounds once, as the accumulation does.
          const float x = Bf16Operand(&s.data[a][m][4 * k + 2 * i]), w = Bf16Operand(&s.data[b][k][4 * n + 2 * i]);
          sum = FlushDenormal(std::fma(x, w, sum));
        }
      }
      std::memcpy(out + 4 * n, &sum, 4);
    }
  }
}

void Release() {
  State& s = ThisThread();
  s = State{};
}

bool Configured() { return ThisThread().configured; }

}  // namespace internal::amx_emulator
}  // namespace glint
