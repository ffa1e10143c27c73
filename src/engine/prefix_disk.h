// Attaching the prefix cache's disk tier to an engine's cache manager (docs/engine.md "Disk tier").
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "engine/capacity.h"
#include "memory/cache_manager.h"
#include "model/cache_layout.h"

namespace glint {

// The fingerprint the disk tier's files carry: the model's (options.model_fingerprint) combined with every field
// of the cache layout that decides what the bytes of a block or checkpoint mean. Any new layout option (a cache
// dtype, …) must be added here, or files written under one setting would be read under another.
uint64_t PrefixDiskFingerprint(uint64_t model_fingerprint, const CacheLayout& layout);

// Opens options.prefix_disk.directory and attaches it to `memory`. Refused, with what to change, when prefix caching
// is off, the model's fingerprint is missing, or the pools are mirrored to other ranks (a disk read would
// bypass the mirror).
Status AttachPrefixDisk(const EngineOptions& options, const CacheLayout& layout, bool mirrored, CacheManager& memory);

// A fingerprint of a model directory's weights and config: every regular file's name and size, and 16 samples of
// 4 KiB spread over it (a fine-tune changes nearly every byte; reading all of a 300 GB checkpoint is not an option).
Result<uint64_t> FingerprintModelDirectory(const std::string& directory);

}  // namespace glint
