// The image decoders (PNG, JPEG, WebP, GIF) on arbitrary bytes, then the preprocessing of whatever decodes:
// no crash, no leak, errors as Status — and the cost of each input within what its header allows (issue 37):
//   - the header reader (ReadImageHeader, what the server checks before decoding) and the decoder agree: a decoded
//     image has the header's size (or its transpose, after EXIF orientation), and a header over the limits is never
//     decoded;
//   - the peak heap during the decode stays under kBytesPerPixel × the header's pixels plus a constant (the
//     libraries' tables and libpng's ancillary-chunk cap), so the pixel cap bounds memory;
//   - the decode's CPU time stays under kMaxSecondsPerInput at the pixel cap used here.
// The limits are small so the fuzzer stays fast.
#include <sanitizer/allocator_interface.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "media/image.h"
#include "media/preprocess.h"

namespace {

constexpr int64_t kBytesPerPixel = 32;              // libjpeg's coefficients, the library's rows, RGB, the orientation
constexpr int64_t kFixedBytes = int64_t{24} << 20;  // tables, libpng's 8 MB chunk cap, libwebp's headers
constexpr double kMaxSecondsPerInput = 2.0;         // at 1 M pixels under ASan and UBSan

std::atomic<size_t> peak_heap{0};

void OnMalloc(const volatile void*, size_t) {
  const size_t now = __sanitizer_get_current_allocated_bytes();
  size_t seen = peak_heap.load(std::memory_order_relaxed);
  while (now > seen && !peak_heap.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}
void OnFree(const volatile void*) {}

double ThreadCpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

[[noreturn]] void Fail(const char* what, double value, double bound) {
  std::fprintf(stderr, "fuzz_image_decode: %s: %.3f, the bound is %.3f\n", what, value, bound);
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  __sanitizer_install_malloc_and_free_hooks(OnMalloc, OnFree);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  glint::media::DecodeLimits limits;
  limits.max_pixels = 1 << 20;
  limits.max_side = 4096;
  const auto header = glint::media::ReadImageHeader({data, size}, limits);
  const size_t heap_before = __sanitizer_get_current_allocated_bytes();
  peak_heap.store(heap_before);
  const double cpu_before = ThreadCpuSeconds();
  auto image = glint::media::DecodeImage({data, size}, limits);
  const double cpu = ThreadCpuSeconds() - cpu_before;
  const double heap_growth = static_cast<double>(peak_heap.load()) - static_cast<double>(heap_before);
  if (cpu > kMaxSecondsPerInput) Fail("decode CPU seconds", cpu, kMaxSecondsPerInput);
  if (!image.ok()) return 0;
  if (!header.ok()) Fail("decoded an image whose header was refused; header bytes", 0, 0);
  const int64_t w = image.value().width, h = image.value().height;
  const bool same = (w == header->width && h == header->height) || (w == header->height && h == header->width);
  if (!same) Fail("decoded size differs from the header's; decoded pixels", double(w * h), double(header->pixels()));
  const double heap_bound = static_cast<double>(kBytesPerPixel * header->pixels() + kFixedBytes);
  if (heap_growth > heap_bound) Fail("peak heap growth of the decode in bytes", heap_growth, heap_bound);
  glint::media::ProcessorConfig config;
  config.min_image_tokens = 1;
  config.max_image_tokens = 16;  // a canvas of at most 16 · 28² · 2 pixels: resize and patchify stay cheap
  auto processed = glint::media::PreprocessImage(image.value(), config);
  if (processed.ok() && processed.value().num_tokens() > config.max_image_tokens) __builtin_trap();
  return 0;
}
