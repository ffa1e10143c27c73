// Compiled by the test layering.reference_cannot_see_fast_path as part of the model layer: the reference path is
// the oracle the fast path is tested against, so it may not know the fast path (docs/design.md §2); this include
// must not resolve.
#include "fast/fast_model.h"

int GlintLayeringForbiddenFastProbe() { return 0; }
