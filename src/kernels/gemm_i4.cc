#include "kernels/gemm_i4.h"

namespace glint {

const Int4Kernels& GetInt4Kernels(Isa isa) {
  GLINT_CHECK(IsaSupported(isa)) << "int4 kernels for " << IsaName(isa) << " requested on a CPU without it";
  switch (isa) {
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
