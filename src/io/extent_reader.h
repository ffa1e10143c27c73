// Reads 4 KiB-aligned extents of a container file (io/weight_container.h) with O_DIRECT, for the routed-expert cache
// (experts/expert_store.h): the page cache must not quietly hold what the cache budget leaves on disk.
//
// Every read is checked: a short read, an I/O error, or a file that has changed since it was opened (size, mtime or
// inode of the path differ) is an error naming the file and the offset, never a partly filled buffer taken as data.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace glint {

// What the expert cache reads through; tests substitute a fault-injecting reader.
class ExtentReader {
 public:
  virtual ~ExtentReader() = default;
  // Reads exactly out.size() bytes at `offset` into `out` (offset, size and address 4 KiB multiples). Thread-safe.
  virtual Status Read(uint64_t offset, std::span<uint8_t> out) = 0;
  // True when the reads bypass the page cache (O_DIRECT).
  virtual bool direct() const = 0;
};

class DirectFileReader final : public ExtentReader {
 public:
  // Opens `path` with O_DIRECT; a filesystem that refuses O_DIRECT (tmpfs) is an error unless `allow_buffered`, in
  // which case reads go through the page cache and direct() says so.
  static Result<std::unique_ptr<DirectFileReader>> Open(const std::string& path, bool allow_buffered = false);
  ~DirectFileReader() override;

  Status Read(uint64_t offset, std::span<uint8_t> out) override;
  bool direct() const override { return direct_; }

  // For readers that issue their own reads on this descriptor (UringExtentReader): the checks Read makes.
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  Status CheckAligned(uint64_t offset, std::span<const uint8_t> out) const;
  // Error if the file's size, mtime or inode differ from those at Open.
  Status CheckUnchanged() const;

 private:
  DirectFileReader() = default;

  std::string path_;
  int fd_ = -1;
  bool direct_ = true;
  // The file as opened: a change afterwards means the mapped tensors and the extents may disagree.
  off_t size_ = 0;
  int64_t mtime_ns_ = 0;
  ino_t inode_ = 0;
};

// Many extent reads in flight from one thread through io_uring (Debian's liburing): reads are submitted and
// their completions reaped in batches, instead of one blocking pread per thread. Same checks and messages as
// DirectFileReader (alignment, short reads, a changed file). Not thread-safe: one thread submits and reaps.
class UringExtentReader {
 public:
  // `depth`: the most reads in flight (the ring's size).
  static Result<std::unique_ptr<UringExtentReader>> Open(std::unique_ptr<DirectFileReader> file, int depth);
  ~UringExtentReader();

  struct Completion {
    uint64_t tag = 0;
    Status status;
  };
  int depth() const { return depth_; }
  int64_t in_flight() const { return in_flight_; }
  // Bytes the ring maps into the process (submission and completion rings, the submission entries): what it adds
  // to the resident set, counted in the expert cache's budget.
  uint64_t ring_bytes() const;
  // Queues a read of out.size() bytes at `offset` (in_flight() < depth()); sent with the next Wait.
  Status Submit(uint64_t tag, uint64_t offset, std::span<uint8_t> out);
  // Sends the queued reads, then waits until at least one read in flight completes (none in flight: returns at
  // once) and appends every completed one. An error return is the ring's, not a read's.
  Status Wait(std::vector<Completion>& done);
  bool direct() const { return file_->direct(); }

 private:
  UringExtentReader() = default;
  struct Pending {
    uint64_t offset = 0;
    std::span<uint8_t> out;
  };
  std::unique_ptr<DirectFileReader> file_;
  struct Ring;
  std::unique_ptr<Ring> ring_;
  int depth_ = 0;
  int64_t in_flight_ = 0;
  std::vector<Pending> pending_;  // [depth] by ring slot
  std::vector<uint64_t> tags_;    // [depth] the caller's tag of each ring slot
  std::vector<int> free_;         // ring slots not in flight
};

// Parses a byte size: a whole number with an optional binary suffix K, M, G or T (KiB … TiB; "B" and "iB" accepted
// after it, any case): "64K", "512M", "24G", "1.5G" is refused (whole numbers only). `what` names the flag in errors.
Result<uint64_t> ParseByteSize(const std::string& text, const std::string& what);

}  // namespace glint
