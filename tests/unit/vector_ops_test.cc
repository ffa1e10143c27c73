// Every compiled Highway target of kernels/vector_ops.h against double-precision loops: lengths across vector and
// unroll remainders; fp32 bounds derived from the accumulation (n · 2^-24 · Σ|terms|) or per-element ulps.
#include "kernels/vector_ops.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/reference.h"

namespace glint {
namespace {

using glint::testing::Random;

// Runs `body` once per compiled and supported Highway target.
template <typename Body>
void ForEachTarget(Body&& body) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    body();
  }
  hwy::SetSupportedTargetsForTest(0);
}

const int64_t kLengths[] = {1, 3, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 100, 129, 1000, 4099};

TEST(VectorOps, DotAndDotRows) {
  ForEachTarget([] {
    for (int64_t n : kLengths) {
      const auto a = Random(5 * n, n), b = Random(n, n + 1);
      double magnitude = 0;
      for (int64_t i = 0; i < n; ++i) magnitude += std::fabs(a[i] * b[i]);
      const double bound = (n + 4) * 6e-8 * magnitude;
      EXPECT_NEAR(vec::Dot(a.data(), b.data(), n), ref::Dot(a.data(), b.data(), n), bound) << n;
      std::vector<float> out(5);
      vec::DotRows(a.data(), 5, n, b.data(), n, out.data());
      for (int r = 0; r < 5; ++r) {
        double m = 0;
        for (int64_t i = 0; i < n; ++i) m += std::fabs(a[r * n + i] * b[i]);
        EXPECT_NEAR(out[r], ref::Dot(a.data() + r * n, b.data(), n), (n + 4) * 6e-8 * m) << n << " row " << r;
      }
    }
  });
}

// DotRowsTokens is DotRows token by token, bit for bit: row counts with and without a remainder past the 4-row
// tiles, token counts around the 4-token tiles, strides wider than n.
TEST(VectorOps, DotRowsTokensEqualsDotRowsPerToken) {
  ForEachTarget([] {
    for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{100}, int64_t{1000}}) {
      for (int64_t count : {4, 6, 24}) {
        for (int64_t tokens : {1, 3, 4, 5, 9}) {
          SCOPED_TRACE(::testing::Message() << "n " << n << " rows " << count << " tokens " << tokens);
          const int64_t stride = n + 5, x_stride = n + 3, out_stride = count + 2;
          const auto rows = Random(count * stride, n + count), x = Random(tokens * x_stride, n + tokens);
          std::vector<float> out(tokens * out_stride, -1.0f), expected(count);
          vec::DotRowsTokens(rows.data(), count, stride, x.data(), x_stride, tokens, n, out.data(), out_stride);
          for (int64_t t = 0; t < tokens; ++t) {
            vec::DotRows(rows.data(), count, stride, x.data() + t * x_stride, n, expected.data());
            for (int64_t r = 0; r < count; ++r) ASSERT_EQ(out[t * out_stride + r], expected[r]) << t << " " << r;
            for (int64_t r = count; r < out_stride; ++r) ASSERT_EQ(out[t * out_stride + r], -1.0f) << "wrote past";
          }
        }
      }
    }
  });
}

TEST(VectorOps, RmsNormMatchesReference) {
  ForEachTarget([] {
    for (int64_t n : kLengths) {
      const auto x = Random(n, 7 * n, 3.0f), w = Random(n, 7 * n + 1);
      std::vector<float> expected(n), actual(n);
      ref::RmsNorm(x.data(), w.data(), n, 1e-5f, expected.data());
      vec::RmsNorm(x.data(), w.data(), n, 1e-5f, actual.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(actual[i], expected[i], 1e-6 * (1 + std::fabs(expected[i])) * std::sqrt(n)) << n << " at " << i;
      vec::RmsNorm(x.data(), nullptr, n, 1e-5f, actual.data());
      ref::RmsNorm(x.data(), nullptr, n, 1e-5f, expected.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(actual[i], expected[i], 1e-6 * (1 + std::fabs(expected[i])) * std::sqrt(n));
    }
  });
}

TEST(VectorOps, ActivationsMatchReference) {
  ForEachTarget([] {
    for (int64_t n : kLengths) {
      auto gate = Random(n, 3 * n, 8.0f), up = Random(n, 3 * n + 1, 8.0f);
      gate[0] = 40.0f;  // the clamps are active
      if (n > 2) up[2] = -30.0f;
      std::vector<float> out(n), sig(n), silu(n);
      vec::SwiGlu(gate.data(), up.data(), n, 10.0f, out.data());
      vec::Sigmoid(gate.data(), n, sig.data());
      vec::Silu(up.data(), n, silu.data());
      for (int64_t i = 0; i < n; ++i) {
        const float g = std::min(gate[i], 10.0f), u = std::clamp(up[i], -10.0f, 10.0f);
        const double expected = ref::Silu(g) * static_cast<double>(u);
        ASSERT_NEAR(out[i], expected, 4e-7 * (1 + std::fabs(expected))) << n << " at " << i;
        ASSERT_NEAR(sig[i], 1.0 / (1.0 + std::exp(-static_cast<double>(gate[i]))), 3e-7) << n << " at " << i;
        const double silu_expected = up[i] / (1.0 + std::exp(-static_cast<double>(up[i])));
        ASSERT_NEAR(silu[i], silu_expected, 4e-7 * (1 + std::fabs(silu_expected))) << n << " at " << i;
      }
    }
  });
}

// exp(scale · x − scale · max) against double. The fused multiply-subtract rounds the argument a once (absolute
// error |a| · 2^-24, which exp turns into that relative error), and Highway's Exp adds a few ulps: per element
// (|a| + 8) · 2^-24 relative; for the fp32 sum of n terms in 4 · lanes accumulators n · 2^-24 of the sum on top
// (every term is positive, so Σ|terms| is the sum).
TEST(VectorOps, SoftmaxNumeratorsMatchDouble) {
  ForEachTarget([] {
    for (int64_t n : kLengths) {
      std::vector<float> x = Random(n, 5 * n, 20.0f), got = x;
      if (n > 3) x[3] = got[3] = -1e30f;  // a masked-out score: its numerator is 0
      const float scale = 0.125f;
      const float sum = vec::SoftmaxNumerators(got.data(), n, scale);
      const double top = *std::max_element(x.begin(), x.end());
      double expected_sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double a = scale * (static_cast<double>(x[i]) - top), e = std::exp(a);
        expected_sum += e;
        ASSERT_NEAR(got[i], e, (std::fabs(a) + 8) * 0x1p-24 * e + 1e-30) << n << " at " << i;
      }
      ASSERT_NEAR(sum, expected_sum, (64 + n) * 0x1p-24 * expected_sum) << n;
    }
  });
}

TEST(VectorOps, AxpyScaleAndMhc) {
  ForEachTarget([] {
    for (int64_t n : kLengths) {
      const int64_t hc = 4;
      const auto x = Random(n, n), streams = Random(hc * n, n + 9, 2.0f), y = Random(n, n + 5);
      std::vector<float> acc = Random(n, n + 2), scaled(n);
      const std::vector<float> acc0 = acc;
      vec::Axpy(0.75f, x.data(), n, acc.data());
      vec::Scale(-1.5f, x.data(), n, scaled.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(acc[i], acc0[i] + 0.75 * x[i], 2e-7 * (std::fabs(acc0[i]) + std::fabs(x[i])));
        ASSERT_FLOAT_EQ(scaled[i], -1.5f * x[i]);
      }
      const float pre[4] = {0.3f, 1.2f, -0.4f, 0.9f}, post[4] = {1.9f, 0.1f, 1.0f, 0.5f};
      float comb[16];
      for (int i = 0; i < 16; ++i) comb[i] = 0.05f * (i + 1);
      std::vector<float> h(n), written = streams;
      vec::MhcRead(streams.data(), pre, hc, n, h.data());
      vec::MhcWrite(post, comb, y.data(), hc, n, written.data());
      for (int64_t i = 0; i < n; ++i) {
        double expected = 0, magnitude = 0;
        for (int s = 0; s < hc; ++s) expected += pre[s] * static_cast<double>(streams[s * n + i]);
        for (int s = 0; s < hc; ++s) magnitude += std::fabs(pre[s] * streams[s * n + i]);
        ASSERT_NEAR(h[i], expected, 5 * 6e-8 * magnitude);
        for (int k = 0; k < hc; ++k) {
          double w = post[k] * static_cast<double>(y[i]), m = std::fabs(post[k] * y[i]);
          for (int j = 0; j < hc; ++j) w += comb[j * hc + k] * static_cast<double>(streams[j * n + i]);
          for (int j = 0; j < hc; ++j) m += std::fabs(comb[j * hc + k] * streams[j * n + i]);
          ASSERT_NEAR(written[k * n + i], w, 6 * 6e-8 * m) << n << " at " << i << " stream " << k;
        }
      }
    }
  });
}

// KDA's short conv against the double loop of the reference model (model/kda.cc): widths across whole and partial
// vectors (up to 300 channels: many blocks), kernels 1–5, 9 and 64 (4, the model's, takes the interleaved loads; 64
// is the most the config allows), one row and many (past the rows the loop requests ahead), window copies after 0,
// some and all rows. Bound: the K-term chain rounds at most 2K times (fused multiply-adds, or a multiply and an add on
// targets without FMA), each within 2^-24 of the sum's magnitudes Σ|tap · u|; SiLU's slope is at most 1.1, and the
// vector SiLU itself is within 4e-7 · (1 + |silu|) (VectorOps.ActivationsAgainstDouble).
TEST(VectorOps, ShortConvSiluAgainstDouble) {
  ForEachTarget([] {
    for (int64_t kernel : {1, 2, 3, 4, 5, 9, 64}) {
      for (int64_t width : {1, 7, 16, 17, 40, 64, 300}) {
        for (int64_t count : {1, 2, 9, 20}) {
          SCOPED_TRACE(::testing::Message() << "kernel " << kernel << " width " << width << " count " << count);
          const int64_t history = kernel - 1, stride = width + 3;
          const std::vector<float> taps = Random(width * kernel, 7 * kernel + width);
          const std::vector<float> window0 = Random(width * history, 11 + width, 2.0f);
          const std::vector<float> x0 = Random(count * stride, 13 + count, 2.0f);
          std::vector<float> x = x0, window = window0;
          std::vector<float> copy_first(width * history), copy_mid(width * history), copy_last(width * history);
          const std::pair<int64_t, float*> copies[] = {
              {0, copy_first.data()}, {count / 2, copy_mid.data()}, {count, copy_last.data()}};
          vec::ShortConvSilu(taps.data(), width, kernel, window.data(), x.data(), stride, count, copies);
          for (int64_t c = 0; c < width; ++c) {
            std::vector<double> u;  // the channel's series: window, then the rows' inputs
            for (int64_t i = 0; i < history; ++i) u.push_back(window0[c * history + i]);
            for (int64_t t = 0; t < count; ++t) u.push_back(x0[t * stride + c]);
            for (int64_t t = 0; t < count; ++t) {
              double y = 0, magnitude = 0;
              for (int64_t i = 0; i < kernel; ++i) {
                y += taps[c * kernel + i] * u[t + i];
                magnitude += std::fabs(taps[c * kernel + i] * u[t + i]);
              }
              const double expected = y / (1.0 + std::exp(-y));
              ASSERT_NEAR(x[t * stride + c], expected,
                          1.1 * 2 * kernel * 6e-8 * magnitude + 4e-7 * (1 + std::fabs(expected)))
                  << "channel " << c << " row " << t;
            }
            for (int64_t i = 0; i < history; ++i) {
              ASSERT_EQ(window[c * history + i], u[count + i]);
              ASSERT_EQ(copy_first[c * history + i], u[i]);
              ASSERT_EQ(copy_mid[c * history + i], u[count / 2 + i]);
              ASSERT_EQ(copy_last[c * history + i], u[count + i]);
            }
            for (int64_t pad = width; pad < stride && count > 0; ++pad) ASSERT_EQ(x[pad], x0[pad]);  // untouched
          }
        }
      }
    }
  });
}

// The same bits however the rows and channels are split: rows fed in two calls carrying the window, and each channel
// alone (the element-by-element path) against 300 channels at once (whole vectors, interleaved loads for K = 4).
TEST(VectorOps, ShortConvSiluIsTheSameBitsHoweverSplit) {
  ForEachTarget([] {
    for (int64_t kernel : {3, 4}) {
      const int64_t width = 300, history = kernel - 1, count = 11, first = 4;
      const std::vector<float> taps = Random(width * kernel, 3 + kernel);
      const std::vector<float> window0 = Random(width * history, 5, 2.0f), x0 = Random(count * width, 6, 2.0f);
      std::vector<float> whole = x0, whole_window = window0;
      vec::ShortConvSilu(taps.data(), width, kernel, whole_window.data(), whole.data(), width, count, {});
      std::vector<float> split = x0, split_window = window0;
      vec::ShortConvSilu(taps.data(), width, kernel, split_window.data(), split.data(), width, first, {});
      vec::ShortConvSilu(taps.data(), width, kernel, split_window.data(), split.data() + first * width, width,
                         count - first, {});
      EXPECT_EQ(split, whole) << "kernel " << kernel;
      EXPECT_EQ(split_window, whole_window);
      std::vector<float> alone = x0, alone_window = window0;
      for (int64_t c = 0; c < width; ++c) {
        vec::ShortConvSilu(taps.data() + c * kernel, 1, kernel, alone_window.data() + c * history, alone.data() + c,
                           width, count, {});
      }
      EXPECT_EQ(alone, whole) << "kernel " << kernel;
      EXPECT_EQ(alone_window, whole_window);
    }
  });
}

}  // namespace
}  // namespace glint
