#include "base/aligned_buffer.h"

#include <sys/mman.h>

#include <cstdlib>

#include "base/status.h"

namespace glint {

void* AllocateZeroed(size_t bytes) {
  const size_t huge = AlignedBuffer::kHugePage;
  const size_t alignment = bytes >= huge ? huge : AlignedBuffer::kCacheLine;
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;  // aligned_alloc needs a multiple
  void* memory = std::aligned_alloc(alignment, rounded);
  if (memory == nullptr) return nullptr;
  // Advice only: without THP support the call fails harmlessly and the memory keeps 4 KiB pages.
  if (alignment == huge) ::madvise(memory, rounded, MADV_HUGEPAGE);
  std::memset(memory, 0, rounded);
  return memory;
}

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  data_ = static_cast<uint8_t*>(AllocateZeroed(bytes));
  GLINT_CHECK(data_ != nullptr) << "out of memory allocating " << bytes << " bytes";
}

void AlignedBuffer::Free() {
  std::free(data_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace glint
