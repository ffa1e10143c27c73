// Properties every Model implementation must have, checked the same way for each (the fp32 reference in
// model_test.cc, the fast path in fast_model_test.cc).
#pragma once

#include "model/model.h"

namespace glint::testing {

// Prefix-cache state checkpoints written inside one Forward call (BatchEntry::checkpoints at positions 40 and 64
// of a 70-token call, block size 8) equal, byte for byte, the state of a sequence whose calls end at those
// positions; the logits after the call do not change; an unaligned checkpoint is refused and changes nothing.
void ExpectCheckpointsInsideACallEqualTheStateAtThatPosition(const Model& model);

}  // namespace glint::testing
