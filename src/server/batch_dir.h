// The directory batch jobs keep their files in (--batch-dir, docs/batch.md "Storage"), used only through a
// descriptor of it: every file is opened with openat(O_NOFOLLOW) beneath it, so a symlink planted in it cannot
// send a write elsewhere, and names are checked to be plain (no '/', no "..", no leading '.'). Whole files are
// written atomically (a temporary, fsync, renameat, fsync of the directory): a crash leaves the old file or the new,
// never half of one. One process holds the directory (an flock, released when the process dies, even by SIGKILL).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace glint::server {

// An open file descriptor, closed on destruction.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();
  int get() const { return fd_; }
  int release();

 private:
  int fd_ = -1;
};

// A file that only grows by whole records: each Append writes the record and fdatasyncs before it returns, so a
// record that Append reported written survives a crash. A crash during an Append may leave a torn last record:
// ReadAll returns the content, the caller finds where the last whole record ends and TruncateTo cuts the rest.
class AppendOnlyFile {
 public:
  explicit AppendOnlyFile(FileDescriptor fd, std::string name) : fd_(std::move(fd)), name_(std::move(name)) {}
  // Up to `max_bytes` (an error beyond).
  Result<std::string> ReadAll(size_t max_bytes) const;
  Status TruncateTo(int64_t bytes);
  // Writes all of `record` at the end and syncs it. An error (a full disk: ENOSPC) names the file and the cause;
  // the file is cut back to where it was, so no torn record stays behind.
  Status Append(std::string_view record);
  const std::string& name() const { return name_; }

 private:
  FileDescriptor fd_;
  std::string name_;
};

class BatchDirectory {
 public:
  // Opens `path`, creating it and missing parents (mode 0700) when `create`; locks it. Errors: not a directory, a
  // symlink, another process holds it, it does not exist and `create` is false (NotFound).
  static Result<std::unique_ptr<BatchDirectory>> Open(const std::string& path, bool create);
  ~BatchDirectory();
  BatchDirectory(const BatchDirectory&) = delete;
  BatchDirectory& operator=(const BatchDirectory&) = delete;

  const std::string& path() const { return path_; }
  // Whole files beneath the directory. `name` must be a plain name (CheckName).
  Status WriteAtomic(const std::string& name, std::string_view content) const;
  Result<std::string> Read(const std::string& name, size_t max_bytes) const;  // NotFound when absent
  Status Remove(const std::string& name) const;                               // absent: Ok
  // Names of regular files ending in `suffix`, sorted.
  Result<std::vector<std::string>> List(std::string_view suffix) const;
  // Opens (creating) a file for appending.
  Result<AppendOnlyFile> OpenAppend(const std::string& name) const;

 private:
  BatchDirectory(std::string path, FileDescriptor dir, FileDescriptor lock)
      : path_(std::move(path)), dir_(std::move(dir)), lock_(std::move(lock)) {}
  std::string path_;
  FileDescriptor dir_;
  FileDescriptor lock_;
};

// A name fit for BatchDirectory: 1 to 128 of [A-Za-z0-9_.-], not starting with '.'.
bool IsPlainName(std::string_view name);

// --batch-dir's default: $XDG_DATA_HOME/glint/batches, else $HOME/.local/share/glint/batches; "" when neither
// variable is set (the flag is then required for batch jobs).
std::string DefaultBatchDirectory();

}  // namespace glint::server
