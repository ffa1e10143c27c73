#include "kernels/gemm_i4.h"

namespace glint {

const Int4Kernels& GetInt4Kernels(Isa isa) {
  GLINT_CHECK(IsaSupported(isa)) << "int4 kernels for " << IsaName(isa) << " requested on a CPU without it";
  switch (isa) {
    case Isa::kAmx:  // int4 stays on VNNI at the AMX level (docs/fast-path.md, "AMX"): tiles need unpacked bytes
    case Isa::kAvx512:
      return internal::Int4KernelsAvx512();
    case Isa::kAvx2:
      return internal::Int4KernelsAvx2();
    case Isa::kScalar:
      break;
  }
  return internal::Int4KernelsScalar();
}

}  // namespace glint
