// Told about every byte the engine copies or clears in its cache pools outside a forward pass, so that another
// copy of those pools can be kept identical (a multi-rank run: docs/distributed.md "The batch plan"). The cache
// manager and the engine call it; a forward pass writes the pools itself, on every rank alike.
#pragma once

#include <cstddef>
#include <cstdint>

namespace glint {

class MemoryMirror {
 public:
  virtual ~MemoryMirror() = default;
  // `bytes` were copied from `source` to `destination` (both inside the pools).
  virtual void OnCopy(std::byte* destination, const std::byte* source, int64_t bytes) = 0;
  // `bytes` at `destination` were set to zero.
  virtual void OnZero(std::byte* destination, int64_t bytes) = 0;
};

}  // namespace glint
