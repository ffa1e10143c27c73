#include "server/batch_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace glint::server {
namespace {

constexpr const char* kLockName = ".lock";

std::string ErrnoText() { return std::strerror(errno); }

// Writes all of `data` from the current offset, retrying short writes and EINTR.
bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    data.remove_prefix(static_cast<size_t>(written));
  }
  return true;
}

// Creates `path` and its missing parents, the ones created with mode 0700.
Status MakeDirectories(const std::string& path) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return FailedPrecondition("--batch-dir: cannot create ", prefix, ": ", ErrnoText());
    }
    if (slash == std::string::npos) return Status::Ok();
  }
}

}  // namespace

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

int FileDescriptor::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

bool IsPlainName(std::string_view name) {
  if (name.empty() || name.size() > 128 || name.front() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
}

std::string DefaultBatchDirectory() {
  if (const char* data = std::getenv("XDG_DATA_HOME"); data != nullptr && data[0] == '/') {
    return std::string(data) + "/glint/batches";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') {
    return std::string(home) + "/.local/share/glint/batches";
  }
  return "";
}

Result<std::string> AppendOnlyFile::ReadAll(size_t max_bytes) const {
  struct stat info {};
  if (::fstat(fd_.get(), &info) != 0) return FailedPrecondition(name_, ": ", ErrnoText());
  if (static_cast<uint64_t>(info.st_size) > max_bytes) {
    return FailedPrecondition(name_, " is ", info.st_size, " bytes; at most ", max_bytes, " are read");
  }
  std::string content(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t got = ::pread(fd_.get(), content.data() + done, content.size() - done, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return FailedPrecondition("reading ", name_, ": ", got == 0 ? "it shrank" : ErrnoText());
    done += static_cast<size_t>(got);
  }
  return content;
}

Status AppendOnlyFile::TruncateTo(int64_t bytes) {
  if (::ftruncate(fd_.get(), bytes) != 0 || ::fdatasync(fd_.get()) != 0) {
    return FailedPrecondition("truncating ", name_, ": ", ErrnoText());
  }
  return Status::Ok();
}

Status AppendOnlyFile::Append(std::string_view record) {
  const off_t before = ::lseek(fd_.get(), 0, SEEK_END);
  if (before < 0) return FailedPrecondition("writing ", name_, ": ", ErrnoText());
  if (WriteAll(fd_.get(), record) && ::fdatasync(fd_.get()) == 0) return Status::Ok();
  const std::string error = ErrnoText();
  if (::ftruncate(fd_.get(), before) != 0) {
    // The torn record stays; whoever reads the file next drops it (it has no end of line).
  }
  return FailedPrecondition("writing ", name_, ": ", error);
}

Result<std::unique_ptr<BatchDirectory>> BatchDirectory::Open(const std::string& path, bool create) {
  if (path.empty()) return InvalidArgument("--batch-dir is empty (and neither XDG_DATA_HOME nor HOME is set)");
  if (create) GLINT_RETURN_IF_ERROR(MakeDirectories(path));
  FileDescriptor dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (dir.get() < 0) {
    if (errno == ENOENT) return NotFound("--batch-dir ", path, " does not exist");
    return FailedPrecondition("--batch-dir ", path,
                              ": cannot open it as a directory (symlinks are refused): ", ErrnoText());
  }
  FileDescriptor lock(::openat(dir.get(), kLockName, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (lock.get() < 0) return FailedPrecondition("--batch-dir ", path, ": cannot create its lock file: ", ErrnoText());
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    return FailedPrecondition("--batch-dir ", path, " is in use by another glint process; give each its own");
  }
  return std::unique_ptr<BatchDirectory>(new BatchDirectory(path, std::move(dir), std::move(lock)));
}

BatchDirectory::~BatchDirectory() = default;

Status BatchDirectory::WriteAtomic(const std::string& name, std::string_view content) const {
  GLINT_CHECK(IsPlainName(name)) << name;
  const std::string temp = ".tmp-" + name;
  ::unlinkat(dir_.get(), temp.c_str(), 0);  // a temporary a crash left behind
  FileDescriptor fd(::openat(dir_.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  bool ok = fd.get() >= 0 && WriteAll(fd.get(), content) && ::fsync(fd.get()) == 0;
  std::string error = ok ? "" : ErrnoText();
  if (ok && ::close(fd.release()) != 0) ok = false, error = ErrnoText();
  // renameat replaces whatever holds the final name (a planted symlink included) without following it.
  if (ok && ::renameat(dir_.get(), temp.c_str(), dir_.get(), name.c_str()) != 0) ok = false, error = ErrnoText();
  if (ok && ::fsync(dir_.get()) != 0) ok = false, error = ErrnoText();
  if (!ok) {
    ::unlinkat(dir_.get(), temp.c_str(), 0);
    return FailedPrecondition("writing ", path_, "/", name, ": ", error);
  }
  return Status::Ok();
}

Result<std::string> BatchDirectory::Read(const std::string& name, size_t max_bytes) const {
  GLINT_CHECK(IsPlainName(name)) << name;
  FileDescriptor fd(::openat(dir_.get(), name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (fd.get() < 0) {
    if (errno == ENOENT) return NotFound(path_, "/", name, " does not exist");
    return FailedPrecondition("reading ", path_, "/", name, ": ", ErrnoText());
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
    return FailedPrecondition(path_, "/", name, " is not a regular file");
  }
  AppendOnlyFile file(std::move(fd), path_ + "/" + name);
  return file.ReadAll(max_bytes);
}

Status BatchDirectory::Remove(const std::string& name) const {
  GLINT_CHECK(IsPlainName(name)) << name;
  if (::unlinkat(dir_.get(), name.c_str(), 0) != 0 && errno != ENOENT) {
    return FailedPrecondition("removing ", path_, "/", name, ": ", ErrnoText());
  }
  return Status::Ok();
}

Result<std::vector<std::string>> BatchDirectory::List(std::string_view suffix) const {
  const int fd = ::openat(dir_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* stream = fd < 0 ? nullptr : ::fdopendir(fd);
  if (stream == nullptr) {
    if (fd >= 0) ::close(fd);
    return FailedPrecondition("listing ", path_, ": ", ErrnoText());
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(stream)) {
    const std::string_view name = entry->d_name;
    if (IsPlainName(name) && name.ends_with(suffix) && (entry->d_type == DT_REG || entry->d_type == DT_UNKNOWN))
      names.emplace_back(name);
  }
  ::closedir(stream);
  std::sort(names.begin(), names.end());
  return names;
}

Result<AppendOnlyFile> BatchDirectory::OpenAppend(const std::string& name) const {
  GLINT_CHECK(IsPlainName(name)) << name;
  FileDescriptor fd(::openat(dir_.get(), name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (fd.get() < 0) return FailedPrecondition("opening ", path_, "/", name, ": ", ErrnoText());
  return AppendOnlyFile(std::move(fd), path_ + "/" + name);
}

}  // namespace glint::server
