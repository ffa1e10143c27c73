// libFuzzer target: ContainerFile::Open (the `glint convert` container, mapped at load) must return an error or a
// container whose every blob lies inside the file, for any file contents. Each input is written to a temporary
// file and mapped as the engine maps it; every blob's first and last byte is read, so a blob past the end of the
// mapping is a crash (SIGBUS/ASan) and a failure.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "io/weight_container.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = [] {
    char name[] = "/tmp/glint_fuzz_container_XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) std::abort();
    close(fd);
    return std::string(name);
  }();
  static const bool cleanup_registered = std::atexit([] { unlink(path.c_str()); }) == 0;
  (void)cleanup_registered;
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, file) != size) std::abort();
  std::fclose(file);
  auto container = glint::ContainerFile::Open(path);
  if (!container.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const glint::ContainerEntry& entry : container->entries()) {
    for (const auto& blob : entry.blobs) {
      if (blob.size() > container->size()) std::abort();
      if (blob.empty()) continue;
      sink = sink ^ blob.front() ^ blob.back();
    }
  }
  return 0;
}
