// Names of the prefill profile's parts (pass_profile.h).
#include "fast/pass_profile.h"

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

}  // namespace glint
