// The resize the HF processor's default (torchvision) backend performs on CPU for this model: torch's
// antialiased bicubic interpolation of a uint8 image (`F.interpolate(mode="bicubic", antialias=True,
// align_corners=False)` on a uint8 tensor, which torchvision keeps in uint8 for bicubic on CPU). Facts, from
// aten/src/ATen/native/cpu/UpSampleKernel.cpp and UpSampleKernelAVXAntialias.h (docs/vision-input.md "Resize"):
//
//   scale    s = in / out (float64); support = 2·s when s ≥ 1 (downscaling widens the filter), else 2;
//            taps = 2·ceil(support) + 1.
//   output i: center c = s·(i + 0.5); first input xmin = max(trunc(c − support + 0.5), 0);
//            count = min(trunc(c + support + 0.5), in) − xmin (clamped to [0, taps]);
//            w_j = K((xmin + j − c + 0.5) / max(s, 1)), normalised to sum 1, with Keys' cubic K at a = −0.5.
//   fixed point: precision p = the largest value in [0, 22) for which round(max_w · 2^(p+1)) < 2^15, over all
//            outputs of that axis; k_j = w_j·2^p rounded half away from zero to int16.
//   a pass:  out = clamp((2^(p−1) + Σ_j k_j·x_j) >> p, 0, 255) (arithmetic shift), in int32.
//   order:   the width pass first, into a uint8 image, then the height pass; an axis whose size does not
//            change is not resampled.
#pragma once

#include <cstdint>
#include <vector>

#include "media/image.h"

namespace glint::media {

// The filter of one axis: for output i, inputs start[i] … start[i] + count[i] − 1 with weights
// weights[i·taps + j] (zero past count[i]).
struct AxisFilter {
  int in_size = 0, out_size = 0, taps = 0;
  std::vector<int> start, count;
  std::vector<double> weights;  // [out_size × taps], float64 as torch computes them
  int precision = 0;            // p above
  std::vector<int16_t> fixed;   // [out_size × taps], k_j
};
AxisFilter BicubicAntialiasFilter(int in_size, int out_size);

// torch's uint8 result, bit for bit. Sizes ≥ 1.
RgbImage ResizeBicubicAntialias(const RgbImage& image, int out_width, int out_height);

// The reference beside it: the same float64 weights applied in float64, width pass then height pass, each
// clamped to [0, 255] but never rounded. Values [out_height × out_width × 3]. The uint8 result differs from it by
// at most ResizeErrorBound(...) (resize_test derives and checks it).
std::vector<double> ResizeBicubicAntialiasReference(const RgbImage& image, int out_width, int out_height);

// The bound on |uint8 result − reference|: each pass adds ½ (its final rounding) plus 255·Σ_j |k_j/2^p − w_j| (the
// weights' rounding, at most the largest row's), and the height pass carries the width pass's error times
// Σ_j |w_j| (its largest row's). Clamping is 1-Lipschitz and adds nothing.
double ResizeErrorBound(const RgbImage& image, int out_width, int out_height);

}  // namespace glint::media
