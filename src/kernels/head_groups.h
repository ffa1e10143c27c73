// Head vectors in groups of a compile-time size, for the attention kernels that keep the heads in the vector lanes
// (mla_ops.cc in fp32, mla_ops_bf16.cc in bf16): a tile's shape must be a constant for its accumulators to stay in
// registers, so the loop over a call's head vectors dispatches each group to a template instance.
#pragma once

#include <algorithm>
#include <cstdint>

namespace glint::mla {

// Calls group.template operator()<V>(v0) for the head vectors [0, vectors) in groups of V ≤ kMax ≤ 4 from v0 (all of
// kMax, then the rest).
template <int kMax, typename Group>
inline void ForEachHeadGroup(int64_t vectors, const Group& group) {
  static_assert(kMax >= 1 && kMax <= 4, "tiles of 1 to 4 head vectors");
  for (int64_t v0 = 0; v0 < vectors; v0 += kMax) {
    const int64_t v = std::min<int64_t>(kMax, vectors - v0);
    if (v == 1) {
      group.template operator()<1>(v0);
    } else if constexpr (kMax >= 2) {
      if (v == 2) {
        group.template operator()<2>(v0);
      } else if constexpr (kMax >= 3) {
        if (v == 3) {
          group.template operator()<3>(v0);
        } else if constexpr (kMax == 4) {
          group.template operator()<4>(v0);
        }
      }
    }
  }
}

}  // namespace glint::mla
