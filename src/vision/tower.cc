#include "vision/tower.h"

#include <cmath>

namespace glint {

Status CheckVisionInput(const VisionConfig& config, const VisionInput& input) {
  if (!config.present) return FailedPrecondition("the model has no vision_config: it takes no images");
  const int64_t m = config.spatial_merge_size;
  if (input.grid_t <= 0 || input.grid_h <= 0 || input.grid_w <= 0) {
    return InvalidArgument("vision input grid ", input.grid_t, "×", input.grid_h, "×", input.grid_w,
                           " (t×h×w patches); expected positive sizes");
  }
  if (input.grid_h % m != 0 || input.grid_w % m != 0) {
    return InvalidArgument("vision input grid ", input.grid_h, "×", input.grid_w, " patches is not a multiple of the ",
                           m, "×", m, " spatial merge");
  }
  if (input.NumPatches() > kMaxVisionPatches) {
    return InvalidArgument("vision input of ", input.NumPatches(), " patches; at most ", kMaxVisionPatches,
                           " are accepted");
  }
  const int64_t expected = input.NumPatches() * config.PatchValues();
  if (static_cast<int64_t>(input.patches.size()) != expected) {
    return InvalidArgument("vision input holds ", input.patches.size(), " values; the grid ", input.grid_t, "×",
                           input.grid_h, "×", input.grid_w, " needs ", input.NumPatches(), " patches × ",
                           config.PatchValues(), " = ", expected);
  }
  for (size_t i = 0; i < input.patches.size(); ++i) {
    if (!std::isfinite(input.patches[i])) {
      return InvalidArgument("vision input value ", i, " (patch ", static_cast<int64_t>(i) / config.PatchValues(),
                             ") is not finite");
    }
  }
  return Status::Ok();
}

int64_t VisionTokenCount(const VisionConfig& config, const VisionInput& input) {
  return input.NumPatches() / config.MergeArea();
}

std::vector<PatchPosition> PatchPositions(const VisionConfig& config, const VisionInput& input) {
  const int64_t m = config.spatial_merge_size;
  const int64_t per_frame = int64_t{input.grid_h} * input.grid_w;
  const int64_t blocks_w = input.grid_w / m;
  std::vector<PatchPosition> positions(static_cast<size_t>(input.NumPatches()));
  for (int64_t p = 0; p < input.NumPatches(); ++p) {
    const int64_t within = p % per_frame;  // the same positions in every frame
    const int64_t block = within / (m * m), in_block = within % (m * m);
    const int64_t row = (block / blocks_w) * m + in_block / m;
    const int64_t col = (block % blocks_w) * m + in_block % m;
    positions[p] = {static_cast<int32_t>(row), static_cast<int32_t>(col)};
  }
  return positions;
}

void VisionRotaryTables(const VisionConfig& config, const VisionInput& input, std::vector<float>& cos_table,
                        std::vector<float>& sin_table) {
  const int64_t head_dim = config.HeadDim(), half = head_dim / 2, quarter = head_dim / 4;
  std::vector<double> inv_freq(quarter);
  for (int64_t i = 0; i < quarter; ++i) {
    inv_freq[i] = std::pow(config.rope_theta, -static_cast<double>(2 * i) / static_cast<double>(half));
  }
  const std::vector<PatchPosition> positions = PatchPositions(config, input);
  cos_table.assign(positions.size() * head_dim, 0.0f);
  sin_table.assign(positions.size() * head_dim, 0.0f);
  for (size_t p = 0; p < positions.size(); ++p) {
    for (int64_t d = 0; d < head_dim; ++d) {
      const int64_t j = d % half;
      const double angle = j < quarter ? positions[p].row * inv_freq[j] : positions[p].col * inv_freq[j - quarter];
      cos_table[p * head_dim + d] = static_cast<float>(std::cos(angle));
      sin_table[p * head_dim + d] = static_cast<float>(std::sin(angle));
    }
  }
}

}  // namespace glint
