#include "engine/prefix_disk.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <vector>

#include "base/file.h"

namespace glint {

uint64_t PrefixDiskFingerprint(uint64_t model_fingerprint, const CacheLayout& layout) {
  std::vector<int64_t> words = {static_cast<int64_t>(model_fingerprint), layout.options.block_tokens,
                                static_cast<int64_t>(layout.options.kda_state),
                                // fp8 and int8 rows have the same sizes: only the dtype tells them apart
                                static_cast<int64_t>(layout.options.kv_dtype), layout.options.mtp ? 1 : 0,
                                layout.block_bytes, layout.slot_bytes, layout.checkpoint_bytes, layout.mtp_latents,
                                layout.mtp_pooled, layout.mtp_pending, layout.kda_conv_bytes,
                                layout.kda_recurrent_bytes, layout.kv_lora_rank, layout.index_head_dim,
                                layout.index_kpool, layout.kda_heads, layout.kda_head_dim, layout.kda_conv_kernel};
  for (const CacheLayout::Layer& layer : layout.layers) {
    words.insert(words.end(), {static_cast<int64_t>(layer.kind), layer.latents, layer.pooled, layer.pending, layer.conv,
                               layer.recurrent});
  }
  const uint64_t fingerprint = XXH3_64bits_withSeed(words.data(), words.size() * sizeof(int64_t), 0x676c7063);
  return fingerprint == 0 ? 1 : fingerprint;  // 0 means "none"
}

Status AttachPrefixDisk(const EngineOptions& options, const CacheLayout& layout, bool mirrored, CacheManager& memory) {
  const PrefixDiskOptions& disk = options.prefix_disk;
  if (disk.directory.empty()) return Status::Ok();
  if (!options.prefix_caching) {
    return InvalidArgument("--prefix-cache-disk is a tier of the prefix cache, which is off (--no-prefix-caching)");
  }
  if (disk.model_fingerprint == 0) {
    return InvalidArgument(
        "--prefix-cache-disk needs the model's fingerprint (the command that starts the engine "
        "sets it from the model directory); this command does not support the disk tier");
  }
  if (mirrored) {
    return Unimplemented(
        "--prefix-cache-disk under several ranks is not supported yet: reads from the disk would "
        "bypass the copies every rank keeps of the cache pools");
  }
  DiskTierOptions tier;
  tier.directory = disk.directory;
  tier.size_bytes = disk.size_bytes;
  tier.fingerprint = PrefixDiskFingerprint(disk.model_fingerprint, layout);
  tier.start_empty = disk.start_empty;
  tier.io_timeout_seconds = disk.io_timeout_seconds;
  tier.before_io = disk.before_io;
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> opened, DiskTier::Open(tier));
  memory.AttachDiskTier(std::move(opened));
  return Status::Ok();
}

namespace {

// Name, size and 16 samples of 4 KiB of one file, folded into `state`.
Status FingerprintFile(const std::string& path, const std::string& name, XXH3_state_t* state) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot open ", path, " to fingerprint the model");
  struct stat info {};
  ::fstat(fd, &info);
  const int64_t size = info.st_size;
  XXH3_64bits_update(state, name.data(), name.size() + 1);
  XXH3_64bits_update(state, &size, sizeof(size));
  std::vector<char> sample(4096);
  constexpr int kSamples = 16;
  for (int i = 0; i < kSamples && size > 0; ++i) {
    const int64_t offset = std::max<int64_t>(0, (size - 4096) * i / (kSamples - 1));
    const ssize_t got = ::pread(fd, sample.data(), sample.size(), offset);
    if (got > 0) XXH3_64bits_update(state, sample.data(), static_cast<size_t>(got));
  }
  ::close(fd);
  return Status::Ok();
}

}  // namespace

Result<uint64_t> FingerprintModelDirectory(const std::string& directory) {
  DIR* dir = ::opendir(directory.c_str());
  if (dir == nullptr) return NotFound("cannot list the model directory ", directory, " to fingerprint it");
  std::vector<std::string> names;
  for (const dirent* item = ::readdir(dir); item != nullptr; item = ::readdir(dir)) {
    const std::string name = item->d_name;
    struct stat info {};
    if (name.starts_with(".") || ::stat(JoinPath(directory, name).c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
      continue;
    }
    names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  Status status = Status::Ok();
  for (const std::string& name : names) {
    status = FingerprintFile(JoinPath(directory, name), name, state);
    if (!status.ok()) break;
  }
  const uint64_t fingerprint = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  if (!status.ok()) return status;
  return fingerprint == 0 ? 1 : fingerprint;
}

}  // namespace glint
