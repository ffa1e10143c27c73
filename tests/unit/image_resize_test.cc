// The fixed-point resize (torch's uint8 arithmetic) against the float64 reference beside it, within the bound
// derived in resize.h (ResizeErrorBound), over a sweep of up- and down-scales; the filter's own invariants.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "media/resize.h"
#include "test_util.h"

namespace glint::media {
namespace {

RgbImage RandomImage(int width, int height, uint32_t seed, bool extremes) {
  std::mt19937 rng(seed);
  RgbImage image{width, height, std::vector<uint8_t>(size_t{3} * width * height)};
  for (auto& v : image.pixels) v = extremes ? (rng() % 2 ? 255 : 0) : static_cast<uint8_t>(rng());
  return image;
}

TEST(ResizeFilter, WeightsSumToOneAndFixedPointFitsInt16) {
  for (const auto& [in, out] : {std::pair{100, 7}, {7, 100}, {448, 448 - 28}, {1, 5}, {5, 1}, {4032, 1008}}) {
    const AxisFilter f = BicubicAntialiasFilter(in, out);
    ASSERT_GE(f.precision, 14) << in << "->" << out;  // max weight ≤ 1 keeps at least 14 bits
    for (int i = 0; i < out; ++i) {
      double sum = 0;
      int64_t fixed_sum = 0;
      for (int j = 0; j < f.count[i]; ++j) {
        sum += f.weights[i * f.taps + j];
        fixed_sum += f.fixed[i * f.taps + j];
      }
      EXPECT_NEAR(sum, 1.0, 1e-12);
      // Each k_j is within ½ of w_j·2^p, so the sum is within count/2 of 2^p.
      EXPECT_LE(std::abs(fixed_sum - (int64_t{1} << f.precision)), f.count[i]);
      EXPECT_GE(f.start[i], 0);
      EXPECT_LE(f.start[i] + f.count[i], in);
    }
  }
}

TEST(Resize, FixedPointIsWithinTheDerivedBoundOfTheFloat64Reference) {
  uint32_t seed = 1;
  for (const auto& [w, h, ow, oh] : {std::array{37, 29, 11, 13},
                                     {11, 13, 37, 29},
                                     {64, 48, 64, 20},
                                     {64, 48, 20, 48},
                                     {300, 40, 224, 29},
                                     {5, 5, 56, 56},
                                     {201, 150, 74, 56}}) {
    for (const bool extremes : {false, true}) {
      const RgbImage image = RandomImage(w, h, seed++, extremes);
      const RgbImage fixed = ResizeBicubicAntialias(image, ow, oh);
      const std::vector<double> reference = ResizeBicubicAntialiasReference(image, ow, oh);
      const double bound = ResizeErrorBound(image, ow, oh);
      ASSERT_EQ(fixed.width, ow);
      ASSERT_EQ(fixed.height, oh);
      ASSERT_EQ(fixed.pixels.size(), reference.size());
      double worst = 0;
      for (size_t i = 0; i < reference.size(); ++i) worst = std::max(worst, std::abs(fixed.pixels[i] - reference[i]));
      EXPECT_LE(worst, bound) << w << "x" << h << " -> " << ow << "x" << oh << (extremes ? " (0/255)" : "");
      EXPECT_LT(bound, 2.5);  // the bound itself is tight: one rounding per pass plus small weight rounding
    }
  }
}

TEST(Resize, UnchangedAxisIsNotResampledAndConstantsStayConstant) {
  const RgbImage image = RandomImage(9, 7, 3, false);
  const RgbImage same = ResizeBicubicAntialias(image, 9, 7);
  EXPECT_EQ(same.pixels, image.pixels);
  RgbImage flat{31, 17, std::vector<uint8_t>(size_t{3} * 31 * 17, 200)};
  const RgbImage resized = ResizeBicubicAntialias(flat, 12, 40);
  for (const uint8_t v : resized.pixels) EXPECT_EQ(v, 200);
}

}  // namespace
}  // namespace glint::media
