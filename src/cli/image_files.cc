#include "cli/image_files.h"

#include "base/file.h"
#include "media/preprocess.h"

namespace glint::cli {

Result<std::vector<std::shared_ptr<const VisionInput>>> LoadImageFiles(const std::vector<std::string>& paths,
                                                                       const std::string& dir,
                                                                       const media::DecodeLimits& limits) {
  std::vector<std::shared_ptr<const VisionInput>> images;
  if (paths.empty()) return images;
  std::string origin;
  GLINT_ASSIGN_OR_RETURN(const media::ProcessorConfig processor, media::LoadProcessorConfig(dir, &origin));
  for (const std::string& path : paths) {
    GLINT_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(path, limits.max_bytes));
    auto decoded = media::DecodeImage({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, limits);
    if (!decoded.ok()) return decoded.status().WithContext(StrCat("image ", path));
    auto processed = media::PreprocessImage(decoded.value(), processor);
    if (!processed.ok()) return processed.status().WithContext(StrCat("image ", path));
    auto input = std::make_shared<VisionInput>();
    input->grid_t = processed->grid_t;
    input->grid_h = processed->grid_h;
    input->grid_w = processed->grid_w;
    input->patches = std::move(processed->patches);
    images.push_back(std::move(input));
  }
  return images;
}

Result<std::vector<float>> EncodeImages(ImageEncoder& tower,
                                        const std::vector<std::shared_ptr<const VisionInput>>& images) {
  std::vector<float> rows;
  for (size_t k = 0; k < images.size(); ++k) {
    auto encoded = tower.Encode(*images[k]);
    if (!encoded.ok()) return encoded.status().WithContext(StrCat("image ", k));
    rows.insert(rows.end(), encoded->begin(), encoded->end());
  }
  return rows;
}

}  // namespace glint::cli
