#include "base/file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>

namespace glint {

Result<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open '", path, "': ", std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    int err = errno;
    ::close(fd);
    return IoError("cannot stat '", path, "': ", std::strerror(err));
  }
  if (S_ISDIR(info.st_mode)) {
    ::close(fd);
    return InvalidArgument("'", path, "' is a directory, expected a file");
  }
  if (static_cast<uint64_t>(info.st_size) > max_bytes) {
    ::close(fd);
    return InvalidArgument("'", path, "' is ", info.st_size, " bytes, more than the limit of ", max_bytes);
  }
  std::string contents(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::read(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      return IoError("cannot read '", path, "': ", n == 0 ? "unexpected end of file" : std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return contents;
}

Status WriteFileAtomic(const std::string& path, std::string_view contents) {
  std::string tmp = path + ".tmp";
  FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) return IoError("cannot create '", tmp, "': ", std::strerror(errno));
  bool ok = std::fwrite(contents.data(), 1, contents.size(), file) == contents.size();
  ok = (std::fflush(file) == 0) && ok;
  ok = (::fsync(::fileno(file)) == 0) && ok;
  ok = (std::fclose(file) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return IoError("cannot write '", tmp, "': ", std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return IoError("cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno));
  }
  return Status::Ok();
}

namespace {

// The mappings the SIGBUS handler guards. The handler reads only the atomics (async-signal-safe); registration and
// the paths (read outside the handler) take the mutex.
struct GuardedMapping {
  std::atomic<uintptr_t> begin{0};
  std::atomic<size_t> size{0};
  std::atomic<uint64_t> first_missing{UINT64_MAX};  // offset of the first faulting page, once damaged
  std::string path;
};
constexpr size_t kGuardedMappings = 256;  // more mappings at once than this are simply not guarded
GuardedMapping guarded[kGuardedMappings];
std::mutex guarded_mutex;
std::atomic<uint64_t> mapping_faults{0};
uintptr_t page_bytes = 4096;

void OnSigbus(int signal, siginfo_t* info, void*) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardedMapping& mapping : guarded) {
    const uintptr_t begin = mapping.begin.load(std::memory_order_acquire);
    const size_t size = mapping.size.load(std::memory_order_acquire);
    if (begin == 0 || address < begin || address >= begin + size) continue;
    // The file ended before this page: everything from here to the mapping's end is gone with it. Zero pages in
    // their place (one replacement, not one signal per page), the damage recorded for MappingFaults().
    const uintptr_t page = address / page_bytes * page_bytes;
    const uintptr_t end = (begin + size + page_bytes - 1) / page_bytes * page_bytes;
    if (::mmap(reinterpret_cast<void*>(page), end - page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
        MAP_FAILED) {
      break;
    }
    uint64_t missing = mapping.first_missing.load();
    while (page - begin < missing && !mapping.first_missing.compare_exchange_weak(missing, page - begin)) {
    }
    mapping_faults.fetch_add(1);
    return;
  }
  std::signal(signal, SIG_DFL);  // not a guarded mapping: the access faults again and the process dies as before
}

void InstallSigbusHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    page_bytes = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, nullptr);
  });
}

void Guard(const uint8_t* data, size_t size, const std::string& path) {
  if (data == nullptr) return;
  InstallSigbusHandler();
  std::lock_guard lock(guarded_mutex);
  for (GuardedMapping& mapping : guarded) {
    if (mapping.begin.load() != 0) continue;
    mapping.path = path;
    mapping.first_missing.store(UINT64_MAX);
    mapping.size.store(size, std::memory_order_release);
    mapping.begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
    return;
  }
}

void Unguard(const uint8_t* data) {
  if (data == nullptr) return;
  std::lock_guard lock(guarded_mutex);
  for (GuardedMapping& mapping : guarded) {
    if (mapping.begin.load() == reinterpret_cast<uintptr_t>(data)) mapping.begin.store(0, std::memory_order_release);
  }
}

}  // namespace

uint64_t MappingFaults() { return mapping_faults.load(); }

Status MappingDamage() {
  std::lock_guard lock(guarded_mutex);
  for (const GuardedMapping& mapping : guarded) {
    const uint64_t missing = mapping.first_missing.load();
    if (mapping.begin.load() == 0 || missing == UINT64_MAX) continue;
    return IoError("the file '", mapping.path, "' changed under the running process: it no longer holds byte ", missing,
                   " of the ", mapping.size.load(),
                   " it had when mapped (truncated, or rewritten in place); what was read from it is not the "
                   "model's weights: restart with an intact file");
  }
  return Status::Ok();
}

Result<MappedFile> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open '", path, "': ", std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    int err = errno;
    ::close(fd);
    return IoError("cannot stat '", path, "': ", std::strerror(err));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return InvalidArgument("'", path, "' is not a regular file");
  }
  MappedFile mapped;
  mapped.path_ = path;
  mapped.size_ = static_cast<size_t>(info.st_size);
  if (mapped.size_ > 0) {
    void* address = ::mmap(nullptr, mapped.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return IoError("cannot mmap '", path, "': ", std::strerror(err));
    }
    // 2 MB pages where the kernel can: with this advice a fault reads ahead into 2 MB page-cache folios (Linux
    // ≥ 6.x on filesystems with large folios, e.g. ext4, xfs) and maps them with one page-table entry each. The
    // routed experts' products stream megabytes per row block; on 4 KB pages their in-prefill efficiency fell to
    // ≈ 0.7× the dense products', on 2 MB pages ≈ 0.95× (docs/performance.md "Weights on 2 MB pages"). Pages already
    // cached as small folios stay small. Advice only: a kernel without THP refuses it, and nothing changes.
    ::madvise(address, mapped.size_, MADV_HUGEPAGE);
    mapped.data_ = static_cast<const uint8_t*>(address);
    Guard(mapped.data_, mapped.size_, path);
  }
  ::close(fd);  // the mapping keeps the file alive
  return mapped;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Unguard(data_);
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() {
  Unguard(data_);
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Result<MappedFile::PageSpan> MappedFile::PagesUnder(std::span<const uint8_t> range, std::string_view verb) const {
  if (range.data() < data_ || range.data() + range.size() > data_ + size_) {
    return InvalidArgument("cannot ", verb, " ", range.size(), " bytes of the mapping of '", path_,
                           "': they lie outside it");
  }
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t offset = static_cast<size_t>(range.data() - data_);  // data_ is page-aligned
  // Rounded up: the mapping covers whole pages, so its last partial page is still inside it.
  return PageSpan{offset / page * page, (offset + range.size() + page - 1) / page * page};
}

Status MappedFile::Release(std::span<const uint8_t> range) const {
  if (range.empty()) return Status::Ok();
  GLINT_ASSIGN_OR_RETURN(const PageSpan pages, PagesUnder(range, "release"));
  if (::madvise(const_cast<uint8_t*>(data_ + pages.begin), pages.end - pages.begin, MADV_DONTNEED) != 0) {
    return IoError("cannot release pages of the mapping of '", path_, "': ", std::strerror(errno));
  }
  return Status::Ok();
}

Status MappedFile::Uncache(std::span<const uint8_t> range) const {
  if (range.empty()) return Status::Ok();
  GLINT_ASSIGN_OR_RETURN(const PageSpan pages, PagesUnder(range, "drop from the page cache"));
  // The mapping closed its descriptor (Open): the path names the file unless it was replaced since, and then the
  // advice falls on the new file's cache, which changes nothing but its speed.
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open '", path_, "' to drop its pages from the page cache: ", std::strerror(errno));
  const int err = ::posix_fadvise(fd, static_cast<off_t>(pages.begin), static_cast<off_t>(pages.end - pages.begin),
                                  POSIX_FADV_DONTNEED);
  ::close(fd);
  if (err != 0) return IoError("cannot drop pages of '", path_, "' from the page cache: ", std::strerror(err));
  return Status::Ok();
}

MappedFile::Residency MappedFile::Resident() const {
  Residency residency;
  if (data_ == nullptr) return residency;
  // /proc/self/smaps: a header line "begin-end perms offset dev inode path" per mapping, then "Key: N kB" lines.
  // The mapping may have been split (Release, a SIGBUS replacement), so every entry inside it counts.
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data_), end = (begin + size_ + page - 1) / page * page;
  bool inside = false;
  std::string line;
  while (std::getline(smaps, line)) {
    unsigned long long from = 0, to = 0;
    char dash = 0;
    if (std::sscanf(line.c_str(), "%llx%c%llx", &from, &dash, &to) == 3 && dash == '-') {
      inside = from >= begin && to <= end;
      continue;
    }
    if (!inside) continue;
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "Rss: %llu kB", &kb) == 1) residency.resident_bytes += kb << 10;
    if (std::sscanf(line.c_str(), "FilePmdMapped: %llu kB", &kb) == 1) residency.huge_page_bytes += kb << 10;
  }
  return residency;
}

bool PathExists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

}  // namespace glint
