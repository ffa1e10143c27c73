// dst[c · dst_stride + r] = src[r · src_stride + c]: a float matrix transposed, for the Highway kernels that need a
// second layout of a small operand (the KDA chunk's Gram keys, MLA attention's q̃ and outputs). On AVX-512 in 16 × 16
// blocks of registers (Transpose16x16: 64 shuffles for 256 values, where one value at a time stores them one by one),
// the edges one value at a time. Highway's per-target header: include it after hwy/highway.h from a file compiled
// once per target (foreach_target.h) and call glint::HWY_NAMESPACE::TransposeFloats.
#if defined(GLINT_KERNELS_TRANSPOSE_FLOATS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GLINT_KERNELS_TRANSPOSE_FLOATS_INL_H_
#undef GLINT_KERNELS_TRANSPOSE_FLOATS_INL_H_
#else
#define GLINT_KERNELS_TRANSPOSE_FLOATS_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "hwy/highway.h"
#include "kernels/transpose_avx512.h"

HWY_BEFORE_NAMESPACE();
namespace glint::HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// One 16 × 16 block, in registers.
HWY_INLINE void TransposeBlock16(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_castps_si512(_mm512_loadu_ps(src + i * src_stride));
  internal::Transpose16x16(r);
  for (int c = 0; c < 16; ++c) _mm512_storeu_ps(dst + c * dst_stride, _mm512_castsi512_ps(r[c]));
}
#endif

// dst[c, r] = src[r, c] for r < rows, c < cols.
HWY_INLINE void TransposeFloats(const float* src, int64_t src_stride, int64_t rows, int64_t cols, float* dst,
                                int64_t dst_stride) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
      if (r0 + 16 <= rows && c0 + 16 <= cols) {
        TransposeBlock16(src + r0 * src_stride + c0, src_stride, dst + c0 * dst_stride + r0, dst_stride);
        continue;
      }
#endif
      for (int64_t c = c0; c < std::min(cols, c0 + 16); ++c) {
        for (int64_t r = r0; r < std::min(rows, r0 + 16); ++r) dst[c * dst_stride + r] = src[r * src_stride + c];
      }
    }
  }
}

}  // namespace glint::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // GLINT_KERNELS_TRANSPOSE_FLOATS_INL_H_
