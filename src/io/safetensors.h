// safetensors: reading (mmap, one file or a sharded checkpoint) and writing.
//
// File layout (https://github.com/huggingface/safetensors): 8-byte little-endian header length N, N bytes of
// JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the data section;
// offsets are relative to the data section. Every field is validated before any tensor byte is touched: a
// malformed file is an error naming the file, the tensor and what is wrong, never an out-of-bounds read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/file.h"
#include "base/status.h"

namespace glint {

enum class DType { kF32, kF16, kBF16, kF8E4M3, kI8, kU8, kI32, kI64 };

std::string_view DTypeName(DType dtype);  // the safetensors spelling: "F32", "BF16", "F8_E4M3", ...
Result<DType> ParseDType(std::string_view name);
size_t DTypeSize(DType dtype);

// "[4096, 154880]": a shape as error messages spell it.
std::string ShapeString(std::span<const int64_t> shape);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t data_begin = 0;  // byte offsets relative to the data section
  uint64_t data_end = 0;
  int shard = 0;  // index into Checkpoint::shard_paths()

  int64_t NumElements() const;
  uint64_t NumBytes() const { return data_end - data_begin; }
  std::string ShapeString() const;  // "[4096, 154880]"
};

// A typed, zero-copy view of one tensor's bytes inside a mapping. Valid while its Checkpoint lives.
struct TensorView {
  const TensorInfo* info = nullptr;
  std::span<const uint8_t> bytes;

  DType dtype() const { return info->dtype; }
  const std::vector<int64_t>& shape() const { return info->shape; }
  // Reinterprets the bytes; the caller has checked dtype(). Safetensors data need not be aligned, so element
  // access goes through memcpy-safe types (uint16_t for bf16, uint8_t for fp8) or the caller copies.
  template <typename T>
  std::span<const T> As() const {
    return {reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T)};
  }
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // in header order
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + N: where the data section starts in the file
};

// Parses and validates the header of a whole safetensors file held in memory. Pure; the fuzz target calls it.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> file_bytes);

// One safetensors file or a sharded checkpoint directory, mapped read-only.
class Checkpoint {
 public:
  // `path` is a .safetensors file, or a directory with model.safetensors.index.json (sharded) or exactly one
  // *.safetensors file.
  static Result<Checkpoint> Open(const std::string& path);

  const TensorInfo* Find(std::string_view name) const;
  Result<TensorView> View(std::string_view name) const;
  TensorView ViewOf(const TensorInfo& info) const;
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by name
  const std::vector<std::string>& shard_paths() const { return shard_paths_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  Status AddShard(const std::string& path, const std::vector<std::string>* expected_names);

  std::vector<std::string> shard_paths_;
  std::vector<std::unique_ptr<MappedFile>> shards_;
  std::vector<uint64_t> shard_data_offsets_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes one safetensors file. Tensors are laid out in the order added, each aligned to 64 bytes (the header is
// padded with spaces so the data section starts 8-aligned, as the reference writer does).
class SafetensorsWriter {
 public:
  Status Add(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const uint8_t> bytes);
  Status AddF32(std::string name, std::vector<int64_t> shape, std::span<const float> values);
  Status AddI32(std::string name, std::vector<int64_t> shape, std::span<const int32_t> values);
  void SetMetadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }
  // Serialises to bytes (used by tests and the fuzz corpus) or to a file, atomically.
  std::string Serialize() const;
  Status WriteTo(const std::string& path) const;

 private:
  struct Pending {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  std::vector<Pending> pending_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace glint
