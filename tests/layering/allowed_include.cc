// Compiled by the test layering.allowed_include_compiles as part of the kernels layer: kernels may know quant.
#include "quant/int8_matrix.h"

int GlintLayeringAllowedProbe() { return 0; }
