#include "memory/disk_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "base/file.h"
#include "base/log.h"
#include "base/table.h"

namespace glint {
namespace {

static_assert(std::endian::native == std::endian::little, "the disk tier's files are little-endian");

constexpr char kMagic[8] = {'G', 'L', 'I', 'N', 'T', 'P', 'C', '\0'};
constexpr const char* kSuffix = ".glpc";
constexpr const char* kTempPrefix = ".tmp-";
constexpr const char* kLockName = ".glint-prefix-cache.lock";

struct FileHeader {
  char magic[8];
  uint32_t version, kind;
  uint64_t fingerprint, hash, parent;
  uint32_t key_tokens, reserved;
  uint64_t payload_bytes, body_checksum;
  uint64_t header_checksum;  // XXH3-64 of the 64 bytes before it
};
static_assert(sizeof(FileHeader) == 72 && offsetof(FileHeader, header_checksum) == 64);

uint64_t HeaderChecksum(const FileHeader& header) {
  return XXH3_64bits(&header, offsetof(FileHeader, header_checksum));
}

uint64_t BodyChecksum(std::span<const int32_t> key, std::span<const std::byte> payload) {
  XXH3_state_t* state = XXH3_createState();
  GLINT_CHECK(state != nullptr) << "out of memory for a hash state";
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, key.data(), key.size_bytes());
  XXH3_64bits_update(state, payload.data(), payload.size());
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return digest;
}

std::string ErrnoText() { return std::strerror(errno); }

// Whole-buffer pwrite / pread (they may transfer less than asked). False with errno set on failure; a read that
// meets the end of the file fails with errno 0.
bool PwriteAll(int fd, const void* data, size_t bytes, off_t offset) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t done = ::pwrite(fd, p, bytes, offset);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) return false;
    p += done, bytes -= static_cast<size_t>(done), offset += done;
  }
  return true;
}

bool PreadAll(int fd, void* data, size_t bytes, off_t offset) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t done = ::pread(fd, p, bytes, offset);
    if (done < 0 && errno == EINTR) continue;
    if (done == 0) errno = 0;
    if (done <= 0) return false;
    p += done, bytes -= static_cast<size_t>(done), offset += done;
  }
  return true;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string ItemName(DiskItemKind kind, BlockHash hash) {
  char name[40];
  std::snprintf(name, sizeof(name), "%c-%016" PRIx64 "%s", kind == DiskItemKind::kBlock ? 'b' : 'c', hash, kSuffix);
  return name;
}

// Parses "b-<16 hex>.glpc" / "c-<16 hex>.glpc"; false for any other name.
bool ParseItemName(const std::string& name, DiskItemKind& kind, BlockHash& hash) {
  if (name.size() != 2 + 16 + std::strlen(kSuffix) || name[1] != '-' || !name.ends_with(kSuffix)) return false;
  if (name[0] != 'b' && name[0] != 'c') return false;
  kind = name[0] == 'b' ? DiskItemKind::kBlock : DiskItemKind::kCheckpoint;
  hash = 0;
  for (size_t i = 2; i < 18; ++i) {
    const char c = name[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return false;
    hash = hash << 4 | static_cast<uint64_t>(digit);
  }
  return true;
}

// Reads and checks a file's header: the format, this model, the item its name says, a size that matches. Returns
// the reason it is unusable, empty when it is fine.
std::string CheckHeader(int fd, uint64_t fingerprint, DiskItemKind kind, BlockHash hash, FileHeader& header) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return "fstat failed: " + ErrnoText();
  if (!PreadAll(fd, &header, sizeof(header), 0)) {
    return errno == 0 ? "shorter than a header (truncated)" : "read failed: " + ErrnoText();
  }
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) return "not a glint prefix-cache file (bad magic)";
  if (header.header_checksum != HeaderChecksum(header)) return "header checksum mismatch (damaged)";
  if (header.version != kDiskTierFormatVersion) {
    return StrCat("format version ", header.version, ", expected ", kDiskTierFormatVersion);
  }
  if (header.fingerprint != fingerprint) return "written for another model or cache layout (fingerprint differs)";
  if (header.kind != static_cast<uint32_t>(kind) || header.hash != hash) return "holds another item than its name";
  const int64_t expected = static_cast<int64_t>(sizeof(header) + int64_t{4} * header.key_tokens + header.payload_bytes);
  if (info.st_size != expected) return StrCat("file is ", info.st_size, " bytes, its header says ", expected);
  return "";
}

// Opens an item (or the directory's other files) by name inside the directory: no symlink followed, a regular file
// only, never blocking. -1 with errno set (ELOOP: a symlink, EINVAL: not a regular file).
int OpenForRead(int dir_fd, const std::string& name) {
  Fd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  struct stat info {};
  if (fd.get() < 0 || ::fstat(fd.get(), &info) != 0) return -1;
  if (!S_ISREG(info.st_mode)) {
    errno = EINVAL;
    return -1;
  }
  return fd.release();
}

// Creates `name` anew (removing whatever held the name: a leftover, a planted symlink or FIFO); -1 with errno.
int CreateFresh(int dir_fd, const std::string& name) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::openat(dir_fd, name.c_str(), kFlags, 0644);
  if (fd < 0 && errno == EEXIST && ::unlinkat(dir_fd, name.c_str(), 0) == 0) {
    fd = ::openat(dir_fd, name.c_str(), kFlags, 0644);  // once: a name that keeps coming back is a failed write
  }
  return fd;
}

// Reads an item's file into the job's own buffers (the engine copies the payload out only if it finishes in time).
struct ReadJob final : DiskIoThread::Job {
  int dir_fd = -1;
  uint64_t fingerprint = 0;
  DiskItemKind kind = DiskItemKind::kBlock;
  BlockHash hash = 0, parent = 0;
  std::vector<int32_t> key;        // what the caller asks for
  std::vector<std::byte> payload;  // [the expected payload bytes]
  std::string reason;              // empty: read and checked
  void Run() override {
    Fd fd(OpenForRead(dir_fd, ItemName(kind, hash)));
    FileHeader header{};
    reason = fd.get() < 0 ? "open failed: " + ErrnoText() : CheckHeader(fd.get(), fingerprint, kind, hash, header);
    std::vector<int32_t> stored(reason.empty() ? header.key_tokens : 0);
    if (reason.empty() && (header.parent != parent || header.payload_bytes != payload.size())) {
      reason = StrCat("holds another item (parent or size ", header.payload_bytes, " ≠ ", payload.size(), ")");
    }
    if (reason.empty() && !PreadAll(fd.get(), stored.data(), stored.size() * 4, sizeof(header))) {
      reason = "key read failed: " + (errno == 0 ? std::string("truncated") : ErrnoText());
    }
    if (reason.empty() && stored != key) reason = "holds other tokens than the block asked for";
    if (reason.empty() &&
        !PreadAll(fd.get(), payload.data(), payload.size(), static_cast<off_t>(sizeof(header) + stored.size() * 4))) {
      reason = "payload read failed: " + (errno == 0 ? std::string("truncated") : ErrnoText());
    }
    if (reason.empty() && BodyChecksum(stored, payload) != header.body_checksum) {
      reason = "checksum mismatch (damaged)";
    }
  }
};

// Writes an item to a temporary name and renames it into place, unless the engine stopped waiting for it.
struct WriteJob final : DiskIoThread::Job {
  int dir_fd = -1;
  std::string name;
  FileHeader header{};
  std::vector<int32_t> key;
  std::vector<std::byte> payload;
  std::string error;  // empty: written
  void Run() override {
    const std::string temp = kTempPrefix + name;
    Fd fd(CreateFresh(dir_fd, temp));
    bool ok = fd.get() >= 0 && PwriteAll(fd.get(), &header, sizeof(header), 0) &&
              PwriteAll(fd.get(), key.data(), key.size() * 4, sizeof(header)) &&
              PwriteAll(fd.get(), payload.data(), payload.size(), static_cast<off_t>(sizeof(header) + key.size() * 4));
    error = ok ? "" : ErrnoText();
    if (ok && ::close(fd.release()) != 0) ok = false, error = ErrnoText();
    if (ok && abandoned()) ok = false, error = "timed out";  // not indexed: it must not appear under its name
    // renameat replaces whatever holds the final name (a planted symlink included) without following it.
    if (ok && ::renameat(dir_fd, temp.c_str(), dir_fd, name.c_str()) != 0) ok = false, error = ErrnoText();
    if (!ok) ::unlinkat(dir_fd, temp.c_str(), 0);
  }
};

struct UnlinkJob final : DiskIoThread::Job {
  int dir_fd = -1;
  std::string name;
  void Run() override { ::unlinkat(dir_fd, name.c_str(), 0); }
};

}  // namespace

Result<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierOptions& options) {
  const std::string& dir = options.directory;
  if (dir.empty()) return InvalidArgument("--prefix-cache-disk needs a directory");
  if (options.size_bytes <= 0) return InvalidArgument("--prefix-cache-disk-size must be positive");
  if (options.fingerprint == 0) return InvalidArgument("the disk tier needs the model's fingerprint");
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) {
    return NotFound("--prefix-cache-disk ", dir, ": ", ErrnoText(), " (the directory must exist; create it first)");
  }
  if (!S_ISDIR(info.st_mode)) return InvalidArgument("--prefix-cache-disk ", dir, " is not a directory");
  std::unique_ptr<DiskTier> tier(new DiskTier(options));
  tier->dir_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (tier->dir_fd_ < 0) return FailedPrecondition("--prefix-cache-disk ", dir, ": cannot open it: ", ErrnoText());
  tier->stats_.capacity_bytes = options.size_bytes;
  GLINT_RETURN_IF_ERROR(tier->Lock());
  GLINT_RETURN_IF_ERROR(tier->ProbeWritable());
  tier->Scan();
  tier->io_ = std::make_unique<DiskIoThread>(options.before_io);
  return tier;
}

DiskTier::~DiskTier() {
  // A thread still blocked in a file operation keeps using the directory's descriptor: it stays open (the process
  // is exiting) rather than closed and reused under it for another file.
  const bool io_stopped = io_ == nullptr || io_->Stop(std::chrono::seconds(1));
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
  if (dir_fd_ >= 0 && io_stopped) ::close(dir_fd_);
}

bool DiskTier::RunIo(const std::shared_ptr<DiskIoThread::Job>& job, const std::string& what) {
  const auto timeout =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(options_.io_timeout_seconds));
  const DiskIoThread::Outcome outcome = io_->Run(job, timeout);
  if (outcome == DiskIoThread::Outcome::kDone) return true;
  if (outcome == DiskIoThread::Outcome::kTimedOut) {
    ++stats_.io_timeouts;
    LogWarning("prefix cache disk: ", what, " took more than ", options_.io_timeout_seconds,
               " s (--prefix-cache-disk-timeout); the item is dropped, and the disk tier is bypassed until that "
               "operation returns");
  } else if (stats_.io_refused++ % 1000 == 0) {
    LogWarning("prefix cache disk: bypassed (", stats_.io_refused, " reads and writes so far): an operation that ",
               "timed out has not returned yet");
  }
  return false;
}

Status DiskTier::Lock() {
  const std::string path = JoinPath(options_.directory, kLockName);
  Fd fd(::openat(dir_fd_, kLockName, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644));
  if (fd.get() < 0)
    return FailedPrecondition("--prefix-cache-disk ", options_.directory, ": cannot create ", path, ": ", ErrnoText(),
                              " (the directory must be writable)");
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    return FailedPrecondition("--prefix-cache-disk ", options_.directory, " is in use by another glint process (", path,
                              " is locked); give each engine its own");
  }
  lock_fd_ = fd.release();
  return Status::Ok();
}

Status DiskTier::ProbeWritable() const {
  const std::string name = StrCat(kTempPrefix, "probe-", ::getpid(), kSuffix);
  Fd fd(CreateFresh(dir_fd_, name));
  const std::vector<char> page(4096, 0);
  const bool ok = fd.get() >= 0 && PwriteAll(fd.get(), page.data(), page.size(), 0);
  const std::string error = ok ? "" : ErrnoText();
  ::unlinkat(dir_fd_, name.c_str(), 0);
  if (!ok) return FailedPrecondition("--prefix-cache-disk ", options_.directory, ": cannot write a file: ", error);
  return Status::Ok();
}

void DiskTier::Scan() {
  const int listing = ::dup(dir_fd_);
  DIR* dir = listing < 0 ? nullptr : ::fdopendir(listing);
  if (dir == nullptr) {  // out of descriptors: nothing indexed, the tier starts empty
    if (listing >= 0) ::close(listing);
    return;
  }
  struct Found {
    ItemKey key;
    Entry entry;
    int64_t mtime_ns;
  };
  std::vector<Found> found;
  int64_t removed = 0;
  for (const dirent* item = ::readdir(dir); item != nullptr; item = ::readdir(dir)) {
    const std::string name = item->d_name;
    const std::string path = JoinPath(options_.directory, name);
    DiskItemKind kind;
    BlockHash hash;
    if (name.starts_with(kTempPrefix) && name.ends_with(kSuffix)) {
      ::unlinkat(dir_fd_, name.c_str(), 0);  // a write cut short by a crash
      continue;
    }
    if (!ParseItemName(name, kind, hash)) continue;  // not ours: left alone
    Fd fd(options_.start_empty ? -1 : OpenForRead(dir_fd_, name));
    FileHeader header{};
    std::string reason = options_.start_empty ? "start_empty"
                         : fd.get() < 0       ? "open failed: " + ErrnoText()
                                              : CheckHeader(fd.get(), options_.fingerprint, kind, hash, header);
    Entry entry;
    entry.parent = header.parent;
    entry.key.resize(reason.empty() ? header.key_tokens : 0);
    if (reason.empty() && !PreadAll(fd.get(), entry.key.data(), entry.key.size() * 4, sizeof(header))) {
      reason = "key read failed";
    }
    struct stat info {};
    if (!reason.empty() || ::fstat(fd.get(), &info) != 0) {
      if (!options_.start_empty) LogWarning("prefix cache disk: ", path, ": ", reason, "; deleted");
      ::unlinkat(dir_fd_, name.c_str(), 0);
      ++removed;
      continue;
    }
    entry.file_bytes = info.st_size;
    found.push_back({{kind, hash}, std::move(entry), info.st_mtim.tv_sec * int64_t{1000000000} + info.st_mtim.tv_nsec});
  }
  ::closedir(dir);
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
  for (Found& f : found) Index(f.key, std::move(f.entry));
  MakeRoom(0);  // the budget may be smaller than last time
  if (!found.empty() || removed > 0) {
    LogInfo("prefix cache disk ", options_.directory, ": ", index_.size(), " files (", FormatBinaryBytes(bytes_),
            ") reused, ", removed, " removed");
  }
}

void DiskTier::Index(const ItemKey& key, Entry entry) {
  bytes_ += entry.file_bytes;
  lru_.push_back(key);
  entry.lru_position = std::prev(lru_.end());
  index_.emplace(key, std::move(entry));
}

void DiskTier::Remove(const ItemKey& key, bool count_eviction) {
  auto found = index_.find(key);
  if (found == index_.end()) return;
  auto unlink = std::make_shared<UnlinkJob>();
  unlink->dir_fd = dir_fd_;
  unlink->name = ItemName(key.kind, key.hash);
  if (io_ != nullptr) {
    RunIo(unlink, "deleting " + unlink->name);  // waited for: a later open of the name must not find it
  } else {
    unlink->Run();  // Open's scan, before the thread starts
  }
  bytes_ -= found->second.file_bytes;
  lru_.erase(found->second.lru_position);
  index_.erase(found);
  if (count_eviction) ++stats_.evictions;
}

bool DiskTier::MakeRoom(int64_t bytes) {
  if (bytes > options_.size_bytes) return false;
  while (bytes_ + bytes > options_.size_bytes && !lru_.empty()) Remove(lru_.front(), /*count_eviction=*/true);
  return true;
}

std::string DiskTier::PathOf(DiskItemKind kind, BlockHash hash) const {
  return JoinPath(options_.directory, ItemName(kind, hash));
}

bool DiskTier::Write(DiskItemKind kind, BlockHash hash, BlockHash parent, std::span<const int32_t> key,
                     std::span<const std::byte> payload) {
  const ItemKey item{kind, hash};
  if (auto found = index_.find(item); found != index_.end()) {
    lru_.splice(lru_.end(), lru_, found->second.lru_position);
    return true;
  }
  const int64_t file_bytes = static_cast<int64_t>(sizeof(FileHeader) + key.size_bytes() + payload.size());
  if (!MakeRoom(file_bytes)) {
    ++stats_.write_failures;
    LogDebug("prefix cache disk: a ", file_bytes, "-byte item is larger than the whole budget; not written");
    return false;
  }
  auto job = std::make_shared<WriteJob>();
  FileHeader& header = job->header;
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kDiskTierFormatVersion;
  header.kind = static_cast<uint32_t>(kind);
  header.fingerprint = options_.fingerprint;
  header.hash = hash;
  header.parent = parent;
  header.key_tokens = static_cast<uint32_t>(key.size());
  header.payload_bytes = payload.size();
  header.body_checksum = BodyChecksum(key, payload);
  header.header_checksum = HeaderChecksum(header);
  job->dir_fd = dir_fd_;
  job->name = ItemName(kind, hash);
  job->key.assign(key.begin(), key.end());
  job->payload.assign(payload.begin(), payload.end());  // the job's own: it may outlive this call
  const std::string path = PathOf(kind, hash);
  if (!RunIo(job, "writing " + path)) {
    ++stats_.write_failures;
    return false;
  }
  if (!job->error.empty()) {
    if (stats_.write_failures++ % 1000 == 0) {  // a full disk fails every write: say it now and then
      LogWarning("prefix cache disk: cannot write ", path, ": ", job->error, " (", stats_.write_failures,
                 " failed writes so far); the item is dropped from the cache");
    }
    return false;
  }
  Entry entry;
  entry.file_bytes = file_bytes;
  entry.parent = parent;
  entry.key.assign(key.begin(), key.end());
  Index(item, std::move(entry));
  ++(kind == DiskItemKind::kBlock ? stats_.block_writes : stats_.checkpoint_writes);
  stats_.write_bytes += file_bytes;
  return true;
}

bool DiskTier::HasBlock(BlockHash hash, BlockHash parent, std::span<const int32_t> key) const {
  auto found = index_.find({DiskItemKind::kBlock, hash});
  return found != index_.end() && found->second.parent == parent &&
         std::equal(key.begin(), key.end(), found->second.key.begin(), found->second.key.end());
}

bool DiskTier::HasCheckpoint(BlockHash hash) const { return index_.count({DiskItemKind::kCheckpoint, hash}) != 0; }

bool DiskTier::Read(DiskItemKind kind, BlockHash hash, BlockHash parent, std::span<const int32_t> key,
                    std::span<std::byte> destination) {
  const ItemKey item{kind, hash};
  auto found = index_.find(item);
  if (found == index_.end()) return false;
  const std::string path = PathOf(kind, hash);
  auto job = std::make_shared<ReadJob>();
  job->dir_fd = dir_fd_;
  job->fingerprint = options_.fingerprint;
  job->kind = kind, job->hash = hash, job->parent = parent;
  job->key.assign(key.begin(), key.end());
  job->payload.resize(destination.size());
  if (!RunIo(job, "reading " + path)) {
    ++stats_.read_failures;
    Remove(item, /*count_eviction=*/false);
    return false;
  }
  const std::string& reason = job->reason;
  if (!reason.empty()) {
    LogWarning("prefix cache disk: ", path, ": ", reason, "; treated as a miss and deleted");
    ++stats_.read_failures;
    Remove(item, /*count_eviction=*/false);
    return false;
  }
  std::copy(job->payload.begin(), job->payload.end(), destination.begin());
  lru_.splice(lru_.end(), lru_, found->second.lru_position);
  ++(kind == DiskItemKind::kBlock ? stats_.block_reads : stats_.checkpoint_reads);
  stats_.read_bytes += static_cast<int64_t>(destination.size());
  return true;
}

void DiskTier::Erase(DiskItemKind kind, BlockHash hash) { Remove({kind, hash}, /*count_eviction=*/false); }

DiskTierStats DiskTier::Stats() const {
  DiskTierStats s = stats_;
  s.files = static_cast<int64_t>(index_.size());
  s.bytes = bytes_;
  return s;
}

}  // namespace glint
