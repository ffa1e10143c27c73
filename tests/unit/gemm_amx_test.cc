// The AMX int8 tile kernels (gemm_i8_amx.cc) against the scalar specification, at every token count (the tile
// path itself, bypassing the table's hand-off of small products to VNNI): exact int32 group sums; fp32 outputs
// bit-identical to the AVX-512 VNNI level's (both apply the same fp32 operations to the same exact integers in the
// same order) and therefore within the VNNI level's bound of the scalar result; tile remainders (tokens around
// 16 and 32, rows around 16-row blocks and 2-block pairs, K groups of every tile step 16, 32, 64); row-block
// ranges; saturation; calls larger than one row group; the table's threshold kAmxMinTokens. Every walk (the
// engine's and the candidates of gemm_i8.h AmxWalk) runs twice: on the tile unit, skipped with the
// reason printed where the CPU or the kernel does not offer AMX, and on the software model of the tiles
// (amx_emulator.h), which needs only AVX-512 for the epilogue — so the walks are checked on every AVX-512 machine,
// and where AMX exists the model is checked against the hardware (both must give the reference's bits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/amx_emulator.h"
#include "kernels/gemm_i8.h"
#include "quant/int8_matrix.h"
#include "test_util.h"

namespace glint {
namespace {

using glint::testing::QuantizedRows;
using glint::testing::QuantizeRows;
using glint::testing::Random;

class AmxTileKernel : public ::testing::TestWithParam<std::tuple<AmxTiles, internal::AmxWalk>> {
 protected:
  void SetUp() override {
    const std::string_view why = AmxTilesUnavailableReason(tiles());
    if (!why.empty()) GTEST_SKIP() << (tiles() == AmxTiles::kHardware ? "no AMX here: " : "") << why;
  }
  AmxTiles tiles() const { return std::get<0>(GetParam()); }
  internal::AmxWalk walk() const { return std::get<1>(GetParam()); }
  void GroupSums(const Int8Matrix& w, const QuantizedRows& q, int64_t begin, int64_t end, int32_t* sums) const {
    internal::Int8GroupSumsAmxTiles(w.view(), q.view, begin, end, sums, tiles(), walk());
  }
  void Gemm(const Int8Matrix& w, const QuantizedRows& q, int64_t begin, int64_t end, float* y, int64_t stride) const {
    internal::Int8GemmAmxTiles(w.view(), q.view, begin, end, y, stride, tiles(), walk());
  }

  void Check(int64_t rows, int64_t cols, int64_t group, int64_t tokens, uint32_t seed) {
    SCOPED_TRACE(::testing::Message() << "rows " << rows << " cols " << cols << " group " << group << " tokens "
                                      << tokens);
    const std::vector<float> weights = Random(rows * cols, seed);
    ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(weights.data(), rows, cols, group));
    const int64_t x_stride = cols + 1;
    std::vector<float> x = Random(tokens * x_stride, seed + 1, 2.0f);
    if (tokens > 2) std::fill_n(x.begin() + 2 * x_stride, cols, 0.0f);  // an all-zero token
    const QuantizedRows q = QuantizeRows(GetInt8Kernels(Isa::kScalar), w.layout(), x, tokens, x_stride);
    const int64_t blocks = w.layout().row_blocks(), groups = w.layout().groups();

    std::vector<int32_t> expected(tokens * blocks * 16 * groups), actual(expected.size(), -7);
    GetInt8Kernels(Isa::kScalar).group_sums(w.view(), q.view, 0, blocks, expected.data());
    GroupSums(w, q, 0, blocks, actual.data());
    ASSERT_EQ(actual, expected) << "int32 group sums differ";

    const int64_t y_stride = rows + 3;
    std::vector<float> vnni(tokens * y_stride, 12345.0f), amx(tokens * y_stride, 12345.0f);
    GetInt8Kernels(Isa::kAvx512).gemm(w.view(), q.view, 0, blocks, vnni.data(), y_stride);
    Gemm(w, q, 0, blocks, amx.data(), y_stride);
    // Bitwise, padding columns (never written: 12345) included.
    ASSERT_EQ(0, std::memcmp(amx.data(), vnni.data(), amx.size() * sizeof(float))) << "differs from AVX-512 VNNI";
  }
};

TEST_P(AmxTileKernel, SweepMatchesScalarAndVnni) {
  uint32_t seed = 1;
  for (int64_t group : {16, 32, 48, 64, 128}) {
    for (int64_t rows : {1, 16, 17, 33, 64, 100}) {
      for (int64_t cols : {group, 3 * group - 5, int64_t{260}}) {
        for (int64_t tokens : {1, 7, 15, 16, 17, 32, 33, 50}) {
          Check(rows, cols, group, tokens, seed++);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST_P(AmxTileKernel, SaturatedCodesAreExact) {
  // Every code ±127 over K = 4096: group sums reach ±127²·128 and the int32 tile accumulation must not wrap.
  const int64_t rows = 40, cols = 4096, group = 128, tokens = 35;
  std::vector<float> weights(rows * cols), x(tokens * cols);
  for (int64_t i = 0; i < rows * cols; ++i) weights[i] = ((i * 7) % 5 < 2) ? -3.0f : 3.0f;
  for (int64_t i = 0; i < tokens * cols; ++i) x[i] = ((i * 3) % 7 < 3) ? -0.5f : 0.5f;
  for (int64_t c = 0; c < cols; ++c) x[c] = 0.5f, weights[c] = 3.0f;  // row 0 and token 0 all positive
  ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(weights.data(), rows, cols, group));
  const QuantizedRows q = QuantizeRows(GetInt8Kernels(Isa::kScalar), w.layout(), x, tokens, cols);
  const int64_t blocks = w.layout().row_blocks(), groups = w.layout().groups();
  std::vector<int32_t> expected(tokens * blocks * 16 * groups), actual(expected.size());
  GetInt8Kernels(Isa::kScalar).group_sums(w.view(), q.view, 0, blocks, expected.data());
  GroupSums(w, q, 0, blocks, actual.data());
  EXPECT_EQ(actual, expected);
  EXPECT_EQ(actual[0], 127 * 127 * group);
  std::vector<float> y(tokens * rows);
  Gemm(w, q, 0, blocks, y.data(), rows);
  EXPECT_FLOAT_EQ(y[0], 3.0f * 0.5f * cols);
}

TEST_P(AmxTileKernel, RowBlockRangesWriteOnlyTheirRows) {
  const int64_t rows = 150, cols = 192, group = 64, tokens = 40;
  const std::vector<float> weights = Random(rows * cols, 5);
  ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(weights.data(), rows, cols, group));
  const QuantizedRows q =
      QuantizeRows(GetInt8Kernels(Isa::kScalar), w.layout(), Random(tokens * cols, 6), tokens, cols);
  std::vector<float> whole(tokens * rows), pieces(tokens * rows, NAN);
  Gemm(w, q, 0, w.layout().row_blocks(), whole.data(), rows);
  // Odd ranges leave a single-block pair at each end; together they cover every block once.
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 3}, {3, 4}, {4, 9}, {9, 10}}) {
    Gemm(w, q, begin, end, pieces.data(), rows);
  }
  EXPECT_EQ(pieces, whole);
}

// A call larger than one row group (kRowGroups): K = 16,384 makes a group 4 row blocks, so 7 blocks are a group of
// two pairs and one of a pair and a single block, each walked over two token pairs (33 tokens). The other walks
// cover the same call in one group.
TEST_P(AmxTileKernel, RowGroupsCoverLargeCalls) {
  const int64_t rows = 100, cols = 16384, group = 128, tokens = 33;
  ASSERT_EQ(internal::AmxRowGroupBlocks(cols), 4);
  const std::vector<float> weights = Random(rows * cols, 21);
  ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(weights.data(), rows, cols, group));
  const QuantizedRows q =
      QuantizeRows(GetInt8Kernels(Isa::kScalar), w.layout(), Random(tokens * cols, 22), tokens, cols);
  const int64_t blocks = w.layout().row_blocks(), groups = w.layout().groups();
  std::vector<int32_t> expected(tokens * blocks * 16 * groups), actual(expected.size(), -7);
  GetInt8Kernels(Isa::kScalar).group_sums(w.view(), q.view, 0, blocks, expected.data());
  GroupSums(w, q, 0, blocks, actual.data());
  ASSERT_EQ(actual, expected) << "int32 group sums differ";
  std::vector<float> vnni(tokens * rows), amx(tokens * rows, NAN);
  GetInt8Kernels(Isa::kAvx512).gemm(w.view(), q.view, 0, blocks, vnni.data(), rows);
  Gemm(w, q, 0, blocks, amx.data(), rows);
  EXPECT_EQ(0, std::memcmp(amx.data(), vnni.data(), amx.size() * sizeof(float))) << "differs from AVX-512 VNNI";
}

INSTANTIATE_TEST_SUITE_P(
    Tiles, AmxTileKernel,
    ::testing::Combine(::testing::Values(AmxTiles::kHardware, AmxTiles::kEmulated),
                       ::testing::Values(internal::AmxWalk::kTokenPairsOuter, internal::AmxWalk::kRowGroups,
                                         internal::AmxWalk::kZeroStart, internal::AmxWalk::kRowGroupsZeroStart)),
    [](const ::testing::TestParamInfo<std::tuple<AmxTiles, internal::AmxWalk>>& info) {
      return std::string(std::get<0>(info.param) == AmxTiles::kHardware ? "Hardware" : "Emulated") +
             std::string(internal::AmxWalkName(std::get<1>(info.param)));
    });

TEST(AmxWalks, RowGroupsHoldAMebibyteOfWeightsInWholePairs) {
  EXPECT_EQ(internal::AmxRowGroupBlocks(4096), 16);    // 16 × 16 rows × 4 KiB = 1 MiB
  EXPECT_EQ(internal::AmxRowGroupBlocks(12288), 4);    // 5.33 blocks, down to whole pairs
  EXPECT_EQ(internal::AmxRowGroupBlocks(1 << 20), 2);  // never below one pair
}

TEST(AmxLevel, TableUsesTilesFromTheThresholdOn) {
  if (!IsaSupported(Isa::kAmx)) GTEST_SKIP() << "no AMX here: " << AmxUnavailableReason();
  // Both sides of kAmxMinTokens give the same bits as VNNI (which is what makes the hand-off invisible).
  const int64_t rows = 64, cols = 512, group = 128;
  const std::vector<float> weights = Random(rows * cols, 11);
  ASSERT_OK_AND_ASSIGN(Int8Matrix w, QuantizeInt8(weights.data(), rows, cols, group));
  for (int64_t tokens : {kAmxMinTokens - 1, kAmxMinTokens, kAmxMinTokens + 9}) {
    const QuantizedRows q =
        QuantizeRows(GetInt8Kernels(Isa::kScalar), w.layout(), Random(tokens * cols, 12 + tokens), tokens, cols);
    std::vector<float> vnni(tokens * rows), amx(tokens * rows);
    GetInt8Kernels(Isa::kAvx512).gemm(w.view(), q.view, 0, w.layout().row_blocks(), vnni.data(), rows);
    GetInt8Kernels(Isa::kAmx).gemm(w.view(), q.view, 0, w.layout().row_blocks(), amx.data(), rows);
    EXPECT_EQ(amx, vnni) << tokens << " tokens";
  }
}

// The software tiles on a product small enough to check by hand, both signednesses of B, accumulating onto a
// loaded C; and the faults the hardware raises, as check failures that name the instruction.
TEST(AmxEmulator, ProductsOfKnownTiles) {
  internal::TileConfig config;
  config.Set(0, 2, 8);  // C: 2 rows × 2 int32
  config.Set(1, 2, 8);  // A: 2 rows × 8 signed bytes (k = 8)
  config.Set(2, 2, 8);  // B: 2 rows (k / 4) × 2 columns × 4 bytes
  const int8_t a[2][8] = {{1, 2, 3, 4, -1, -2, -3, -4}, {0, 0, 0, 0, 0, 0, 0, 1}};
  const uint8_t b[2][8] = {{1, 1, 1, 1, 2, 2, 2, 2}, {200, 0, 0, 0, 0, 0, 0, 255}};
  const int32_t start[2][2] = {{5, 7}, {-1, 0}};
  for (const bool b_signed : {false, true}) {
    internal::EmulatedTiles::Configure(config);
    internal::EmulatedTiles::Load<0>(start, 8);
    internal::EmulatedTiles::Load<1>(a, 8);
    internal::EmulatedTiles::Load<2>(b, 8);
    if (b_signed) {
      internal::EmulatedTiles::DotSigned<0, 1, 2>();
    } else {
      internal::EmulatedTiles::DotSignedUnsigned<0, 1, 2>();
    }
    int32_t c[2][16];  // row stride 64 bytes: only the first 2 int32 of each row are the tile's
    std::fill(&c[0][0], &c[0][0] + 32, 99);
    internal::EmulatedTiles::Store<0>(c, 64);
    internal::EmulatedTiles::Release();
    // Row 0: (1+2+3+4)·1 − 1·b[1][0] and (1+2+3+4)·2 − 4·b[1][7], with b[1][0] = 200 or −56, b[1][7] = 255 or −1.
    // Row 1: 1·b[1][7] in column 1 only.
    if (b_signed) {
      EXPECT_EQ(c[0][0], 5 + 10 + 56);
      EXPECT_EQ(c[0][1], 7 + 20 + 4);
      EXPECT_EQ(c[1][1], 0 - 1);
    } else {
      EXPECT_EQ(c[0][0], 5 + 10 - 200);
      EXPECT_EQ(c[0][1], 7 + 20 - 1020);
      EXPECT_EQ(c[1][1], 0 + 255);
    }
    EXPECT_EQ(c[1][0], -1);
    EXPECT_EQ(c[0][2], 99) << "tilestored wrote past the tile's 8 bytes per row";
  }
  EXPECT_FALSE(internal::amx_emulator::Configured());
}

// tdpbf16ps as the instruction reference's pseudo-code has it: the odd element of each pair first, every addition
// rounded to nearest even (2²⁴ + 1 is a tie that rounds to 2²⁴, twice; one rounding of both products would give
// 2²⁴ + 2), denormal bf16 inputs read as zero and denormal results flushed.
TEST(AmxEmulator, Bf16ProductsRoundEachAddition) {
  internal::TileConfig config;
  config.Set(0, 1, 8);                                     // C: 1 row × 2 fp32
  config.Set(1, 1, 4);                                     // A: 1 row × one bf16 pair
  config.Set(2, 1, 8);                                     // B: 1 pair row × 2 columns
  const uint16_t a[2] = {0x3f80, 0x3f80};                  // (1, 1)
  const uint16_t b[4] = {0x3f80, 0x3f80, 0x0001, 0x4000};  // column 0: (1, 1); column 1: (denormal, 2)
  const float start[2] = {0x1p24f, 1.0f};
  internal::EmulatedTiles::Configure(config);
  internal::EmulatedTiles::Load<0>(start, 8);
  internal::EmulatedTiles::Load<1>(a, 4);
  internal::EmulatedTiles::Load<2>(b, 8);
  internal::EmulatedTiles::DotBf16<0, 1, 2>();
  float c[2];
  internal::EmulatedTiles::Store<0>(c, 8);
  internal::EmulatedTiles::Release();
  EXPECT_EQ(c[0], 0x1p24f);
  EXPECT_EQ(c[1], 1.0f + 2.0f);                               // the denormal product is zero
  const uint16_t tiny[2] = {0x0080, 0x0080};                  // 2⁻¹²⁶: a normal bf16
  const uint16_t half[4] = {0x3f00, 0x3f00, 0x3f00, 0x3f00};  // 0.5: each product 2⁻¹²⁷, denormal in fp32
  const float zeros[2] = {0.0f, 0.0f};
  internal::EmulatedTiles::Configure(config);
  internal::EmulatedTiles::Load<0>(zeros, 8);
  internal::EmulatedTiles::Load<1>(tiny, 4);
  internal::EmulatedTiles::Load<2>(half, 8);
  internal::EmulatedTiles::DotBf16<0, 1, 2>();
  internal::EmulatedTiles::Store<0>(c, 8);
  internal::EmulatedTiles::Release();
  EXPECT_EQ(c[0], 0.0f) << "2⁻¹²⁷ is denormal after the first addition and flushed; so is the second";
}

TEST(AmxEmulatorDeathTest, FaultsAreChecks) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  internal::TileConfig config;
  config.Set(0, 16, 64);
  config.Set(1, 16, 32);
  config.Set(2, 8, 64);
  uint8_t buffer[16 * 64] = {};
  EXPECT_DEATH(internal::EmulatedTiles::Load<0>(buffer, 64), "tileloadd without a tile configuration");
  EXPECT_DEATH(
      {
        internal::EmulatedTiles::Configure(config);
        internal::EmulatedTiles::Load<3>(buffer, 64);
      },
      "tileloadd on tmm3, which the configuration leaves unused");
  const auto mismatched_product = [&] {
    internal::EmulatedTiles::Configure(config);
    internal::EmulatedTiles::DotSignedUnsigned<0, 2, 1>();  // A of 8 rows against C's 16
  };
  EXPECT_DEATH(mismatched_product(), "tdpbsud: C 16×64 bytes, A 8×64, B 16×32");
  internal::TileConfig too_large;
  too_large.Set(0, 17, 64);
  EXPECT_DEATH(internal::EmulatedTiles::Configure(too_large), "tmm0 of 17 rows");
}

TEST(AmxLevel, ParsesOrExplains) {
  const Result<Isa> parsed = ParseIsa("amx");
  if (IsaSupported(Isa::kAmx)) {
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, Isa::kAmx);
    EXPECT_EQ(BestIsa(), Isa::kAmx);  // the default where present (isa.cc)
  } else {
    EXPECT_ERROR_CONTAINS(parsed, AmxUnavailableReason());
  }
  EXPECT_ERROR_CONTAINS(ParseIsa("amx2"), "expected amx, avx512, avx2 or scalar");
}

}  // namespace
}  // namespace glint
