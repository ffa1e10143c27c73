// The prefix cache's disk tier without a model (memory/disk_tier.h, docs/engine.md "Disk tier"): round trips;
// damaged, truncated, foreign and stale-version files are misses that delete the file, never wrong bytes; the
// size budget evicts least recently used files; directory errors are clear at start and logged misses at run
// time; a restart indexes the files again; a cache manager writes what it evicts and reads a prefix back.
#include "memory/disk_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include "cache_manager_test_util.h"
#include "memory/cache_manager.h"
#include "test_util.h"

namespace glint {
namespace {

using Bytes = std::vector<std::byte>;

constexpr uint64_t kFingerprint = 0x1234;
constexpr int64_t kHeaderBytes = 72;

DiskTierOptions Options(const std::string& dir, int64_t size = 1 << 20, uint64_t fingerprint = kFingerprint) {
  return {.directory = dir, .size_bytes = size, .fingerprint = fingerprint};
}

Bytes Payload(int64_t size, int seed) {
  Bytes bytes(size);
  for (int64_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return bytes;
}

const std::vector<int32_t> kKey = {5, 6, 7, 8};

// Overwrites `bytes` at `offset` of a file.
void Patch(const std::string& path, int64_t offset, const void* bytes, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, bytes, size, offset), static_cast<ssize_t>(size));
  ::close(fd);
}

TEST(DiskTier, WritesAndReadsBackExactly) {
  const std::string dir = testing::MakeTempDir("disk-roundtrip");
  ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Open(Options(dir)));
  const Bytes block = Payload(256, 1), checkpoint = Payload(512, 2);
  ASSERT_TRUE(tier->Write(DiskItemKind::kBlock, 11, 10, kKey, block));
  ASSERT_TRUE(tier->Write(DiskItemKind::kCheckpoint, 11, 0, {}, checkpoint));
  EXPECT_TRUE(tier->HasBlock(11, 10, kKey));
  EXPECT_FALSE(tier->HasBlock(11, 9, kKey));                               // another parent
  EXPECT_FALSE(tier->HasBlock(11, 10, std::vector<int32_t>{5, 6, 7, 9}));  // other tokens
  EXPECT_TRUE(tier->HasCheckpoint(11));
  EXPECT_FALSE(tier->HasCheckpoint(12));
  Bytes out(256);
  ASSERT_TRUE(tier->Read(DiskItemKind::kBlock, 11, 10, kKey, out));
  EXPECT_EQ(out, block);
  Bytes out_checkpoint(512);
  ASSERT_TRUE(tier->Read(DiskItemKind::kCheckpoint, 11, 0, {}, out_checkpoint));
  EXPECT_EQ(out_checkpoint, checkpoint);
  const DiskTierStats s = tier->Stats();
  EXPECT_EQ(s.files, 2);
  EXPECT_EQ(s.bytes, 2 * kHeaderBytes + 16 + 256 + 512);
  EXPECT_EQ(s.block_writes, 1);
  EXPECT_EQ(s.checkpoint_writes, 1);
  EXPECT_EQ(s.block_reads, 1);
  EXPECT_EQ(s.checkpoint_reads, 1);
  EXPECT_EQ(s.read_failures, 0);
  EXPECT_EQ(std::filesystem::file_size(tier->PathOf(DiskItemKind::kBlock, 11)), kHeaderBytes + 16 + 256);
  // Asking for another size, parent or key than the file holds is a miss too.
  Bytes wrong_size(255);
  EXPECT_FALSE(tier->Read(DiskItemKind::kCheckpoint, 11, 0, {}, wrong_size));
  EXPECT_FALSE(tier->HasCheckpoint(11));  // the file was deleted
}

// Every kind of damage is a miss, logged, with the file deleted: a flipped payload byte, a flipped key token, a
// flipped header byte, a truncated file, a stale format version (with a valid header checksum), another model.
TEST(DiskTier, DamagedTruncatedForeignAndStaleFilesAreMisses) {
  const std::string dir = testing::MakeTempDir("disk-damage");
  ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Open(Options(dir)));
  const Bytes payload = Payload(300, 3);
  const auto damage = [&](const char* what, const std::function<void(const std::string&)>& hurt) {
    SCOPED_TRACE(what);
    ASSERT_TRUE(tier->Write(DiskItemKind::kBlock, 21, 20, kKey, payload));
    hurt(tier->PathOf(DiskItemKind::kBlock, 21));
    const int64_t failures = tier->Stats().read_failures;
    Bytes out(300);
    EXPECT_FALSE(tier->Read(DiskItemKind::kBlock, 21, 20, kKey, out));
    EXPECT_EQ(tier->Stats().read_failures, failures + 1);
    EXPECT_FALSE(tier->HasBlock(21, 20, kKey));
    EXPECT_FALSE(std::filesystem::exists(tier->PathOf(DiskItemKind::kBlock, 21)));
  };
  const char flip = 0x55;
  damage("payload byte", [&](const std::string& p) { Patch(p, kHeaderBytes + 16 + 123, &flip, 1); });
  damage("key token", [&](const std::string& p) { Patch(p, kHeaderBytes + 4, &flip, 1); });
  damage("header byte", [&](const std::string& p) { Patch(p, 20, &flip, 1); });
  damage("truncated", [&](const std::string& p) { std::filesystem::resize_file(p, kHeaderBytes + 16 + 100); });
  damage("empty", [&](const std::string& p) { std::filesystem::resize_file(p, 0); });
  damage("deleted", [&](const std::string& p) { std::filesystem::remove(p); });
  const auto rewrite_header = [&](const std::string& p, int64_t offset, uint64_t value, size_t size) {
    unsigned char header[kHeaderBytes];
    const int fd = ::open(p.c_str(), O_RDONLY);
    ASSERT_EQ(::pread(fd, header, kHeaderBytes, 0), kHeaderBytes);
    ::close(fd);
    std::memcpy(header + offset, &value, size);
    const uint64_t checksum = XXH3_64bits(header, 64);  // a consistent header: only the field is wrong
    std::memcpy(header + 64, &checksum, 8);
    Patch(p, 0, header, kHeaderBytes);
  };
  damage("stale version", [&](const std::string& p) { rewrite_header(p, 8, kDiskTierFormatVersion + 1, 4); });
  damage("another model", [&](const std::string& p) { rewrite_header(p, 16, kFingerprint + 1, 8); });
  damage("another item", [&](const std::string& p) { rewrite_header(p, 24, 22, 8); });
}

TEST(DiskTier, TheSizeBudgetEvictsTheLeastRecentlyUsed) {
  const std::string dir = testing::MakeTempDir("disk-budget");
  const int64_t file = kHeaderBytes + 16 + 100;
  ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Open(Options(dir, 3 * file)));
  for (BlockHash h : {1, 2, 3}) ASSERT_TRUE(tier->Write(DiskItemKind::kBlock, h, 0, kKey, Payload(100, h)));
  Bytes out(100);
  ASSERT_TRUE(tier->Read(DiskItemKind::kBlock, 1, 0, kKey, out));  // 1 becomes the most recent: 2 goes first
  ASSERT_TRUE(tier->Write(DiskItemKind::kBlock, 4, 0, kKey, Payload(100, 4)));
  EXPECT_FALSE(tier->HasBlock(2, 0, kKey));
  EXPECT_FALSE(std::filesystem::exists(tier->PathOf(DiskItemKind::kBlock, 2)));
  for (BlockHash h : {1, 3, 4}) EXPECT_TRUE(tier->HasBlock(h, 0, kKey)) << h;
  EXPECT_EQ(tier->Stats().evictions, 1);
  EXPECT_EQ(tier->Stats().bytes, 3 * file);
  // An item larger than the whole budget is refused, and nothing is evicted for it.
  EXPECT_FALSE(tier->Write(DiskItemKind::kCheckpoint, 9, 0, {}, Payload(4 * file, 9)));
  EXPECT_EQ(tier->Stats().files, 3);
  EXPECT_EQ(tier->Stats().write_failures, 1);
  // Writing what is already stored only touches it.
  ASSERT_TRUE(tier->Write(DiskItemKind::kBlock, 3, 0, kKey, Payload(100, 3)));
  EXPECT_EQ(tier->Stats().block_writes, 4);
}

TEST(DiskTier, ARestartIndexesItsFilesAndDeletesForeignOnes) {
  const std::string dir = testing::MakeTempDir("disk-restart");
  {
    ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Open(Options(dir)));
    ASSERT_TRUE(tier->Write(DiskItemKind::kBlock, 31, 30, kKey, Payload(64, 5)));
    ASSERT_TRUE(tier->Write(DiskItemKind::kCheckpoint, 31, 0, {}, Payload(128, 6)));
  }
  std::filesystem::copy_file(dir + "/b-000000000000001f.glpc", dir + "/b-0000000000000020.glpc");  // wrong name
  { std::ofstream(dir + "/.tmp-c-0000000000000001.glpc") << "half-written"; }
  { std::ofstream(dir + "/notes.txt") << "not ours"; }
  {
    ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Open(Options(dir)));
    EXPECT_EQ(tier->Stats().files, 2);
    Bytes out(64);
    ASSERT_TRUE(tier->Read(DiskItemKind::kBlock, 31, 30, kKey, out));
    EXPECT_EQ(out, Payload(64, 5));
    EXPECT_FALSE(std::filesystem::exists(dir + "/b-0000000000000020.glpc"));
    EXPECT_FALSE(std::filesystem::exists(dir + "/.tmp-c-0000000000000001.glpc"));
    EXPECT_TRUE(std::filesystem::exists(dir + "/notes.txt"));  // not in the format: left alone
  }
  {
    // Another model (or cache layout) finds nothing usable: the files are deleted.
    ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Open(Options(dir, 1 << 20, kFingerprint + 1)));
    EXPECT_EQ(tier->Stats().files, 0);
    EXPECT_FALSE(std::filesystem::exists(dir + "/b-000000000000001f.glpc"));
  }
}

TEST(DiskTier, DirectoryErrorsAreClearAtStartAndMissesAtRunTime) {
  const std::string dir = testing::MakeTempDir("disk-errors");
  EXPECT_ERROR_CONTAINS(DiskTier::Open(Options(dir + "/missing")), "create it first");
  { std::ofstream(dir + "/file") << "x"; }
  EXPECT_ERROR_CONTAINS(DiskTier::Open(Options(dir + "/file")), "is not a directory");
  EXPECT_ERROR_CONTAINS(DiskTier::Open(Options(dir, 0)), "must be positive");
  {
    ASSERT_OK_AND_ASSIGN(auto first, DiskTier::Open(Options(dir)));
    EXPECT_ERROR_CONTAINS(DiskTier::Open(Options(dir)), "in use by another glint process");
  }
  ASSERT_OK_AND_ASSIGN(auto reopened, DiskTier::Open(Options(dir)));  // the lock went with the first
  if (::geteuid() != 0) {                                             // root writes anywhere
    const std::string locked = testing::MakeTempDir("disk-readonly");
    ::chmod(locked.c_str(), 0500);
    EXPECT_ERROR_CONTAINS(DiskTier::Open(Options(locked)), "writable");
    ::chmod(locked.c_str(), 0700);
  }
  // The directory vanishing under a running engine: writes fail (logged, false), reads miss; nothing crashes.
  const std::string gone = testing::MakeTempDir("disk-gone");
  ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Open(Options(gone)));
  ASSERT_TRUE(tier->Write(DiskItemKind::kBlock, 41, 0, kKey, Payload(64, 1)));
  std::filesystem::remove_all(gone);
  EXPECT_FALSE(tier->Write(DiskItemKind::kBlock, 42, 0, kKey, Payload(64, 2)));
  EXPECT_EQ(tier->Stats().write_failures, 1);
  Bytes out(64);
  EXPECT_FALSE(tier->Read(DiskItemKind::kBlock, 41, 0, kKey, out));
  EXPECT_EQ(tier->Stats().read_failures, 1);
  EXPECT_EQ(tier->Stats().files, 0);
}

// ---------------------------------------------------------------------------------------------------------------
// A cache manager with the disk tier: blocks of 4 tokens, a checkpoint every 8.

CacheManagerOptions ManagerOptions(int64_t blocks, int64_t checkpoints) {
  return testing::SmallCacheManagerOptions(blocks, checkpoints);
}

std::vector<int32_t> Tokens(int32_t first, int64_t count) {
  std::vector<int32_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// Computes all of `tokens` in one chunk: each block holds its tokens' ids, the checkpoints their position.
void ComputeAll(CacheManager& m, SequenceId id, const std::vector<int32_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  ASSERT_TRUE(m.Admit(id, tokens, {}, n));
  for (const CheckpointTarget& target : m.TakeCheckpoints(id, tokens, n)) {
    std::memcpy(target.data, &target.position, sizeof(target.position));
  }
  for (int64_t b = 0; b * 4 < n; ++b) {
    std::memcpy(m.block_arena().Item(m.BlockTable(id)[b]), tokens.data() + b * 4, std::min<int64_t>(4, n - b * 4) * 4);
  }
  m.Commit(id, tokens, n);
  ASSERT_OK(m.CheckIntegrity());
  m.Free(id);
}

TEST(DiskTierManager, EvictedPrefixesComeBackFromTheDisk) {
  const std::string dir = testing::MakeTempDir("disk-manager");
  ASSERT_OK_AND_ASSIGN(auto m, CacheManager::Create(ManagerOptions(6, 2)));
  ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Open(Options(dir)));
  m->AttachDiskTier(std::move(tier));
  const std::vector<int32_t> a = Tokens(100, 17), b = Tokens(500, 17);
  ComputeAll(*m, 1, a);  // a's 4 full blocks cached, checkpoints at 8 and 16
  // b takes 5 of the 6 blocks: a's partial one, the unused one, then a's blocks 3, 2, 1 (to the disk); its
  // checkpoints evict both of a's (to the disk). a's block 0 stays in memory.
  ComputeAll(*m, 2, b);
  const DiskTierStats s = m->disk_tier()->Stats();
  EXPECT_EQ(s.checkpoint_writes, 2);
  EXPECT_EQ(s.block_writes, 3);
  std::vector<int32_t> prompt = a;
  prompt.push_back(7);
  EXPECT_EQ(m->FindPrefix(prompt).tokens, 0);  // not in memory
  m->LoadPrefixFromDisk(prompt);
  const PrefixMatch match = m->FindPrefix(prompt);
  ASSERT_EQ(match.tokens, 16);
  ASSERT_TRUE(m->Admit(3, prompt, match, 18));
  int64_t state = 0;
  std::memcpy(&state, m->Slot(3), sizeof(state));
  EXPECT_EQ(state, 16);  // the checkpoint read back
  for (int64_t blk = 0; blk < 4; ++blk) {
    EXPECT_EQ(std::memcmp(m->block_arena().Item(m->BlockTable(3)[blk]), a.data() + blk * 4, 16), 0) << blk;
  }
  EXPECT_EQ(m->Stats().disk_hit_tokens, 16);
  EXPECT_EQ(m->disk_tier()->Stats().block_reads, 3);
  EXPECT_EQ(m->disk_tier()->Stats().checkpoint_reads, 1);
  ASSERT_OK(m->CheckIntegrity());
}

// A damaged block file ends the prefix there: the lookup falls back to what is before it, never wrong contents.
TEST(DiskTierManager, ADamagedFileShortensTheMatch) {
  const std::string dir = testing::MakeTempDir("disk-manager-damage");
  ASSERT_OK_AND_ASSIGN(auto m, CacheManager::Create(ManagerOptions(6, 2)));
  ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Open(Options(dir)));
  m->AttachDiskTier(std::move(tier));
  const std::vector<int32_t> a = Tokens(100, 17), b = Tokens(500, 17), c = Tokens(900, 17);
  ComputeAll(*m, 1, a);
  ComputeAll(*m, 2, b);
  ComputeAll(*m, 3, c);  // a's blocks and both checkpoints are on the disk now
  // Damage a's third block (positions 8..11): the deepest usable point is the checkpoint at 8.
  std::vector<int32_t> prompt = a;
  prompt.push_back(7);
  BlockHash hash = kRootBlockHash;
  for (int i = 0; i < 3; ++i) hash = HashBlock(hash, std::span<const int32_t>(a).subspan(i * 4, 4));
  const std::string path = m->disk_tier()->PathOf(DiskItemKind::kBlock, hash);
  ASSERT_TRUE(std::filesystem::exists(path));
  const char flip = 0x33;
  Patch(path, kHeaderBytes + 16 + 5, &flip, 1);
  m->LoadPrefixFromDisk(prompt);  // tries 16: the damaged block ends it
  EXPECT_EQ(m->disk_tier()->Stats().read_failures, 1);
  m->LoadPrefixFromDisk(prompt);  // now 8 is the deepest point on disk
  const PrefixMatch match = m->FindPrefix(prompt);
  EXPECT_EQ(match.tokens, 8);
  ASSERT_OK(m->CheckIntegrity());
}

// Issue 37 item 4: a FIFO in place of a cached block made the engine thread block in open() forever. Now the read
// returns at once, as a miss, and the FIFO is deleted. (If open() blocks, the test opens the FIFO's other end after
// 5 s so the process can end, and fails.)
TEST(DiskTier, AFifoInPlaceOfAFileIsAMissNotAHang) {
  const std::string dir = testing::MakeTempDir("disk-fifo");
  ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Open(Options(dir)));
  const Bytes block = Payload(256, 3);
  ASSERT_TRUE(tier->Write(DiskItemKind::kBlock, 21, 20, kKey, block));
  const std::string path = tier->PathOf(DiskItemKind::kBlock, 21);
  ASSERT_EQ(::unlink(path.c_str()), 0);
  ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
  Bytes out(block.size());
  auto read = std::async(std::launch::async, [&] { return tier->Read(DiskItemKind::kBlock, 21, 20, kKey, out); });
  if (read.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    const int unblock = ::open(path.c_str(), O_WRONLY);  // lets the blocked open() return
    read.wait();
    ::close(unblock);
    FAIL() << "DiskTier::Read blocked in open() on a FIFO";
  }
  EXPECT_FALSE(read.get());
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(tier->HasBlock(21, 20, kKey));
}

// Issue 37: the tier's file I/O runs on its own thread. A read that blocks (a hung disk or network mount; here a
// hook that holds the I/O thread) costs the caller one timeout, then every read and write is refused at once until
// it returns; then the tier works again. Before, the engine thread itself sat in the read for as long as it took.
TEST(DiskTier, ABlockingReadCostsOneTimeoutThenTheTierIsBypassedUntilItReturns) {
  const std::string dir = testing::MakeTempDir("disk-slow");
  std::atomic<bool> hold{false};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  DiskTierOptions options = Options(dir);
  options.io_timeout_seconds = 0.2;
  options.before_io = [&hold, released] {
    if (hold.load()) released.wait();
  };
  ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Open(options));
  struct Release {  // on every way out, before the tier (declared after it): its thread must not stay held
    std::promise<void>& promise;
    bool done = false;
    void Now() {
      if (!done) promise.set_value(), done = true;
    }
    ~Release() { Now(); }
  } unblock{release};
  const Bytes block = Payload(256, 4);
  ASSERT_TRUE(tier->Write(DiskItemKind::kBlock, 31, 30, kKey, block));
  hold = true;
  Bytes out(block.size());
  auto started = std::chrono::steady_clock::now();
  EXPECT_FALSE(tier->Read(DiskItemKind::kBlock, 31, 30, kKey, out));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_GE(seconds, 0.2);
  EXPECT_LT(seconds, 2.0);
  EXPECT_EQ(tier->Stats().io_timeouts, 1);
  EXPECT_FALSE(tier->HasBlock(31, 30, kKey));  // dropped from the index
  started = std::chrono::steady_clock::now();  // while the read is stuck: refused at once, no second timeout
  EXPECT_FALSE(tier->Write(DiskItemKind::kBlock, 32, 31, kKey, block));
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(seconds, 0.15);
  EXPECT_GE(tier->Stats().io_refused, 1);
  hold = false;
  unblock.Now();
  bool written = false;
  for (int attempt = 0; attempt < 200 && !written; ++attempt) {
    written = tier->Write(DiskItemKind::kBlock, 33, 32, kKey, block);
    if (!written) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(written) << "the tier did not recover once the stuck read returned";
  EXPECT_TRUE(tier->Read(DiskItemKind::kBlock, 33, 32, kKey, out));
  EXPECT_EQ(out, block);
}

// Issue 37 item 5: a planted symlink under the temporary name of an item made the tier write the cache bytes through
// it, over a file outside the directory. Now the link is replaced, the outside file untouched, the item stored.
TEST(DiskTier, APlantedSymlinkIsNeverWrittenThrough) {
  const std::string dir = testing::MakeTempDir("disk-symlink");
  const std::string outside = testing::MakeTempDir("disk-symlink-outside") + "/victim";
  { std::ofstream(outside) << "precious"; }
  ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Open(Options(dir)));
  const std::string final_path = tier->PathOf(DiskItemKind::kBlock, 31);
  const std::string name = final_path.substr(final_path.rfind('/') + 1);
  std::filesystem::create_symlink(outside, dir + "/.tmp-" + name);
  const Bytes block = Payload(256, 4);
  EXPECT_TRUE(tier->Write(DiskItemKind::kBlock, 31, 30, kKey, block));
  std::ifstream victim(outside);
  std::string text;
  std::getline(victim, text);
  EXPECT_EQ(text, "precious");
  EXPECT_FALSE(std::filesystem::is_symlink(final_path));
  Bytes out(block.size());
  EXPECT_TRUE(tier->Read(DiskItemKind::kBlock, 31, 30, kKey, out));
  EXPECT_EQ(out, block);
  // A symlink under an item's final name is not read through either: a miss, deleted.
  ASSERT_TRUE(tier->Write(DiskItemKind::kBlock, 32, 30, kKey, block));
  const std::string linked = tier->PathOf(DiskItemKind::kBlock, 32);
  ASSERT_EQ(::rename(linked.c_str(), (dir + "/moved").c_str()), 0);
  std::filesystem::create_symlink(dir + "/moved", linked);
  EXPECT_FALSE(tier->Read(DiskItemKind::kBlock, 32, 30, kKey, out));
}

}  // namespace
}  // namespace glint
