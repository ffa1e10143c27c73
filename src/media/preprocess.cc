#include "media/preprocess.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/json_depth.h"
#include "media/resize.h"

namespace glint::media {
namespace {

using Json = nlohmann::json;

int64_t CeilToFactor(int64_t value, int64_t factor) { return (value + factor - 1) / factor * factor; }

Status ReadInt(const Json& object, const char* key, int64_t low, int64_t high, int64_t& out) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return Status::Ok();
  if (!it->is_number_integer() || it->get<int64_t>() < low || it->get<int64_t>() > high) {
    return InvalidArgument("processor config: '", key, "' must be an integer in [", low, ", ", high, "], got ",
                           it->dump());
  }
  out = it->get<int64_t>();
  return Status::Ok();
}

Status ReadBool(const Json& object, const char* key, bool& out) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) return InvalidArgument("processor config: '", key, "' must be a boolean, got ", it->dump());
  out = it->get<bool>();
  return Status::Ok();
}

Status ReadTriple(const Json& object, const char* key, bool positive, std::array<double, 3>& out) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return Status::Ok();
  if (!it->is_array() || it->size() != 3) {
    return InvalidArgument("processor config: '", key, "' must be a list of 3 numbers, got ", it->dump());
  }
  for (int c = 0; c < 3; ++c) {
    const Json& v = (*it)[c];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || (positive && v.get<double>() <= 0)) {
      return InvalidArgument("processor config: '", key, "' must hold 3 finite", positive ? " positive" : "",
                             " numbers, got ", it->dump());
    }
    out[c] = v.get<double>();
  }
  return Status::Ok();
}

Status ReadImageProcessor(const Json& p, ProcessorConfig& config) {
  int64_t patch = config.patch_size, temporal = config.temporal_patch_size, merge = config.merge_size;
  GLINT_RETURN_IF_ERROR(ReadInt(p, "patch_size", 1, 1024, patch));
  GLINT_RETURN_IF_ERROR(ReadInt(p, "temporal_patch_size", 1, 16, temporal));
  GLINT_RETURN_IF_ERROR(ReadInt(p, "merge_size", 1, 16, merge));
  config.patch_size = static_cast<int>(patch), config.temporal_patch_size = static_cast<int>(temporal);
  config.merge_size = static_cast<int>(merge);
  int64_t expand = 1;
  GLINT_RETURN_IF_ERROR(ReadInt(p, "patch_expand_factor", 1, 1, expand));  // the release uses 1; 2 is refused
  GLINT_RETURN_IF_ERROR(ReadInt(p, "min_image_tokens", 1, int64_t{1} << 24, config.min_image_tokens));
  GLINT_RETURN_IF_ERROR(ReadInt(p, "max_image_tokens", 1, int64_t{1} << 24, config.max_image_tokens));
  if (config.min_image_tokens > config.max_image_tokens) {
    return InvalidArgument("processor config: min_image_tokens (", config.min_image_tokens,
                           ") is above max_image_tokens (", config.max_image_tokens, ")");
  }
  if (const auto mode = p.find("resize_mode"); mode != p.end() && !mode->is_null()) {
    if (!mode->is_string() || (*mode != "pad" && *mode != "resize")) {
      return InvalidArgument("processor config: 'resize_mode' must be \"pad\" or \"resize\", got ", mode->dump());
    }
    config.pad = *mode == "pad";
  }
  if (const auto resample = p.find("resample"); resample != p.end() && !resample->is_null()) {
    if (*resample != 3) {  // PILImageResampling.BICUBIC; the only resize glint implements
      return InvalidArgument("processor config: 'resample' must be 3 (bicubic), got ", resample->dump());
    }
  }
  GLINT_RETURN_IF_ERROR(ReadBool(p, "do_resize", config.do_resize));
  GLINT_RETURN_IF_ERROR(ReadBool(p, "do_rescale", config.do_rescale));
  GLINT_RETURN_IF_ERROR(ReadBool(p, "do_normalize", config.do_normalize));
  if (const auto factor = p.find("rescale_factor"); factor != p.end() && !factor->is_null()) {
    if (!factor->is_number() || !(factor->get<double>() > 0) || !std::isfinite(factor->get<double>())) {
      return InvalidArgument("processor config: 'rescale_factor' must be a positive number, got ", factor->dump());
    }
    config.rescale_factor = factor->get<double>();
  }
  GLINT_RETURN_IF_ERROR(ReadTriple(p, "image_mean", false, config.image_mean));
  GLINT_RETURN_IF_ERROR(ReadTriple(p, "image_std", true, config.image_std));
  return Status::Ok();
}

}  // namespace

Result<ProcessorConfig> ParseProcessorConfig(std::string_view json_text) {
  if (!JsonDepthWithin(json_text, kMaxJsonFileDepth)) return InvalidArgument("processor config: nested too deeply");
  const Json root = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) return InvalidArgument("processor config: not a JSON object");
  const auto nested = root.find("image_processor");
  const Json& p = nested != root.end() ? *nested : root;
  if (!p.is_object()) return InvalidArgument("processor config: 'image_processor' must be an object");
  ProcessorConfig config;
  GLINT_RETURN_IF_ERROR(ReadImageProcessor(p, config));
  return config;
}

Result<ProcessorConfig> LoadProcessorConfig(const std::string& model_dir, std::string* origin) {
  for (const char* name : {"processor_config.json", "preprocessor_config.json"}) {
    const std::string path = model_dir + "/" + name;
    std::error_code error;
    if (!std::filesystem::exists(path, error)) continue;
    auto text = ReadFile(path, size_t{1} << 20);
    if (!text.ok()) return text.status();
    auto config = ParseProcessorConfig(text.value());
    if (!config.ok()) return config.status().WithContext(path);
    if (origin != nullptr) *origin = path;
    return config;
  }
  if (origin != nullptr) *origin = "defaults";
  return ProcessorConfig{};
}

Result<CanvasSize> SmartResize(const ProcessorConfig& config, int height, int width) {
  if (height <= 0 || width <= 0) return InvalidArgument("image has an empty size ", width, "x", height);
  const int64_t factor = config.factor(), t = config.temporal_patch_size;
  const int64_t pixels_per_token = t * factor * factor;
  const int64_t min_pixels = config.min_image_tokens * pixels_per_token;
  const int64_t max_pixels = config.max_image_tokens * pixels_per_token;
  int64_t h_bar = CeilToFactor(height, factor), w_bar = CeilToFactor(width, factor);
  // Largest proportional content whose rounded-up canvas fits max_pixels: binary search on the content height.
  auto fit_within_budget = [&]() -> Result<CanvasSize> {
    if (max_pixels < pixels_per_token) return InvalidArgument("max_image_tokens allows no canvas");
    int64_t low = 1, high = height, best_h = factor, best_w = factor;
    while (low <= high) {
      const int64_t content_h = (low + high) / 2;
      const int64_t content_w = std::max<int64_t>(
          1, static_cast<int64_t>(std::floor(static_cast<double>(int64_t{width} * content_h) / height)));
      const int64_t aligned_h = CeilToFactor(content_h, factor), aligned_w = CeilToFactor(content_w, factor);
      if (t * aligned_h * aligned_w <= max_pixels) {
        best_h = aligned_h, best_w = aligned_w, low = content_h + 1;
      } else {
        high = content_h - 1;
      }
    }
    return CanvasSize{static_cast<int>(best_h), static_cast<int>(best_w)};
  };
  if (t * h_bar * w_bar > max_pixels) return fit_within_budget();
  if (t * h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (static_cast<double>(t) * height * width));
    h_bar = CeilToFactor(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(height * beta))), factor);
    w_bar = CeilToFactor(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(width * beta))), factor);
    if (t * h_bar * w_bar > max_pixels) return fit_within_budget();
  }
  if (h_bar > (int64_t{1} << 30) || w_bar > (int64_t{1} << 30)) return InvalidArgument("canvas too large");
  return CanvasSize{static_cast<int>(h_bar), static_cast<int>(w_bar)};
}

CanvasSize PadContentSize(const ProcessorConfig& config, int height, int width, CanvasSize canvas) {
  const int64_t pixels_per_token = int64_t{config.temporal_patch_size} * config.factor() * config.factor();
  const bool allow_upscale =
      int64_t{config.temporal_patch_size} * height * width < config.min_image_tokens * pixels_per_token;
  double scale = std::min(static_cast<double>(canvas.height) / height, static_cast<double>(canvas.width) / width);
  if (!allow_upscale) scale = std::min(1.0, scale);
  auto side = [&](int size, int limit) {
    return static_cast<int>(std::max(1.0, std::min<double>(limit, std::floor(size * scale))));
  };
  return {side(height, canvas.height), side(width, canvas.width)};
}

Result<RgbImage> ResizeToCanvas(const RgbImage& image, const ProcessorConfig& config) {
  if (!config.do_resize) {
    if (image.height % config.factor() != 0 || image.width % config.factor() != 0) {
      return InvalidArgument("do_resize is false but the image (", image.width, "x", image.height,
                             ") is not a multiple of ", config.factor(), " on each side");
    }
    return image;
  }
  GLINT_ASSIGN_OR_RETURN(const CanvasSize canvas, SmartResize(config, image.height, image.width));
  if (!config.pad) return ResizeBicubicAntialias(image, canvas.width, canvas.height);
  const CanvasSize content = PadContentSize(config, image.height, image.width, canvas);
  const RgbImage resized = (content.height == image.height && content.width == image.width)
                               ? image
                               : ResizeBicubicAntialias(image, content.width, content.height);
  RgbImage out{canvas.width, canvas.height, std::vector<uint8_t>(size_t{3} * canvas.width * canvas.height, 0)};
  for (int y = 0; y < resized.height; ++y) {
    std::copy_n(&resized.pixels[size_t{3} * y * resized.width], size_t{3} * resized.width,
                &out.pixels[size_t{3} * y * out.width]);
  }
  return out;
}

PreprocessedImage Patchify(const RgbImage& canvas, const ProcessorConfig& config) {
  const int p = config.patch_size, m = config.merge_size, tp = config.temporal_patch_size;
  PreprocessedImage out;
  out.merge_size = m;
  out.grid_t = 1;
  out.grid_h = canvas.height / p;
  out.grid_w = canvas.width / p;
  // Fused rescale + normalise as the torchvision backend does it, in float32: mean' = mean·(1/rescale) and
  // std' = std·(1/rescale) (each rounded to float32), then (x − mean') / std'. Without normalisation: x · rescale.
  std::array<float, 3> mean{}, stddev{};
  const float inverse = static_cast<float>(1.0 / config.rescale_factor);
  for (int c = 0; c < 3; ++c) {
    mean[c] = static_cast<float>(config.image_mean[c]) * inverse;
    stddev[c] = static_cast<float>(config.image_std[c]) * inverse;
  }
  const float rescale = static_cast<float>(config.rescale_factor);
  auto value = [&](uint8_t x, int c) -> float {
    if (config.do_normalize) return (static_cast<float>(x) - mean[c]) / stddev[c];
    return config.do_rescale ? static_cast<float>(x) * rescale : static_cast<float>(x);
  };
  const int row_size = 3 * tp * p * p;
  out.patches.resize(static_cast<size_t>(out.num_patches()) * row_size);
  const int blocks_h = out.grid_h / m, blocks_w = out.grid_w / m;
  size_t row = 0;
  for (int bh = 0; bh < blocks_h; ++bh) {
    for (int bw = 0; bw < blocks_w; ++bw) {
      for (int mh = 0; mh < m; ++mh) {
        for (int mw = 0; mw < m; ++mw, ++row) {
          float* dst = &out.patches[row * row_size];
          const int top = (bh * m + mh) * p, left = (bw * m + mw) * p;
          for (int c = 0; c < 3; ++c) {
            for (int f = 0; f < tp; ++f) {  // the still frame, repeated
              for (int py = 0; py < p; ++py) {
                for (int px = 0; px < p; ++px) *dst++ = value(canvas.at(top + py, left + px, c), c);
              }
            }
          }
        }
      }
    }
  }
  return out;
}

Result<PreprocessedImage> PreprocessImage(const RgbImage& image, const ProcessorConfig& config) {
  GLINT_ASSIGN_OR_RETURN(const RgbImage canvas, ResizeToCanvas(image, config));
  return Patchify(canvas, config);
}

Result<int64_t> ImageTokenCount(const ProcessorConfig& config, int height, int width) {
  if (!config.do_resize) {
    return int64_t{height / config.patch_size} * (width / config.patch_size) / (config.merge_size * config.merge_size);
  }
  GLINT_ASSIGN_OR_RETURN(const CanvasSize canvas, SmartResize(config, height, width));
  return int64_t{canvas.height / config.patch_size} * (canvas.width / config.patch_size) /
         (config.merge_size * config.merge_size);
}

}  // namespace glint::media
