// The converted-weights container (`glint convert`): packed kernel-ready weights that load by mmap, with no
// conversion. One file, `model.glint`:
//
//   bytes 0–7    magic "GLINTWC1"
//   bytes 8–15   header length N (little-endian u64)
//   N bytes      JSON header: {"container_version": 3, "metadata": {str: str},
//                              "tensors": [{"name", "kind", "dims": [int…], "blobs": [[offset, bytes]…],
//                                           "xxh3": hex}…],
//                              "extents": [[name, offset, bytes, hex]…]}
//   data         every blob at its absolute file offset, aligned to 64 bytes (4096 for blobs ≥ 1 MiB)
//
// An extent is a run of consecutive tensors (e.g. one routed expert's gate_up and down) laid out as one contiguous
// range that starts and ends on a 4 KiB boundary, so it can be read with one O_DIRECT read into an aligned buffer
// (docs/expert-cache.md). Inside an extent blobs are 64-byte aligned.
//
// Checksums (version 3): every extent carries the XXH3-64 of its whole byte range (padding included: what one read
// of it returns), and every tensor outside an extent carries "xxh3", the XXH3-64 of its blobs' bytes in order; both
// as 16 lowercase hex digits. They catch a file changed in place after `glint convert` (same size and mtime, so
// nothing else notices) and a disk that returns wrong bytes: the model checks the tensors it binds at load
// (VerifyEntry) and the expert cache checks each extent it reads (VerifyContainerExtent). XXH3 because it hashes at
// memory bandwidth (tens of GB/s per core, so the load pass costs about what reading the pages in costs) and is
// already a dependency (Debian's libxxhash, the prefix-cache keys); it detects accidents and careless edits, not
// an attacker, who could rewrite the header's sums too (docs/server.md "Files under a running server").
// Version 2 (extents, no checksums) and version 1 files are refused with a message to re-run `glint convert`.
//
// The container is generic: `kind` and `dims` are the model layer's business (e.g. kind "int8" with dims
// [rows, cols, group] and blobs [codes, scales]); the reader checks that every blob lies inside the file, is
// aligned and does not overlap the header, so a truncated or corrupt file is an error, never a bad read.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/status.h"

namespace glint {

inline constexpr char kContainerMagic[8] = {'G', 'L', 'I', 'N', 'T', 'W', 'C', '1'};
inline constexpr const char* kContainerFileName = "model.glint";

// What the writer is told before any data: names, kinds, dims and blob sizes (offsets are assigned).
struct ContainerEntrySpec {
  std::string name;
  std::string kind;
  std::vector<int64_t> dims;
  std::vector<uint64_t> blob_bytes;
  std::string extent = {};  // non-empty: the extent this tensor belongs to (consecutive entries share one)
};

// One contiguous 4 KiB-aligned range of the file: [offset, offset + bytes), both multiples of kExtentAlignment.
struct ContainerExtent {
  std::string name;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // XXH3-64 of the range
};

inline constexpr uint64_t kExtentAlignment = 4096;  // O_DIRECT needs offsets, sizes and buffers on this boundary
inline constexpr int kContainerVersion = 3;

// The container's checksum of `bytes` (XXH3-64, seed 0).
uint64_t ContainerChecksum(std::span<const uint8_t> bytes);

// Checks `bytes`, the extent as read from the container at `path` (e.g. into the expert cache), against the
// extent's checksum: a DataLoss error naming the file and the extent, or Ok.
Status VerifyContainerExtent(const std::string& path, const ContainerExtent& extent, std::span<const uint8_t> bytes);

struct ContainerEntry {
  std::string name;
  std::string kind;
  std::vector<int64_t> dims;
  std::vector<std::span<const uint8_t>> blobs;  // views into the mapping
  int64_t extent = -1;                          // index into ContainerFile::extents(), or -1
  uint64_t checksum = 0;                        // outside an extent: XXH3-64 of the blobs in order
};

// Writes a container in two phases: the whole layout up front (so the header can come first and the data can be
// streamed), then every blob in entry order. The file appears under `path` only after Finish().
class ContainerWriter {
 public:
  static Result<std::unique_ptr<ContainerWriter>> Create(const std::string& path,
                                                         std::vector<ContainerEntrySpec> entries,
                                                         std::map<std::string, std::string> metadata);
  ~ContainerWriter();

  // The next blob, in order: entry 0 blob 0, entry 0 blob 1, …; its size must be as declared.
  Status WriteNextBlob(std::span<const uint8_t> bytes);
  Status Finish();
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  ContainerWriter() = default;
  // Creates the temporary file and writes the magic, the header length and `header_text` (the layout, checksums
  // as placeholders).
  Status Start(const std::string& path, const std::string& header_text);
  Status PadTo(uint64_t offset);  // zeros up to file offset `offset`
  // Writes `bytes` at position_, feeding the checksum of the extent they fall in (split at extent boundaries).
  Status Emit(std::span<const uint8_t> bytes);
  // The header with the checksums filled in, over the placeholder written first (same length: fixed-width hex).
  Status RewriteHeader();

  std::string path_, tmp_path_;
  std::FILE* file_ = nullptr;
  std::vector<ContainerEntrySpec> entries_;
  std::vector<std::vector<uint64_t>> offsets_;
  std::vector<ContainerExtent> extents_;  // in file order; checksums filled as their bytes are written
  std::vector<uint64_t> checksums_;       // [entries] for entries outside an extent
  std::unique_ptr<nlohmann::json> header_;
  uint64_t header_bytes_ = 0;
  struct HashState;
  std::unique_ptr<HashState> tensor_hash_, extent_hash_;
  size_t next_extent_ = 0;  // the extent position_ is in or before
  size_t next_entry_ = 0, next_blob_ = 0;
  uint64_t position_ = 0, total_bytes_ = 0;
};

class ContainerFile {
 public:
  // Maps `path` read-only, without reading its pages in: the model reads in the tensors it binds (FastModel::Load's
  // TouchPages), a page at a time where it needs them.
  static Result<ContainerFile> Open(const std::string& path);

  const ContainerEntry* Find(const std::string& name) const;
  const std::vector<ContainerEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<ContainerExtent>& extents() const { return extents_; }
  const ContainerExtent* FindExtent(const std::string& name) const;
  uint64_t size() const { return file_->size(); }
  std::span<const uint8_t> bytes() const { return file_->bytes(); }
  const std::string& path() const { return file_->path(); }
  // Checks the mapped bytes of `entry` against the header's checksum: its extent's whole range when it lies in one,
  // else its blobs. Reads every page of them; `release_pages` then drops them from this process's resident set again
  // (MappedFile::Release), for a rank that keeps only parts of the tensors it hashed. A DataLoss error names the file
  // and the tensor or extent.
  Status VerifyEntry(const ContainerEntry& entry, bool release_pages = false) const;
  // Where a view returned by this container lies in the file.
  uint64_t OffsetOf(const uint8_t* pointer) const { return static_cast<uint64_t>(pointer - file_->bytes().data()); }
  // Whether `bytes` lie inside the mapped file (a view this container returned), and their pages dropped from the
  // resident set (MappedFile::Release): for tensors copied at load (tensor-parallel slices).
  bool Holds(std::span<const uint8_t> bytes) const {
    const std::span<const uint8_t> all = file_->bytes();
    return bytes.data() >= all.data() && bytes.data() + bytes.size() <= all.data() + all.size();
  }
  Status Release(std::span<const uint8_t> bytes) const { return file_->Release(bytes); }
  // Drops the file's cached pages under `bytes` that no process maps (MappedFile::Uncache): read again from disk.
  Status Uncache(std::span<const uint8_t> bytes) const { return file_->Uncache(bytes); }
  // This process's resident bytes of the file and those on 2 MB pages (MappedFile::Resident).
  MappedFile::Residency Resident() const { return file_->Resident(); }

 private:
  Status ReadExtents(const nlohmann::json& header, uint64_t data_begin);
  // The "metadata" and "tensors" of the header (after the extents, which tensors name); errors name `path`.
  Status ReadMetadata(const nlohmann::json& header, const std::string& path);
  Status ReadTensors(const nlohmann::json& tensors, uint64_t data_begin, const std::string& path);

  std::unique_ptr<MappedFile> file_;
  std::vector<ContainerEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  std::vector<ContainerExtent> extents_;
  std::map<std::string, size_t> extent_index_;
};

}  // namespace glint
