// Heap memory with a stated alignment, for packed weights and kernel scratch.
//
// 64-byte alignment matches one AVX-512 register and one cache line, so packed weight blocks never straddle two
// lines. Large buffers (≥ 2 MiB) are aligned to 2 MiB and advised as transparent huge pages: a decode step streams
// every active weight byte once, and with 4 KiB pages that is one TLB miss per 4 KiB read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

namespace glint {

// `bytes` zero-initialised bytes, 64-byte aligned; from 2 MiB up 2 MiB-aligned and advised as transparent huge pages
// (the rounding to a whole alignment is allocated too). Null when the allocation fails; free with std::free. The
// allocation behind AlignedBuffer and the cache pools (memory/item_arena.h).
void* AllocateZeroed(size_t bytes);

class AlignedBuffer {
 public:
  static constexpr size_t kCacheLine = 64;
  static constexpr size_t kHugePage = size_t{2} << 20;

  AlignedBuffer() = default;
  // `bytes` zero-initialised bytes. Aborts on allocation failure (an out-of-memory here is not recoverable).
  explicit AlignedBuffer(size_t bytes);
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      Free();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { Free(); }

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  template <typename T>
  T* As() {
    return reinterpret_cast<T*>(data_);
  }
  template <typename T>
  const T* As() const {
    return reinterpret_cast<const T*>(data_);
  }

 private:
  void Free();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace glint
