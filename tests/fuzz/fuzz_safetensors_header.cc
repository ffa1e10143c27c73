// libFuzzer target: ParseSafetensorsHeader must return an error or a header whose every tensor lies inside the
// data section, for any input. Crashes, sanitizer reports or hangs are failures.
#include <cstdint>
#include <cstdlib>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto header = glint::ParseSafetensorsHeader(std::span<const uint8_t>(data, size));
  if (!header.ok()) return 0;
  for (const auto& tensor : header->tensors) {
    if (header->data_offset + tensor.data_end > size) std::abort();
    if (tensor.NumBytes() != static_cast<uint64_t>(tensor.NumElements()) * glint::DTypeSize(tensor.dtype)) std::abort();
  }
  return 0;
}
