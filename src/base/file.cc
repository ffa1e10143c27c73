#include "base/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

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
    mapped.data_ = static_cast<const uint8_t*>(address);
  }
  ::close(fd);  // the mapping keeps the file alive
  return mapped;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Status MappedFile::Release(std::span<const uint8_t> range) const {
  if (range.empty()) return Status::Ok();
  if (range.data() < data_ || range.data() + range.size() > data_ + size_) {
    return InvalidArgument("cannot release ", range.size(), " bytes of the mapping of '", path_,
                           "': they lie outside it");
  }
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(range.data()) / page * page;  // data_ is page-aligned
  // Rounded up: the mapping covers whole pages, so its last partial page is still inside it.
  const uintptr_t end = (reinterpret_cast<uintptr_t>(range.data() + range.size()) + page - 1) / page * page;
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) != 0) {
    return IoError("cannot release pages of the mapping of '", path_, "': ", std::strerror(errno));
  }
  return Status::Ok();
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
