#include "test_util.h"

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

namespace glint::testing {

std::string TestDataPath(const std::string& relative) { return std::string(GLINT_TEST_DATA_DIR) + "/" + relative; }

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
