#include "test_util.h"

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

namespace glint::testing {

std::string TestDataPath(const std::string& relative) { return std::string(GLINT_TEST_DATA_DIR) + "/" + relative; }

std::string ModelDir(const std::string& name) {
  return name == "glint-tiny" ? TestDataPath("../../models/glint-tiny") : TestDataPath("golden/" + name);
}

namespace {
std::vector<std::string>& TempDirs() {
  static auto* dirs = new std::vector<std::string>();  // never destroyed: the atexit hook reads it
  return *dirs;
}
void RemoveTempDirs() {
  for (const auto& dir : TempDirs()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
}
}  // namespace

std::string MakeTempDir(const std::string& tag) {
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(RemoveTempDirs); });
  std::string pattern = (std::filesystem::temp_directory_path() / ("glint-" + tag + "-XXXXXX")).string();
  char* made = ::mkdtemp(pattern.data());
  if (made == nullptr) return {};
  TempDirs().push_back(made);
  return made;
}

}  // namespace glint::testing

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/file.h"

namespace glint::testing {

GoldenOutputs::GoldenOutputs(const std::string& fixture) : dir_(TestDataPath("golden/" + fixture)) {
  auto file = Checkpoint::Open(dir_ + "/expected.safetensors");
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (file.ok()) file_ = std::make_unique<Checkpoint>(std::move(file).value());
}

bool GoldenOutputs::Has(const std::string& name) const { return file_ && file_->Find(name) != nullptr; }

std::vector<float> GoldenOutputs::Floats(const std::string& name) const {
  auto view = file_->View(name);
  EXPECT_TRUE(view.ok()) << view.status().ToString();
  if (!view.ok() || view->dtype() != DType::kF32) return {};
  std::vector<float> out(view->bytes.size() / 4);
  std::memcpy(out.data(), view->bytes.data(), view->bytes.size());
  return out;
}

std::vector<int32_t> GoldenOutputs::Ints(const std::string& name) const {
  auto view = file_->View(name);
  EXPECT_TRUE(view.ok()) << view.status().ToString();
  if (!view.ok() || view->dtype() != DType::kI32) return {};
  std::vector<int32_t> out(view->bytes.size() / 4);
  std::memcpy(out.data(), view->bytes.data(), view->bytes.size());
  return out;
}

std::vector<int64_t> GoldenOutputs::Shape(const std::string& name) const {
  const TensorInfo* info = file_->Find(name);
  return info ? info->shape : std::vector<int64_t>{};
}

std::vector<std::vector<int32_t>> GoldenOutputs::Tokens() const {
  auto text = ReadFile(dir_ + "/tokens.json");
  EXPECT_TRUE(text.ok());
  return nlohmann::json::parse(*text).get<std::vector<std::vector<int32_t>>>();
}

std::pair<std::vector<int32_t>, std::vector<int32_t>> GoldenOutputs::LongerAndShorterTokens() const {
  std::vector<std::vector<int32_t>> sequences = Tokens();
  EXPECT_GE(sequences.size(), 2u) << dir_ << "/tokens.json has fewer than two sequences";
  sequences.resize(2);
  if (sequences[0].size() < sequences[1].size()) std::swap(sequences[0], sequences[1]);
  return {std::move(sequences[0]), std::move(sequences[1])};
}

double RelativeRmsError(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

double MaxAbsError(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

double StdDev(const std::vector<float>& values) {
  double mean = 0;
  for (float v : values) mean += v;
  mean /= values.size();
  double variance = 0;
  for (float v : values) variance += (v - mean) * (v - mean);
  return std::sqrt(variance / values.size());
}

}  // namespace glint::testing
