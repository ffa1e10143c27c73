#include "base/aligned_buffer.h"

#include <sys/mman.h>

#include <cstdlib>

#include "base/status.h"

namespace glint {

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  const size_t alignment = bytes >= kHugePage ? kHugePage : kCacheLine;
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;  // aligned_alloc needs a multiple
  data_ = static_cast<uint8_t*>(std::aligned_alloc(alignment, rounded));
  GLINT_CHECK(data_ != nullptr) << "out of memory allocating " << bytes << " bytes";
  // Advice only: without THP support the call fails harmlessly and the buffer keeps 4 KiB pages.
  if (alignment == kHugePage) ::madvise(data_, rounded, MADV_HUGEPAGE);
  std::memset(data_, 0, rounded);
}

void AlignedBuffer::Free() {
  std::free(data_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace glint
