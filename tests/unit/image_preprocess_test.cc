// glint's preprocessing against the fixtures of the independent numpy oracle (tools/vision_input_oracle.py,
// tests/data/vision_input/): the uint8 canvas bit-exact and the float32 pixel_values bit-exact (both sides round
// the same IEEE float32 operations, (x − mean') / std', so the derived tolerance is zero ulp), plus the canvas
// rule on its own.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "media/image.h"
#include "media/preprocess.h"
#include "test_util.h"

namespace glint::media {
namespace {

uint64_t Fnv1a64(const void* data, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ static_cast<const uint8_t*>(data)[i]) * 0x100000001b3ull;
  return hash;
}
std::string Hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

class OracleFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(OracleFixture, CanvasAndPixelValuesMatchExactly) {
  const std::string dir = glint::testing::TestDataPath("vision_input/" + GetParam());
  ASSERT_OK_AND_ASSIGN(const std::string png, ReadFile(dir + "/input.png"));
  ASSERT_OK_AND_ASSIGN(const std::string config_text, ReadFile(dir + "/processor_config.json"));
  ASSERT_OK_AND_ASSIGN(const std::string expected_text, ReadFile(dir + "/expected.json"));
  ASSERT_OK_AND_ASSIGN(const std::string expected_canvas, ReadFile(dir + "/canvas.rgb"));
  const nlohmann::json expected = nlohmann::json::parse(expected_text);
  ASSERT_OK_AND_ASSIGN(const ProcessorConfig config, ParseProcessorConfig(config_text));

  ASSERT_OK_AND_ASSIGN(const RgbImage image, DecodeImage({reinterpret_cast<const uint8_t*>(png.data()), png.size()}));
  EXPECT_EQ(Hex(Fnv1a64(image.pixels.data(), image.pixels.size())), expected["input_fnv1a64"]);

  ASSERT_OK_AND_ASSIGN(const CanvasSize canvas_size, SmartResize(config, image.height, image.width));
  EXPECT_EQ(canvas_size.height, expected["canvas"][0]);
  EXPECT_EQ(canvas_size.width, expected["canvas"][1]);
  if (config.pad) {
    const CanvasSize content = PadContentSize(config, image.height, image.width, canvas_size);
    EXPECT_EQ(content.height, expected["content"][0]);
    EXPECT_EQ(content.width, expected["content"][1]);
  }

  ASSERT_OK_AND_ASSIGN(const RgbImage canvas, ResizeToCanvas(image, config));
  ASSERT_EQ(canvas.pixels.size(), expected_canvas.size());
  for (size_t i = 0; i < canvas.pixels.size(); ++i) {
    if (canvas.pixels[i] != static_cast<uint8_t>(expected_canvas[i])) {
      const size_t pixel = i / 3;
      FAIL() << "first differing canvas byte: row " << pixel / canvas.width << ", column " << pixel % canvas.width
             << ", channel " << i % 3 << ": glint " << int{canvas.pixels[i]} << ", oracle "
             << int{static_cast<uint8_t>(expected_canvas[i])};
    }
  }

  const PreprocessedImage processed = Patchify(canvas, config);
  EXPECT_EQ(processed.grid_t, expected["grid"][0]);
  EXPECT_EQ(processed.grid_h, expected["grid"][1]);
  EXPECT_EQ(processed.grid_w, expected["grid"][2]);
  EXPECT_EQ(processed.num_tokens(), expected["tokens"]);
  ASSERT_OK_AND_ASSIGN(const int64_t counted, ImageTokenCount(config, image.height, image.width));
  EXPECT_EQ(counted, expected["tokens"]);
  const int64_t row_size = expected["pixel_values_shape"][1];
  ASSERT_EQ(static_cast<int64_t>(processed.patches.size()), int64_t{expected["pixel_values_shape"][0]} * row_size);
  const auto& rows = expected["first_rows_bits"];
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int64_t k = 0; k < row_size; ++k) {
      uint32_t bits = 0;
      std::memcpy(&bits, &processed.patches[r * row_size + k], 4);
      ASSERT_EQ(bits, rows[r][k].get<uint32_t>()) << "pixel_values[" << r << "][" << k << "]";
    }
  }
  EXPECT_EQ(Hex(Fnv1a64(processed.patches.data(), processed.patches.size() * sizeof(float))),
            expected["pixel_values_fnv1a64"]);
}

INSTANTIATE_TEST_SUITE_P(VisionInput, OracleFixture,
                         ::testing::Values("upscale_below_min", "downscale_over_max", "wide", "exact_canvas",
                                           "strong_downscale", "stretch_resize_mode", "tall_pad_right"));

ProcessorConfig Release() { return ProcessorConfig{}; }  // patch 14, temporal 2, merge 2, tokens 16 … 8000

TEST(CanvasRule, SidesRoundUpAndTokensStayInBounds) {
  for (const auto& [h, w] : {std::pair{448, 448}, {1, 1}, {4000, 3000}, {28, 10000}, {333, 777}, {10000, 10000}}) {
    ASSERT_OK_AND_ASSIGN(const CanvasSize canvas, SmartResize(Release(), h, w));
    EXPECT_EQ(canvas.height % 28, 0);
    EXPECT_EQ(canvas.width % 28, 0);
    const int64_t tokens = int64_t{canvas.height / 14} * (canvas.width / 14) / 4;
    EXPECT_GE(tokens, 16) << h << "x" << w;
    EXPECT_LE(tokens, 8000) << h << "x" << w;
  }
  // 448 × 448 is already a multiple of 28: the canvas is the image, 32 × 32 patches, 256 tokens.
  ASSERT_OK_AND_ASSIGN(const CanvasSize square, SmartResize(Release(), 448, 448));
  EXPECT_EQ(square.height, 448);
  EXPECT_EQ(square.width, 448);
  ASSERT_OK_AND_ASSIGN(const int64_t tokens, ImageTokenCount(Release(), 448, 448));
  EXPECT_EQ(tokens, 256);
  // 449 rounds up (never down): 476 = 17 · 28.
  ASSERT_OK_AND_ASSIGN(const CanvasSize up, SmartResize(Release(), 449, 448));
  EXPECT_EQ(up.height, 476);
}

TEST(CanvasRule, PadKeepsTheAspectRatioAndNeverEnlargesAboveTheMinimum) {
  // 1000 × 500 fits the budget as it is: canvas 1008 × 504, content the image itself (no resize, only padding).
  ASSERT_OK_AND_ASSIGN(const CanvasSize canvas, SmartResize(Release(), 500, 1000));
  EXPECT_EQ(canvas.height, 504);
  EXPECT_EQ(canvas.width, 1008);
  const CanvasSize content = PadContentSize(Release(), 500, 1000, canvas);
  EXPECT_EQ(content.height, 500);
  EXPECT_EQ(content.width, 1000);
}

TEST(ProcessorConfigFile, ReadsTheNestedImageProcessorAndRefusesBadValues) {
  ASSERT_OK_AND_ASSIGN(const ProcessorConfig config,
                       ParseProcessorConfig(R"({"image_processor": {"min_image_tokens": 4, "max_image_tokens": 9,
                                                 "resize_mode": "resize", "unknown": 1}})"));
  EXPECT_EQ(config.min_image_tokens, 4);
  EXPECT_EQ(config.max_image_tokens, 9);
  EXPECT_FALSE(config.pad);
  EXPECT_ERROR_CONTAINS(ParseProcessorConfig(R"({"min_image_tokens": 9, "max_image_tokens": 4})"),
                        "min_image_tokens (9) is above max_image_tokens (4)");
  EXPECT_ERROR_CONTAINS(ParseProcessorConfig(R"({"resize_mode": "crop"})"), "'resize_mode' must be");
  EXPECT_ERROR_CONTAINS(ParseProcessorConfig(R"({"image_std": [1, 0, 1]})"), "'image_std' must hold 3 finite");
  EXPECT_ERROR_CONTAINS(ParseProcessorConfig(R"({"patch_expand_factor": 2})"), "'patch_expand_factor'");
  EXPECT_ERROR_CONTAINS(ParseProcessorConfig("[1]"), "not a JSON object");
}

}  // namespace
}  // namespace glint::media
