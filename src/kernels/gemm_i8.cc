#include "kernels/gemm_i8.h"

namespace glint {

void ActivationScratch::Reserve(int64_t tokens, int64_t padded_cols, int64_t groups) {
  const size_t code_bytes = static_cast<size_t>(tokens * padded_cols);
  const size_t group_bytes = static_cast<size_t>(tokens * groups) * 4;
  // Kernels read 4 bytes of codes at a time; pad by one cache line so no read ends past the buffer.
  if (codes_.size() < code_bytes + 64) codes_ = AlignedBuffer(code_bytes + 64);
  if (scales_.size() < group_bytes) scales_ = AlignedBuffer(group_bytes);
  if (corrections_.size() < group_bytes) corrections_ = AlignedBuffer(group_bytes);
}

const Int8Kernels& GetInt8Kernels(Isa isa) {
  GLINT_CHECK(IsaSupported(isa)) << "int8 kernels for " << IsaName(isa) << " requested on a CPU without it";
  switch (isa) {
    case Isa::kAmx:
      return internal::Int8KernelsAmx();
    case Isa::kAvx512:
      return internal::Int8KernelsAvx512();
    case Isa::kAvx2:
      return internal::Int8KernelsAvx2();
    case Isa::kScalar:
      break;
  }
  return internal::Int8KernelsScalar();
}

QuantizedActivations ActivationsIn(const Int8Layout& layout, int64_t tokens, ActivationScratch& scratch) {
  return {tokens,          layout.cols,      layout.padded_cols(),     layout.group,
          scratch.codes(), scratch.scales(), scratch.bias_correction()};
}

QuantizedActivations QuantizeActivations(const Int8Kernels& kernels, const Int8Layout& layout, const float* x,
                                         int64_t x_stride, int64_t tokens, ActivationScratch& scratch) {
  const int64_t padded = layout.padded_cols(), groups = layout.groups();
  scratch.Reserve(tokens, padded, groups);
  kernels.quantize(x, x_stride, tokens, layout.cols, layout.group, padded, scratch.codes(), scratch.scales(),
                   scratch.bias_correction());
  return ActivationsIn(layout, tokens, scratch);
}

}  // namespace glint
