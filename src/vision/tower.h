// The GLM-5.3-Flash vision tower (docs/vision.md): the processor's patches in, image-token embeddings out.
//
//   patches [N, C·T·P·P] ─ patch_embed (Conv3d ≡ linear) ─► x [N, hidden]
//   depth × { x += proj(attn(rope2d(qk_norm(qkv(rms(x)))))) ; x += down(swiglu_clamped(gate, up)(rms(x))) }
//   post_layernorm (RMS) ─ downsample (Conv2d m×m, stride m ≡ linear over a merge block) ─► [N/m², out_hidden]
//   merger: proj ─ LayerNorm ─ GELU ─ clamped SwiGLU (projection_intermediate_size) ─► [N/m², out_hidden]
//
// Attention is bidirectional within one frame (grid_h·grid_w patches) and never across frames or images; there
// are no learned position embeddings, only the 2D rotary (positions from the patch's row and column).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "io/config.h"

namespace glint {

// One image (grid_t = 1) or clip, as the HF image processor hands it to the model (`pixel_values` and one row of
// `image_grid_thw`). Plain data; media/ (visioninput) produces it.
//
// grid_t, grid_h, grid_w: the patch grid before the spatial merge (grid_t = frames / temporal_patch_size; an
// image is one frame repeated temporal_patch_size times, so grid_t = 1). grid_h and grid_w are multiples of
// spatial_merge_size m.
//
// patches: row-major [grid_t · grid_h · grid_w, C · T · P · P] (C = in_channels 3, T = temporal_patch_size 2,
// P = patch_size 14: 1176 values a row), already rescaled and normalised (CLIP mean/std).
//   Row order (merge-block order): frame-major; inside a frame, merge blocks in raster order over the
//   (grid_h/m) × (grid_w/m) block grid, and inside a block the m×m patches in raster order. Row
//     r = ((t · (grid_h/m) + bh) · (grid_w/m) + bw) · m² + ih · m + iw
//   holds the patch at patch-row bh·m + ih, patch-column bw·m + iw of frame t.
//   Column order inside a row (the Conv3d weight's order [hidden, C, T, P, P] flattened): channel-major, then
//   the temporal index, then the pixel row, then the pixel column:
//     c_idx = ((c · T + dt) · P + py) · P + px
//   for pixel (y = (bh·m + ih)·P + py, x = (bw·m + iw)·P + px) of channel c in input frame t·T + dt.
struct VisionInput {
  int grid_t = 0, grid_h = 0, grid_w = 0;
  std::vector<float> patches;  // [grid_t · grid_h · grid_w, C · T · P · P]

  int64_t NumPatches() const { return int64_t{grid_t} * grid_h * grid_w; }
};

// The most patches one input may hold (a 16384 × 16384 image at patch 14): bounds every allocation the tower
// sizes from an input.
inline constexpr int64_t kMaxVisionPatches = int64_t{1} << 20;

// Grid positive and divisible by the merge, patch count within kMaxVisionPatches, patches of the right size and
// finite. The message names what was wrong.
Status CheckVisionInput(const VisionConfig& config, const VisionInput& input);

// Image tokens the input becomes: grid_t · grid_h · grid_w / m² (the placeholder count in the prompt).
int64_t VisionTokenCount(const VisionConfig& config, const VisionInput& input);

// The patch-grid row and column of every input row (repeated for each frame), from the merge-block order above.
struct PatchPosition {
  int32_t row = 0, col = 0;
};
std::vector<PatchPosition> PatchPositions(const VisionConfig& config, const VisionInput& input);

// 2D rotary tables [N, head_dim] (HF GlmOcrVisionModel / VisionRotaryEmbedding(head_dim/2)): with half = head_dim/2
// and q = head_dim/4 frequencies inv_freq[i] = theta^(−2i/half), dimension d has the angle
//   a[d] = row · inv_freq[j]       (j = d mod half < q)
//   a[d] = col · inv_freq[j − q]   (q ≤ j < half)
// and a rotated vector is x'[d] = x[d]·cos a[d] + r[d]·sin a[d], r = (−x[half:], x[:half]) (rotate_half).
// Angles are computed in double and rounded once.
void VisionRotaryTables(const VisionConfig& config, const VisionInput& input, std::vector<float>& cos_table,
                        std::vector<float>& sin_table);

// Intermediates for the oracle comparison (tests/data/golden/tiny-vision): each [rows, width] row-major.
struct VisionTrace {
  std::vector<float> patch_embed;          // [N, hidden]
  std::vector<std::vector<float>> blocks;  // depth × [N, hidden], after each block
  std::vector<float> post_layernorm;       // [N, hidden]
  std::vector<float> downsample;           // [N/m², out_hidden]
  std::vector<float> merger;               // [N/m², out_hidden] = the output
};

}  // namespace glint
