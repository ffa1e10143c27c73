// Names of the prefill profile's parts, and the decode step's bound by part (pass_profile.h).
#include "fast/pass_profile.h"

#include <algorithm>

namespace glint {

const char* PassPartName(PassPart part) {
  switch (part) {
    case PassPart::kRest:
      return "rest";
    case PassPart::kInt8Products:
      return "int8 products";
    case PassPart::kBf16Products:
      return "bf16 products";
    case PassPart::kActivationQuant:
      return "activation quantization";
    case PassPart::kKdaChunks:
      return "KDA delta rule";
    case PassPart::kKdaElementwise:
      return "KDA conv, norms, gates";
    case PassPart::kMlaAttention:
      return "MLA attention";
    case PassPart::kIndexer:
      return "DSA indexer";
    case PassPart::kMhc:
      return "mHC";
    case PassPart::kMoeRouting:
      return "MoE routing, gather, combine";
    case PassPart::kSwiGlu:
      return "dense SwiGLU";
    case PassPart::kCount:
      break;
  }
  return "?";
}

DecodeStepBound BoundDecodeStep(const ProductTime& dense, const ProductTime& experts, double bytes_per_step,
                                double bandwidth, double peak) {
  const auto bound = [&](const ProductTime& products) {
    return ProductBound{static_cast<double>(products.weight_bytes) / bandwidth,
                        2.0 * static_cast<double>(products.macs) / peak};
  };
  const double product_bytes = static_cast<double>(dense.weight_bytes + experts.weight_bytes);
  return {bound(dense), bound(experts), std::max(0.0, bytes_per_step - product_bytes) / bandwidth};
}

}  // namespace glint
