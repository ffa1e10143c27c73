#include "kernels/isa.h"

#if defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace glint {
namespace {

constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx};

// Linux keeps AMX tile data (8 KiB of state per thread) off until a process asks for it: arch_prctl
// ARCH_REQ_XCOMP_PERM with XFEATURE_XTILEDATA grants it to every thread of the process, present and future
// (Documentation/arch/x86/xstate.rst); without it the first tile instruction raises SIGILL. Asked once, on the
// first query, and the answer kept.
std::string_view RequestAmx() {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-int8")) {
    return "the CPU has no AMX-TILE/AMX-INT8 (CPUID)";
  }
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vnni")) {
    return "the CPU has AMX but not the AVX-512 VNNI the AMX level's other kernels use";
  }
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    return "the kernel refused AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM failed; Linux >= 5.16 needed)";
  }
  return "";
#else
  return "not an x86-64 CPU";
#endif
}

}  // namespace

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAmx:
      return "amx";
  }
  return "unknown";
}

Result<Isa> ParseIsa(std::string_view name) {
  for (Isa isa : kAllIsas) {
    if (name == IsaName(isa)) {
      if (isa == Isa::kAmx && !IsaSupported(isa)) {
        return InvalidArgument("this machine cannot run the 'amx' kernels: ", AmxUnavailableReason());
      }
      if (!IsaSupported(isa)) return InvalidArgument("this CPU does not support the '", name, "' kernels");
      return isa;
    }
  }
  return InvalidArgument("unknown instruction set '", name, "'; expected ", kIsaNames);
}

std::string_view AmxUnavailableReason() {
  static const std::string_view reason = RequestAmx();
  return reason;
}

bool IsaSupported(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
    case Isa::kAmx:
      return IsaSupported(Isa::kAvx512) && AmxUnavailableReason().empty();
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

// kAmx where the CPU and the OS allow it: bit-identical to avx512, and on a quiet 2-core Xeon prefill of 512 tokens
// ran 1.21× faster (192 vs 158 tokens/s on the bench model; decode, below kAmxMinTokens rows, runs avx512 either
// way). The earlier ~0.8× came from a machine loaded by other work (docs/fast-path.md "AMX").
Isa BestIsa() {
  if (IsaSupported(Isa::kAmx)) return Isa::kAmx;
  if (IsaSupported(Isa::kAvx512)) return Isa::kAvx512;
  if (IsaSupported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> isas;
  for (Isa isa : kAllIsas) {
    if (IsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

bool CpuHasAvx512Bf16() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

}  // namespace glint
