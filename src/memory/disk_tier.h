// The prefix cache's disk tier (docs/engine.md "Disk tier"): full blocks and state checkpoints evicted from memory
// are written to a directory and read back on a hit, so a conversation whose history outgrew memory resumes
// without recomputing it.
//
// One file per item, `b-<hash>.glpc` (a block) or `c-<hash>.glpc` (a checkpoint), written to a temporary name
// and renamed (a reader never sees a half-written file under the final name):
//     header (72 bytes, little-endian)   magic "GLINTPC\0", format version, kind, model fingerprint, chain hash,
//                                        parent hash, key tokens, payload bytes, XXH3-64 of key + payload,
//                                        XXH3-64 of the header's first 64 bytes
//     key tokens   int32 × key tokens    the block's tokens (its cache key; none for a checkpoint)
//     payload      bytes                 the block or checkpoint exactly as it sits in memory
// A read checks every field against what the caller expects (kind, hash, parent, key, size, fingerprint: the
// model and cache layout the bytes belong to) and both checksums; any mismatch, a short file or an I/O error is a
// miss, logged, and the file is deleted. So a damaged, truncated or foreign file costs a recompute, never a wrong
// answer.
//
// The directory belongs to one engine at a time (an flock on `.glint-prefix-cache.lock`). At start, files of
// this format found there are indexed again (a restarted server keeps its disk cache) when their header matches
// this model, and deleted when not; leftover temporary files are deleted. The size budget counts whole files;
// past it, the least recently used files (by write or hit) are deleted.
//
// File I/O runs on the tier's own thread (disk_io.h), never on the engine thread: the engine waits for a read or
// a write at most `io_timeout_seconds` (--prefix-cache-disk-timeout). Past it the item is a miss (a read) or not
// stored (a write), the item leaves the index, and until the stuck operation returns every read and write is
// refused at once (a miss) — so a file that blocks (a slow or hung disk, a network mount) costs one timeout, then
// no more. Reads land in the job's own buffer and are copied out only when they finish in time; a write that
// finishes after its timeout removes its temporary file instead of renaming it. Deletions go through the thread
// too, under the same timeout.
//
// A hostile directory (issue 37): every file is opened relative to a descriptor of the directory, never through a
// symlink (O_NOFOLLOW), reads with O_NONBLOCK and only of regular files (a FIFO planted under an item's name would
// otherwise block the engine thread in open() forever: now it is a miss, deleted), and new files — the temporary
// items and the start-up probe — are created with O_CREAT | O_EXCL | O_NOFOLLOW (a planted symlink is removed, not
// written through).
//
// Knows sizes only, never the model. One caller thread (the engine's) at a time; the I/O thread is its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "memory/block_pool.h"
#include "memory/disk_io.h"

namespace glint {

inline constexpr uint32_t kDiskTierFormatVersion = 1;

struct DiskTierOptions {
  std::string directory;
  int64_t size_bytes = 0;         // budget of the files, headers included
  uint64_t fingerprint = 0;       // the model and cache layout; files with another are foreign
  bool start_empty = false;       // delete this format's files found at start instead of indexing them (benchmarks)
  double io_timeout_seconds = 2;  // longest the caller waits for one read or write (--prefix-cache-disk-timeout)
  std::function<void()> before_io = {};  // tests: runs on the I/O thread before each operation (a sleep: a slow disk)
};

enum class DiskItemKind : uint32_t { kBlock = 1, kCheckpoint = 2 };

struct DiskTierStats {
  int64_t files = 0, bytes = 0, capacity_bytes = 0;
  int64_t block_writes = 0, checkpoint_writes = 0, write_bytes = 0, write_failures = 0;
  int64_t block_reads = 0, checkpoint_reads = 0, read_bytes = 0, read_failures = 0;  // failures: misses
  int64_t evictions = 0;
  int64_t io_timeouts = 0;  // reads and writes that outlived io_timeout_seconds
  int64_t io_refused = 0;   // reads and writes refused while a timed-out one was still running
};

class DiskTier {
 public:
  // Checks the directory (exists, is a directory, is writable, not used by another engine) and indexes the files
  // already there. Errors name the directory and what is wrong.
  static Result<std::unique_ptr<DiskTier>> Open(const DiskTierOptions& options);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Writes an item (replacing nothing: an item already stored is only marked as recently used). False, logged,
  // when it cannot be written (too large for the budget, disk full, I/O error); nothing is left behind then.
  bool Write(DiskItemKind kind, BlockHash hash, BlockHash parent, std::span<const int32_t> key,
             std::span<const std::byte> payload);
  // Whether a block with this chain key is stored (checked against the key kept in memory; no I/O).
  bool HasBlock(BlockHash hash, BlockHash parent, std::span<const int32_t> key) const;
  bool HasCheckpoint(BlockHash hash) const;
  // Reads an item into `destination` (its payload size). False — logged, the file deleted — when it is missing,
  // damaged, truncated, of another model or does not match what is asked; `destination` then holds garbage.
  bool Read(DiskItemKind kind, BlockHash hash, BlockHash parent, std::span<const int32_t> key,
            std::span<std::byte> destination);
  // Deletes a stored item (if any).
  void Erase(DiskItemKind kind, BlockHash hash);

  DiskTierStats Stats() const;
  const std::string& directory() const { return options_.directory; }
  std::string PathOf(DiskItemKind kind, BlockHash hash) const;  // for tests that damage files

 private:
  struct ItemKey {
    DiskItemKind kind;
    BlockHash hash;
    bool operator==(const ItemKey&) const = default;
  };
  struct ItemKeyHash {
    size_t operator()(const ItemKey& k) const { return k.hash ^ static_cast<size_t>(k.kind); }
  };
  struct Entry {
    int64_t file_bytes = 0;
    BlockHash parent = 0;
    std::vector<int32_t> key;
    std::list<ItemKey>::iterator lru_position;
  };
  explicit DiskTier(const DiskTierOptions& options) : options_(options) {}
  Status Lock();
  Status ProbeWritable() const;
  // Runs a read or write job on the I/O thread within the timeout; false (counted, logged now and then) if it
  // timed out or was refused.
  bool RunIo(const std::shared_ptr<DiskIoThread::Job>& job, const std::string& what);
  void Scan();
  void Index(const ItemKey& key, Entry entry);  // as the most recently used
  void Remove(const ItemKey& key, bool count_eviction);
  bool MakeRoom(int64_t bytes);

  DiskTierOptions options_;
  int lock_fd_ = -1;
  int dir_fd_ = -1;                   // the directory, opened once: every name is resolved inside it
  std::unique_ptr<DiskIoThread> io_;  // null until Open has scanned the directory
  std::unordered_map<ItemKey, Entry, ItemKeyHash> index_;
  std::list<ItemKey> lru_;  // front = least recently used
  int64_t bytes_ = 0;
  DiskTierStats stats_;
};

}  // namespace glint
