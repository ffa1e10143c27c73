#include "media/resize.h"

#include <algorithm>
#include <cmath>

namespace glint::media {
namespace {

// Keys' cubic convolution kernel at a = −0.5 (torch's antialiased bicubic, as Pillow's), written in the same
// operation order as torch's cubic_convolution1/2 so the float64 weights agree to the bit.
double KeysCubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

int FixedPointPrecision(double max_weight) {
  int precision = 0;
  for (; precision < 22; ++precision) {
    // Truncating x + 0.5 (not lround) is how the reference computes it; the pixels must match bit for bit.
    const int next =
        static_cast<int>(0.5 + max_weight * (1 << (precision + 1)));  // NOLINT(bugprone-incorrect-roundings)
    if (next >= (1 << 15)) break;
  }
  return precision;
}

// One pass along an axis of an interleaved RGB image: `lines` lines of `in_size` pixels, `step` bytes between
// consecutive pixels of a line and `line_step` between lines (width pass: step 3; height pass: step 3·width).
void ResamplePass(const AxisFilter& filter, const uint8_t* in, uint8_t* out, int lines, size_t in_step,
                  size_t in_line_step, size_t out_step, size_t out_line_step) {
  const int32_t half = 1 << (filter.precision - 1);
  for (int line = 0; line < lines; ++line) {
    const uint8_t* in_line = in + line * in_line_step;
    uint8_t* out_line = out + line * out_line_step;
    for (int i = 0; i < filter.out_size; ++i) {
      const int16_t* k = &filter.fixed[static_cast<size_t>(i) * filter.taps];
      const uint8_t* first = in_line + static_cast<size_t>(filter.start[i]) * in_step;
      for (int c = 0; c < 3; ++c) {
        int32_t sum = half;
        for (int j = 0; j < filter.count[i]; ++j) sum += int32_t{first[j * in_step + c]} * k[j];
        out_line[i * out_step + c] = static_cast<uint8_t>(std::clamp(sum >> filter.precision, 0, 255));
      }
    }
  }
}

void ReferencePass(const AxisFilter& filter, const double* in, double* out, int lines, size_t in_step,
                   size_t in_line_step, size_t out_step, size_t out_line_step) {
  for (int line = 0; line < lines; ++line) {
    for (int i = 0; i < filter.out_size; ++i) {
      for (int c = 0; c < 3; ++c) {
        double sum = 0;
        for (int j = 0; j < filter.count[i]; ++j) {
          sum += filter.weights[static_cast<size_t>(i) * filter.taps + j] *
                 in[line * in_line_step + (filter.start[i] + j) * in_step + c];
        }
        out[line * out_line_step + i * out_step + c] = std::clamp(sum, 0.0, 255.0);
      }
    }
  }
}

}  // namespace

AxisFilter BicubicAntialiasFilter(int in_size, int out_size) {
  AxisFilter f;
  f.in_size = in_size;
  f.out_size = out_size;
  const double scale = static_cast<double>(in_size) / out_size;
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
  const double inverse_scale = scale >= 1.0 ? 1.0 / scale : 1.0;
  f.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  f.start.resize(out_size);
  f.count.resize(out_size);
  f.weights.assign(static_cast<size_t>(out_size) * f.taps, 0.0);
  double max_weight = 0.0;
  for (int i = 0; i < out_size; ++i) {
    const double center = scale * (i + 0.5);
    // The window bounds truncate x + 0.5 toward zero as the reference does (lround would move them).
    // NOLINTNEXTLINE(bugprone-incorrect-roundings)
    const int64_t first = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    // NOLINTNEXTLINE(bugprone-incorrect-roundings)
    const int64_t count = std::clamp(std::min(static_cast<int64_t>(center + support + 0.5), int64_t{in_size}) - first,
                                     int64_t{0}, int64_t{f.taps});
    double* w = &f.weights[static_cast<size_t>(i) * f.taps];
    double total = 0.0;
    for (int64_t j = 0; j < count; ++j) {
      w[j] = KeysCubic((static_cast<double>(j + first) - center + 0.5) * inverse_scale);
      total += w[j];
    }
    if (total != 0.0) {
      for (int64_t j = 0; j < count; ++j) {
        w[j] /= total;
        max_weight = std::max(max_weight, w[j]);
      }
    }
    f.start[i] = static_cast<int>(first);
    f.count[i] = static_cast<int>(count);
  }
  f.precision = FixedPointPrecision(max_weight);
  f.fixed.resize(f.weights.size());
  for (size_t k = 0; k < f.weights.size(); ++k) {
    const double v = f.weights[k] * (1 << f.precision);
    // Half away from zero by truncation, as the reference rounds its fixed-point weights.
    // NOLINTNEXTLINE(bugprone-incorrect-roundings)
    f.fixed[k] = static_cast<int16_t>(v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v));
  }
  return f;
}

RgbImage ResizeBicubicAntialias(const RgbImage& image, int out_width, int out_height) {
  RgbImage current = image;
  if (out_width != image.width) {
    const AxisFilter filter = BicubicAntialiasFilter(image.width, out_width);
    RgbImage next{out_width, current.height, std::vector<uint8_t>(size_t{3} * out_width * current.height)};
    ResamplePass(filter, current.pixels.data(), next.pixels.data(), current.height, 3, size_t{3} * current.width, 3,
                 size_t{3} * out_width);
    current = std::move(next);
  }
  if (out_height != image.height) {
    const AxisFilter filter = BicubicAntialiasFilter(image.height, out_height);
    RgbImage next{current.width, out_height, std::vector<uint8_t>(size_t{3} * current.width * out_height)};
    // Lines are columns: pixel steps are rows apart, consecutive columns 3 bytes apart.
    ResamplePass(filter, current.pixels.data(), next.pixels.data(), current.width, size_t{3} * current.width, 3,
                 size_t{3} * current.width, 3);
    current = std::move(next);
  }
  return current;
}

std::vector<double> ResizeBicubicAntialiasReference(const RgbImage& image, int out_width, int out_height) {
  std::vector<double> current(image.pixels.begin(), image.pixels.end());
  int width = image.width;
  if (out_width != image.width) {
    const AxisFilter filter = BicubicAntialiasFilter(image.width, out_width);
    std::vector<double> next(size_t{3} * out_width * image.height);
    ReferencePass(filter, current.data(), next.data(), image.height, 3, size_t{3} * width, 3, size_t{3} * out_width);
    current = std::move(next);
    width = out_width;
  }
  if (out_height != image.height) {
    const AxisFilter filter = BicubicAntialiasFilter(image.height, out_height);
    std::vector<double> next(size_t{3} * width * out_height);
    ReferencePass(filter, current.data(), next.data(), width, size_t{3} * width, 3, size_t{3} * width, 3);
    current = std::move(next);
  }
  return current;
}

double ResizeErrorBound(const RgbImage& image, int out_width, int out_height) {
  // Per axis: the largest Σ_j |k_j/2^p − w_j| and the largest Σ_j |w_j| over its outputs.
  auto measure = [](const AxisFilter& f, double& rounding, double& gain) {
    rounding = 0, gain = 0;
    for (int i = 0; i < f.out_size; ++i) {
      double r = 0, g = 0;
      for (int j = 0; j < f.count[i]; ++j) {
        const size_t k = static_cast<size_t>(i) * f.taps + j;
        r += std::abs(f.fixed[k] / static_cast<double>(1 << f.precision) - f.weights[k]);
        g += std::abs(f.weights[k]);
      }
      rounding = std::max(rounding, r), gain = std::max(gain, g);
    }
  };
  double error = 0;
  if (out_width != image.width) {
    double rounding = 0, gain = 0;
    measure(BicubicAntialiasFilter(image.width, out_width), rounding, gain);
    error = 0.5 + 255 * rounding;
  }
  if (out_height != image.height) {
    double rounding = 0, gain = 0;
    measure(BicubicAntialiasFilter(image.height, out_height), rounding, gain);
    error = 0.5 + 255 * rounding + gain * error;
  }
  return error;
}

}  // namespace glint::media
