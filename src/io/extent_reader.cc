#include "io/extent_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>

#include "io/weight_container.h"

namespace glint {
namespace {

int64_t MtimeNs(const struct stat& st) { return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec; }

}  // namespace

Result<std::unique_ptr<DirectFileReader>> DirectFileReader::Open(const std::string& path, bool allow_buffered) {
  std::unique_ptr<DirectFileReader> reader(new DirectFileReader());
  reader->path_ = path;
  reader->fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (reader->fd_ < 0 && errno == EINVAL) {
    if (!allow_buffered) {
      return FailedPrecondition("the filesystem of '", path, "' does not support O_DIRECT reads (tmpfs?); put the ",
                                "container on a disk so that --expert-memory bounds the memory it uses");
    }
    reader->direct_ = false;
    reader->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (reader->fd_ < 0) return IoError("cannot open '", path, "': ", std::strerror(errno));
  struct stat st;
  if (::fstat(reader->fd_, &st) != 0) return IoError("cannot stat '", path, "': ", std::strerror(errno));
  reader->size_ = st.st_size;
  reader->mtime_ns_ = MtimeNs(st);
  reader->inode_ = st.st_ino;
  return reader;
}

DirectFileReader::~DirectFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status DirectFileReader::CheckUnchanged() const {
  struct stat open_file, at_path;
  if (::fstat(fd_, &open_file) != 0) return IoError("cannot stat '", path_, "': ", std::strerror(errno));
  const bool replaced = ::stat(path_.c_str(), &at_path) != 0 || at_path.st_ino != inode_;
  if (open_file.st_size != size_ || MtimeNs(open_file) != mtime_ns_ || replaced) {
    return DataLoss("the container '", path_, "' changed while in use (",
                    replaced ? "replaced or removed" : "rewritten", "; size ", size_, " → ", open_file.st_size,
                    "): restart glint on the new container");
  }
  return Status::Ok();
}

Status DirectFileReader::CheckAligned(uint64_t offset, std::span<const uint8_t> out) const {
  if (offset % kExtentAlignment != 0 || out.size() % kExtentAlignment != 0 ||
      reinterpret_cast<uintptr_t>(out.data()) % kExtentAlignment != 0) {
    return InternalError("an O_DIRECT read of '", path_, "' needs 4 KiB-aligned offset, size and buffer");
  }
  return Status::Ok();
}

Status DirectFileReader::Read(uint64_t offset, std::span<uint8_t> out) {
  GLINT_RETURN_IF_ERROR(CheckAligned(offset, out));
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t got = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return IoError("reading ", out.size(), " bytes at offset ", offset, " of '", path_, "': ", std::strerror(errno));
    }
    if (got == 0) {
      GLINT_RETURN_IF_ERROR(CheckUnchanged());
      return IoError("short read of '", path_, "': ", done, " of ", out.size(), " bytes at offset ", offset,
                     " (the file ends early)");
    }
    done += static_cast<size_t>(got);
  }
  return CheckUnchanged();
}

Result<uint64_t> ParseByteSize(const std::string& text, const std::string& what) {
  auto fail = [&] {
    return InvalidArgument(what, " '", text, "' is not a size: expected a whole number with an optional K, M, G or T ",
                           "suffix (binary units), e.g. 64K, 512M, 24G");
  };
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 19) return fail();
  const uint64_t number = std::stoull(text.substr(0, digits));
  std::string suffix;
  for (char ch : text.substr(digits)) suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  int shift = 0;
  if (!suffix.empty() && suffix != "B") {
    const std::string unit = suffix.substr(0, 1), rest = suffix.substr(1);
    if (rest != "" && rest != "B" && rest != "IB") return fail();
    if (unit == "K")
      shift = 10;
    else if (unit == "M")
      shift = 20;
    else if (unit == "G")
      shift = 30;
    else if (unit == "T")
      shift = 40;
    else
      return fail();
  }
  if (number > (std::numeric_limits<uint64_t>::max() >> shift))
    return InvalidArgument(what, " '", text, "' is too large");
  return number << shift;
}

}  // namespace glint
