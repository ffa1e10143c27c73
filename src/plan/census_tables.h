// The census (io/census.h) as tables: parameters and bytes per group and per dtype, and active parameters per
// token. Shared by `glint inspect` and section 1 of `glint plan`, so the two print the same figures.
#pragma once

#include <vector>

#include "base/table.h"
#include "io/census.h"
#include "io/config.h"

namespace glint::plan {

// id "parameters": one row per tensor group (+ "unknown" when any) and a total; bytes split by dtype.
Table GroupTable(const Census& census);
// id "dtypes": tensors, elements and bytes per dtype, with the FP8 block scales apart.
Table DTypeTable(const Census& census);
// id "active": total and active parameters per token with and without MTP, vision and the embedding lookup.
Table ActiveTable(const Census& census, const ModelConfig& config);
// id "problems": unknown, missing and mis-shaped tensors of a checkpoint census (empty table when none).
Table ProblemTable(const Census& census);

}  // namespace glint::plan
