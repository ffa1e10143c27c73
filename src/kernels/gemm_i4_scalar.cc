// The scalar int4 kernels: the shared scalar specification (gemm_tile_scalar.h) over Int4MatrixView::Code, which
// reads the nibbles one by one.
#include "kernels/gemm_i4.h"
#include "kernels/gemm_tile_scalar.h"

namespace glint::internal {

const Int4Kernels& Int4KernelsScalar() {
  static const Int4Kernels kernels{scalar_tiles::Gemm<Int4MatrixView>, scalar_tiles::GroupSums<Int4MatrixView>};
  return kernels;
}

}  // namespace glint::internal
