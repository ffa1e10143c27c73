// Whole-file reads and read-only memory maps. Both report the path and the OS error on failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace glint {

// Reads a whole file. `max_bytes` bounds what a config or tokenizer file may be, so a wrong path to a
// multi-gigabyte file is an error instead of an allocation.
Result<std::string> ReadFile(const std::string& path, size_t max_bytes = size_t{1} << 30);

// Writes atomically: to `path.tmp`, then rename, so a crash never leaves a half-written file under `path`.
Status WriteFileAtomic(const std::string& path, std::string_view contents);

// A read-only private mapping of a whole file. Movable, not copyable; unmaps on destruction.
//
// A file that shrinks after it is mapped (truncated, or rewritten in place by `cp`) would turn the next read of a
// page past its new end into SIGBUS, killing the process with no word said (issue 37). Every MappedFile is
// registered with a SIGBUS handler (installed at the first Open; faults outside the mappings keep the default
// action): a fault inside a mapping replaces the rest of that mapping, from the faulting page on, with zero pages,
// records the damage and lets the read go on. The reader gets zeros, not the file: whoever computes with the
// mapping must check MappingFaults() after reading and discard what it computed (the engine fails the step's
// requests and every later one, naming the file).
class MappedFile {
 public:
  // Maps without reading the pages in: they fault in when first read (a caller that wants them resident up front
  // touches them itself, on the threads whose NUMA node should hold them). Advised MADV_HUGEPAGE: pages not yet
  // cached are read in as 2 MB folios where the kernel and filesystem can (see Resident).
  static Result<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops this process's mapping of the pages under `range` (a part of bytes(); widened to whole pages): they leave
  // the resident set, and a later read faults them in again from the file (MADV_DONTNEED on a private mapping that
  // was never written: nothing is lost). For bytes read once and copied elsewhere, so that they are not counted
  // twice in the RSS. A range outside the mapping is an error.
  Status Release(std::span<const uint8_t> range) const;
  // Asks the kernel to drop the file's page-cache pages under `range` (a part of bytes(); widened to whole pages)
  // that no process maps: Release this process's own first. The next reads of those bytes come from disk, in 2 MB
  // folios where the kernel and filesystem can (Open's advice): the way back to 2 MB pages for a file the page cache
  // held in small folios, which MADV_COLLAPSE refuses on file mappings here (EINVAL on 6.18 / ext4). Advice: pages
  // the kernel keeps (mapped by another process, dirty) stay as they are. A range outside the mapping is an error.
  Status Uncache(std::span<const uint8_t> range) const;
  // This process's resident bytes of the mapping and how many of them are mapped as 2 MB pages (from
  // /proc/self/smaps; zeros where it cannot be read). Reads the kernel's page tables: call it once, after loading.
  struct Residency {
    uint64_t resident_bytes = 0;
    uint64_t huge_page_bytes = 0;
  };
  Residency Resident() const;

 private:
  // The whole pages under `range` (a part of bytes()), as offsets into the mapping; an error naming `verb` if the
  // range lies outside it.
  struct PageSpan {
    size_t begin = 0, end = 0;
  };
  Result<PageSpan> PagesUnder(std::span<const uint8_t> range, std::string_view verb) const;

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Faults the SIGBUS handler has absorbed in mappings, since the start; 0 while every mapped file is intact.
uint64_t MappingFaults();
// The first damaged mapping, as an error naming the file and the offset of the first missing byte; Ok if none.
Status MappingDamage();

bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);
std::string JoinPath(const std::string& dir, const std::string& name);

}  // namespace glint
