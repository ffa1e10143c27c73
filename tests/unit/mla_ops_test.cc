// Absorbed MLA attention (kernels/mla_ops.h) on every compiled Highway target against ref::LatentAttention: head
// and position counts across the score and output tiles (4 × 4, 8 heads), the score phase's groups of 16 KB of rows
// (8 rows at rank 512, 40 at rank 100: counts 9 and 70 cross them) and the output's blocks (AttendBlockRows: one
// short of a block, one block, one over, two and a partial tile), ranks across vector widths (whole vectors or not:
// unmasked or masked loads), scattered positions through a paged row table. Bound: relative RMS error ≤ 1e-5 (fp32 dots
// of length rank and a softmax; measured below 1e-6).
#include "kernels/mla_ops.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/reference.h"

namespace glint {
namespace {

TEST(MlaOps, AttendMatchesReference) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int64_t heads : {1, 4, 6}) {
      for (int64_t rank : {32, 48, 100, 512, 520}) {
        const int64_t block = mla::AttendBlockRows(rank);
        for (int64_t count : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{9}, int64_t{70}, block - 1, block, block + 1,
                              2 * block + 3}) {
          SCOPED_TRACE(::testing::Message() << "heads " << heads << " rank " << rank << " count " << count);
          std::mt19937 rng(static_cast<uint32_t>(heads * 1000 + rank * 10 + count));
          std::normal_distribution<float> normal;
          // A cache of 200 positions in pages of 16 rows (stride rank + 3), queried at scattered positions.
          const int64_t tokens = 200, per_page = 16, stride = rank + 3;
          std::vector<std::vector<float>> pages((tokens + per_page - 1) / per_page,
                                                std::vector<float>(per_page * stride));
          for (auto& page : pages) {
            for (float& v : page) v = normal(rng);
          }
          std::vector<const float*> page_table;
          for (auto& page : pages) page_table.push_back(page.data());
          const mla::LatentRows rows{page_table.data(), per_page, stride};
          std::vector<int64_t> positions;
          for (int64_t i = 0; i < count; ++i) positions.push_back((i * 37 + 11) % tokens);
          std::vector<float> q(heads * rank);
          for (float& v : q) v = 2.0f * normal(rng);
          std::vector<const float*> row_pointers;
          for (int64_t p : positions) row_pointers.push_back(rows.Row(p));
          std::vector<double> expected(heads * rank);
          const double scale = 1.0 / std::sqrt(32.0);
          ref::LatentAttention(q.data(), heads, rank, row_pointers.data(), count, scale, expected.data());
          std::vector<float> actual(heads * rank), scratch(mla::AttendScratchFloats(heads, count));
          mla::Attend(q.data(), heads, rank, rows, positions.data(), count, static_cast<float>(scale), actual.data(),
                      scratch.data());
          double error = 0, norm = 0;
          for (size_t i = 0; i < expected.size(); ++i) {
            error += (actual[i] - expected[i]) * (actual[i] - expected[i]);
            norm += expected[i] * expected[i];
          }
          EXPECT_LT(std::sqrt(error / norm), 1e-5);
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Every head's output is computed alone (its own dot products, softmax and sums, whatever tile it shares), so the
// engine may split a token's heads over calls as it likes: 64 heads in one call, in calls of 8, or of 6 and 2, give
// the same bits (fast_dsa.cc takes all heads per task in prefill and 8 in decode).
TEST(MlaOps, AttendGivesTheSameBitsWhateverTheHeadsPerCall) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    const int64_t heads = 64, rank = 512, count = 131;  // a block of 128 rows and a partial one
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::vector<float> latents(count * rank), q(heads * rank);
    for (float& v : latents) v = normal(rng);
    for (float& v : q) v = 2.0f * normal(rng);
    const float* page = latents.data();
    const mla::LatentRows rows{&page, count, rank};
    std::vector<int64_t> positions(count);
    for (int64_t i = 0; i < count; ++i) positions[i] = (i * 17) % count;
    const auto attend = [&](int64_t h0, int64_t nh, float* out) {
      std::vector<float> scratch(mla::AttendScratchFloats(nh, count));
      mla::Attend(q.data() + h0 * rank, nh, rank, rows, positions.data(), count, 0.05f, out + h0 * rank,
                  scratch.data());
    };
    std::vector<float> whole(heads * rank), by8(heads * rank), by6and2(heads * rank);
    attend(0, heads, whole.data());
    for (int64_t h0 = 0; h0 < heads; h0 += 8) attend(h0, 8, by8.data());
    for (int64_t h0 = 0; h0 < heads; h0 += 8) attend(h0, 6, by6and2.data()), attend(h0 + 6, 2, by6and2.data());
    EXPECT_EQ(0, std::memcmp(whole.data(), by8.data(), whole.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(whole.data(), by6and2.data(), whole.size() * sizeof(float)));
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace glint
