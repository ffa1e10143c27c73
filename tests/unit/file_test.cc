// MappedFile::Release (base/file.h): the pages of a mapped file leave the resident set and come back, unchanged,
// when read again — what keeps a tensor-parallel rank's RSS at its shard when it copies slices out of a container
// (docs/distributed.md "The fast path").
#include "base/file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace glint {
namespace {

// The process's resident set (VmRSS of /proc/self/status), in bytes.
uint64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

uint64_t SumEveryPage(std::span<const uint8_t> bytes) {
  uint64_t sum = 0;
  for (size_t i = 0; i < bytes.size(); i += 4096) sum += bytes[i];
  return sum;
}

TEST(MappedFile, ReleaseDropsPagesFromTheResidentSetAndKeepsTheBytes) {
  constexpr size_t kBytes = 32 << 20;
  std::string contents(kBytes, '\0');
  for (size_t i = 0; i < kBytes; ++i) contents[i] = static_cast<char>((i * 2654435761u) >> 24);
  const std::string path = JoinPath(testing::MakeTempDir("mapped_release"), "blob");
  ASSERT_OK(WriteFileAtomic(path, contents));
  contents.resize(1 << 20);  // keep the first MiB to compare with; free the rest before measuring
  contents.shrink_to_fit();

  ASSERT_OK_AND_ASSIGN(MappedFile mapped, MappedFile::Open(path));
  const std::span<const uint8_t> bytes = mapped.bytes();
  const uint64_t before = ResidentBytes();
  const uint64_t sum = SumEveryPage(bytes);
  const uint64_t touched = ResidentBytes();
  ASSERT_GE(touched, before + kBytes * 3 / 4) << "reading every page should bring the file into the resident set";

  // An unaligned part inside: widened to whole pages, no error.
  ASSERT_OK(mapped.Release(bytes.subspan(4095, 10000)));
  ASSERT_OK(mapped.Release(bytes));
  const uint64_t released = ResidentBytes();
  EXPECT_LE(released + kBytes * 3 / 4, touched) << "the released pages stayed resident";

  // Read again: the same bytes, faulted in from the file.
  EXPECT_EQ(SumEveryPage(bytes), sum);
  EXPECT_EQ(std::memcmp(bytes.data(), contents.data(), contents.size()), 0);

  const std::vector<uint8_t> elsewhere(16);
  EXPECT_ERROR_CONTAINS(mapped.Release(elsewhere), "they lie outside it");
  EXPECT_ERROR_CONTAINS(mapped.Release(std::span<const uint8_t>(bytes.data() + 1, bytes.size())),
                        "they lie outside it");
  EXPECT_OK(mapped.Release({}));
}

// MappedFile::Resident reads the mapping's own entries of /proc/self/smaps: nothing resident before a read, the
// whole file after one, and — where the kernel and the filesystem give page-cache folios of 2 MB to a mapping
// advised MADV_HUGEPAGE (MappedFile::Open) and the file was not cached before — most of it on 2 MB pages.
TEST(MappedFile, ResidencyCountsTheMappingsPagesAndThoseOnHugePages) {
  constexpr size_t kBytes = 16 << 20;
  const std::string dir = testing::MakeTempDir("mapped_huge");
  const std::string path = JoinPath(dir, "blob");
  ASSERT_OK(WriteFileAtomic(path, std::string(kBytes, 'h')));  // synced: its pages are clean
  {
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);  // out of the page cache: read in afresh below
    ::close(fd);
  }
  ASSERT_OK_AND_ASSIGN(MappedFile mapped, MappedFile::Open(path));
  EXPECT_EQ(mapped.Resident().resident_bytes, 0u);
  EXPECT_EQ(SumEveryPage(mapped.bytes()), uint64_t{'h'} * (kBytes / 4096));
  const MappedFile::Residency residency = mapped.Resident();
  EXPECT_GE(residency.resident_bytes, kBytes * 3 / 4);
  EXPECT_LE(residency.resident_bytes, kBytes);
  EXPECT_LE(residency.huge_page_bytes, residency.resident_bytes);
  EXPECT_EQ(MappedFile().Resident().resident_bytes, 0u);
  if (residency.huge_page_bytes == 0) {
    GTEST_SKIP() << "the kernel or the filesystem of " << dir
                 << " maps files in 4 KB pages only (no 2 MB page-cache folios): nothing more to check here";
  }
  EXPECT_GE(residency.huge_page_bytes, kBytes / 2);
}

// Pages cached in small folios before a mapping asked for 2 MB pages stay small (here: read 4 KB at a time with
// readahead off, as the page cache keeps a file read piecemeal by another program); Release then Uncache drops them,
// and the next reads bring them from disk as 2 MB pages: the mechanism FastModel::Load's ReadAgainOnHugePages uses.
TEST(MappedFile, ReleaseThenUncacheBringsSmallCachedPagesBackOnHugePages) {
  constexpr size_t kBytes = 16 << 20;
  const std::string dir = testing::MakeTempDir("mapped_uncache");
  const std::string path = JoinPath(dir, "blob");
  ASSERT_OK(WriteFileAtomic(path, std::string(kBytes, 'u')));
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  {  // Control: read in afresh, the file comes on 2 MB pages where the kernel and filesystem can.
    ASSERT_OK_AND_ASSIGN(MappedFile mapped, MappedFile::Open(path));
    EXPECT_EQ(SumEveryPage(mapped.bytes()), uint64_t{'u'} * (kBytes / 4096));
    if (mapped.Resident().huge_page_bytes == 0) {
      ::close(fd);
      GTEST_SKIP() << "the kernel or the filesystem of " << dir << " maps files in 4 KB pages only";
    }
  }
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM), 0);  // no readahead: one small folio per read
  char page[4096];
  for (size_t offset = 0; offset < kBytes; offset += sizeof page)
    ASSERT_EQ(::pread(fd, page, sizeof page, static_cast<off_t>(offset)), static_cast<ssize_t>(sizeof page));
  ::close(fd);

  ASSERT_OK_AND_ASSIGN(MappedFile mapped, MappedFile::Open(path));
  const std::span<const uint8_t> bytes = mapped.bytes();
  EXPECT_EQ(SumEveryPage(bytes), uint64_t{'u'} * (kBytes / 4096));
  const MappedFile::Residency small = mapped.Resident();
  ASSERT_GE(small.resident_bytes, kBytes * 3 / 4);
  if (small.huge_page_bytes >= kBytes / 2) {
    GTEST_SKIP() << "pages read 4 KB at a time with readahead off were mapped as 2 MB pages: this kernel does not "
                    "keep them small, so there is nothing to bring back";
  }

  // Uncache alone changes nothing while this mapping holds the pages; after Release it drops them.
  ASSERT_OK(mapped.Uncache(bytes));
  EXPECT_LE(mapped.Resident().huge_page_bytes, small.huge_page_bytes);
  ASSERT_OK(mapped.Release(bytes));
  ASSERT_OK(mapped.Uncache(bytes.subspan(4095, kBytes - 4095)));  // unaligned: widened to whole pages
  EXPECT_EQ(SumEveryPage(bytes), uint64_t{'u'} * (kBytes / 4096));
  const MappedFile::Residency again = mapped.Resident();
  EXPECT_GE(again.resident_bytes, kBytes * 3 / 4);
  EXPECT_GE(again.huge_page_bytes, kBytes / 2) << "read again from disk, the pages stayed small";

  const std::vector<uint8_t> elsewhere(16);
  EXPECT_ERROR_CONTAINS(mapped.Uncache(elsewhere), "cannot drop from the page cache 16 bytes");
  EXPECT_OK(mapped.Uncache({}));
}

}  // namespace
// Issue 37: a mapped file truncated under the process killed it with SIGBUS at the next read past the new end.
// Now the read gets zeros, the process lives, and MappingFaults/MappingDamage say which file and where.
TEST(MappedFile, ATruncatedFileReadsAsZerosAndIsReportedNotASignal) {
  const std::string path = glint::testing::MakeTempDir("mapped_truncate") + "/model.glint";
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  ASSERT_OK(WriteFileAtomic(path, std::string(16 * page, 'w')));
  auto mapped = MappedFile::Open(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  const volatile uint8_t* bytes = mapped->bytes().data();
  EXPECT_EQ(bytes[10 * page], 'w');
  EXPECT_EQ(MappingFaults(), 0u);
  EXPECT_OK(MappingDamage());
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(4 * page + 100)), 0);
  EXPECT_EQ(bytes[4 * page], 'w');     // still in the file
  EXPECT_EQ(bytes[10 * page + 3], 0);  // past its new end: zeros, not SIGBUS
  EXPECT_EQ(bytes[15 * page], 0);      // the rest of the mapping was replaced at once
  EXPECT_EQ(MappingFaults(), 1u);
  const Status damage = MappingDamage();
  EXPECT_FALSE(damage.ok());
  EXPECT_NE(damage.message().find(path), std::string::npos) << damage.message();
  EXPECT_NE(damage.message().find("no longer holds byte " + std::to_string(10 * page)), std::string::npos)
      << damage.message();
  EXPECT_EQ(bytes[6 * page], 0);  // an earlier page past the end faults in turn; the first missing byte moves back
  EXPECT_EQ(MappingFaults(), 2u);
  EXPECT_NE(MappingDamage().message().find("no longer holds byte " + std::to_string(6 * page)), std::string::npos);
}

}  // namespace glint
