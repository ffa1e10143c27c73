// The GLM-5.3-Flash image processor's default path, pixel for pixel (docs/vision-input.md "Preprocessing"):
// canvas rule → aspect-preserving resize (resize.h) → zero padding at the bottom and right → fused rescale and
// CLIP normalisation in float32 → patches in merge-block order.
//
// The output is the tower's input, `pixel_values` of one image as the processor produces it:
//   patches: row-major [grid_t · grid_h · grid_w, 3 · temporal_patch · patch · patch] float32.
//   Row (patch) index: ((t · (grid_h / merge) + bh) · (grid_w / merge) + bw) · merge² + mh · merge + mw
//     — merge blocks in raster order, the merge² patches of a block in raster order inside it; the patch covers
//     canvas rows (bh · merge + mh) · patch … + patch − 1 and columns (bw · merge + mw) · patch … + patch − 1.
//   Column index: ((c · temporal_patch + f) · patch + py) · patch + px — channel (R, G, B), then frame f, then the
//     pixel's row and column inside the patch. A still image is its own frame repeated temporal_patch times
//     (HF pads the time axis by repeating the last frame), so grid_t = 1.
//   Image tokens N = grid_t · grid_h · grid_w / merge².
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "media/image.h"

namespace glint::media {

struct ProcessorConfig {
  int patch_size = 14;
  int temporal_patch_size = 2;
  int merge_size = 2;
  int64_t min_image_tokens = 16;
  int64_t max_image_tokens = 8000;
  bool pad = true;  // resize_mode "pad": keep the aspect ratio, zero-pad; false: "resize" (stretch to the canvas)
  bool do_resize = true, do_rescale = true, do_normalize = true;
  double rescale_factor = 1.0 / 255;
  std::array<double, 3> image_mean = {0.48145466, 0.4578275, 0.40821073};  // OPENAI_CLIP_MEAN
  std::array<double, 3> image_std = {0.26862954, 0.26130258, 0.27577711};  // OPENAI_CLIP_STD

  int factor() const { return patch_size * merge_size; }  // 28: canvas sides are multiples of it
};

// Reads the image processor's settings from a checkpoint's processor_config.json (its "image_processor" object)
// or preprocessor_config.json (flat). Missing keys keep the defaults above; a key with a wrong type or value is an
// error naming it. Keys it does not know are ignored.
Result<ProcessorConfig> ParseProcessorConfig(std::string_view json_text);

// The checkpoint directory's processor_config.json, else its preprocessor_config.json, else the defaults above
// (the released GLM-5.3-Flash values). `origin` says which ("defaults" when neither file exists).
Result<ProcessorConfig> LoadProcessorConfig(const std::string& model_dir, std::string* origin);

struct CanvasSize {
  int height = 0, width = 0;
};
// The canvas (smart_resize of the GLM-5.3-Flash processor): sides rounded UP to multiples of patch · merge; a
// canvas over max_image_tokens is refitted by binary search on the content height (each candidate rounded up),
// one under min_image_tokens is scaled up by sqrt(min / pixels). Errors: an aspect ratio no canvas can hold.
Result<CanvasSize> SmartResize(const ProcessorConfig& config, int height, int width);
// The content size inside the canvas (pad mode): the largest aspect-preserving size that fits; images are only
// enlarged when below min_image_tokens.
CanvasSize PadContentSize(const ProcessorConfig& config, int height, int width, CanvasSize canvas);

// Resize and pad: the uint8 canvas the processor normalises.
Result<RgbImage> ResizeToCanvas(const RgbImage& image, const ProcessorConfig& config);

struct PreprocessedImage {
  int grid_t = 0, grid_h = 0, grid_w = 0;  // in patches, before the merge
  std::vector<float> patches;              // layout above
  int merge_size = 2;

  int64_t num_patches() const { return int64_t{grid_t} * grid_h * grid_w; }
  int64_t num_tokens() const { return num_patches() / (merge_size * merge_size); }
};

// Normalise and patchify a canvas whose sides are multiples of patch · merge.
PreprocessedImage Patchify(const RgbImage& canvas, const ProcessorConfig& config);

// The whole processor: ResizeToCanvas, then Patchify.
Result<PreprocessedImage> PreprocessImage(const RgbImage& image, const ProcessorConfig& config);

// The number of image tokens an image of this size becomes (the canvas rule alone, no pixels touched).
Result<int64_t> ImageTokenCount(const ProcessorConfig& config, int height, int width);

}  // namespace glint::media
