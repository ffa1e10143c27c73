// Helpers shared by the unit tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "base/status.h"

namespace glint::testing {

// Absolute path of a file under tests/data.
std::string TestDataPath(const std::string& relative);
// A test model's directory: "glint-tiny" (the trained default, models/glint-tiny) or a golden fixture's name.
std::string ModelDir(const std::string& name);
// A fresh empty directory under the system temp dir, removed at process exit.
std::string MakeTempDir(const std::string& tag);

}  // namespace glint::testing

#define ASSERT_OK(expr)                                                    \
  do {                                                                     \
    const ::glint::Status glint_test_status_ = (expr);                     \
    ASSERT_TRUE(glint_test_status_.ok()) << glint_test_status_.ToString(); \
  } while (0)

#define EXPECT_OK(expr)                                                    \
  do {                                                                     \
    const ::glint::Status glint_test_status_ = (expr);                     \
    EXPECT_TRUE(glint_test_status_.ok()) << glint_test_status_.ToString(); \
  } while (0)

// ASSERT_OK_AND_ASSIGN(auto x, Foo());
#define ASSERT_OK_AND_ASSIGN(lhs, expr) ASSERT_OK_AND_ASSIGN_IMPL(GLINT_CONCAT(glint_test_result_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL(tmp, lhs, expr)   \
  auto tmp = (expr);                                \
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString(); \
  lhs = std::move(tmp).value()

// Expects a failed Status (or Result) whose message contains `substring`.
#define EXPECT_ERROR_CONTAINS(expr, substring)                                                       \
  do {                                                                                               \
    const auto& glint_test_value_ = (expr);                                                          \
    const ::glint::Status glint_test_status_ = ::glint::testing::StatusOf(glint_test_value_);        \
    EXPECT_FALSE(glint_test_status_.ok()) << "expected an error containing '" << (substring) << "'"; \
    EXPECT_NE(glint_test_status_.message().find(substring), std::string::npos)                       \
        << "message: " << glint_test_status_.message();                                              \
  } while (0)

namespace glint::testing {
inline Status StatusOf(const Status& status) { return status; }
template <typename T>
Status StatusOf(const Result<T>& result) {
  return result.status();
}
}  // namespace glint::testing

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "io/safetensors.h"

namespace glint::testing {

// The reference outputs of one golden fixture (tests/data/golden/<fixture>/expected.safetensors).
class GoldenOutputs {
 public:
  explicit GoldenOutputs(const std::string& fixture);
  bool Has(const std::string& name) const;
  std::vector<float> Floats(const std::string& name) const;  // F32 tensor, fails the test if absent
  std::vector<int32_t> Ints(const std::string& name) const;  // I32 tensor
  std::vector<int64_t> Shape(const std::string& name) const;
  // Token sequences of tokens.json.
  std::vector<std::vector<int32_t>> Tokens() const;
  // The first two sequences of tokens.json, the longer first (the engine tests build shared prefixes from them).
  std::pair<std::vector<int32_t>, std::vector<int32_t>> LongerAndShorterTokens() const;

 private:
  std::string dir_;
  std::unique_ptr<Checkpoint> file_;
};

// ‖a − b‖ / ‖b‖ (relative RMS error, the golden README's intermediate metric).
double RelativeRmsError(const std::vector<float>& a, const std::vector<float>& b);
// max |a − b|.
double MaxAbsError(const std::vector<float>& a, const std::vector<float>& b);
// Population standard deviation.
double StdDev(const std::vector<float>& values);

}  // namespace glint::testing
