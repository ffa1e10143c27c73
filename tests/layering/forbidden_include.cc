// Compiled by the test layering.forbidden_include_fails as part of the kernels layer: kernels may not know model
// (docs/design.md §2), so this include must not resolve.
#include "model/model.h"

int GlintLayeringForbiddenProbe() { return 0; }
