#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "base/json_depth.h"

namespace glint {
namespace {

using Json = nlohmann::json;

// The reference implementation refuses headers above 100 MB; a real 45-layer checkpoint index is far below.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
constexpr int kMaxRank = 8;

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2}, {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kI8, "I8", 1},   {DType::kU8, "U8", 1},   {DType::kI32, "I32", 4},   {DType::kI64, "I64", 8},
};

uint64_t ReadLittleEndian64(const uint8_t* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

Result<TensorInfo> ParseTensorEntry(const std::string& name, const Json& entry, uint64_t data_size) {
  auto fail = [&](auto... parts) { return InvalidArgument("tensor '", name, "': ", parts...); };
  if (!entry.is_object()) return fail("entry is not a JSON object");
  TensorInfo info;
  info.name = name;

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) return fail("missing string field 'dtype'");
  auto dtype = ParseDType(dtype_it->get_ref<const std::string&>());
  if (!dtype.ok()) return fail(dtype.status().message());
  info.dtype = *dtype;

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) return fail("missing array field 'shape'");
  if (shape_it->size() > kMaxRank) return fail("rank ", shape_it->size(), " is above the supported ", kMaxRank);
  uint64_t elements = 1;
  for (const Json& dim : *shape_it) {
    if (!dim.is_number_unsigned()) return fail("shape entries must be non-negative integers, got ", dim.dump());
    uint64_t extent = dim.get<uint64_t>();
    if (extent > (uint64_t{1} << 48)) return fail("dimension ", extent, " is implausibly large");
    if (extent != 0 && elements > std::numeric_limits<uint64_t>::max() / extent / 8) {
      return fail("shape ", shape_it->dump(), " overflows");
    }
    elements *= extent;
    info.shape.push_back(static_cast<int64_t>(extent));
  }

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    return fail("'data_offsets' must be [begin, end] with non-negative integers");
  }
  info.data_begin = (*offsets_it)[0].get<uint64_t>();
  info.data_end = (*offsets_it)[1].get<uint64_t>();
  if (info.data_begin > info.data_end) return fail("data_offsets begin ", info.data_begin, " > end ", info.data_end);
  if (info.data_end > data_size) {
    return fail("data_offsets end ", info.data_end, " is past the data section (", data_size, " bytes)");
  }
  const uint64_t expected_bytes = elements * DTypeSize(info.dtype);
  if (info.data_end - info.data_begin != expected_bytes) {
    return fail("shape ", info.ShapeString(), " of ", DTypeName(info.dtype), " needs ", expected_bytes,
                " bytes but data_offsets cover ", info.data_end - info.data_begin);
  }
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") return fail("unknown field '", key, "'");
  }
  return info;
}

}  // namespace

std::string_view DTypeName(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  return "?";
}

Result<DType> ParseDType(std::string_view name) {
  for (const auto& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  return InvalidArgument("unsupported dtype '", name, "'; expected one of F32, F16, BF16, F8_E4M3, I8, U8, I32, I64");
}

size_t DTypeSize(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry.size;
  }
  return 0;
}

int64_t TensorInfo::NumElements() const {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  return count;
}

std::string TensorInfo::ShapeString() const { return glint::ShapeString(shape); }

std::string ShapeString(std::span<const int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> file_bytes) {
  if (file_bytes.size() < 8) return InvalidArgument("file is ", file_bytes.size(), " bytes, too short for a header");
  const uint64_t header_bytes = ReadLittleEndian64(file_bytes.data());
  if (header_bytes > kMaxHeaderBytes) {
    return InvalidArgument("header length ", header_bytes, " is above the limit of ", kMaxHeaderBytes);
  }
  if (header_bytes > file_bytes.size() - 8) {
    return InvalidArgument("header length ", header_bytes, " runs past the end of the file (", file_bytes.size(),
                           " bytes)");
  }
  const char* text = reinterpret_cast<const char*>(file_bytes.data() + 8);
  if (!JsonDepthWithin(std::string_view(text, header_bytes), kMaxJsonFileDepth)) {
    return InvalidArgument("header JSON is nested more than ", kMaxJsonFileDepth, " levels deep");
  }
  Json header = Json::parse(text, text + header_bytes, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return InvalidArgument("header is not valid JSON");
  if (!header.is_object()) return InvalidArgument("header is not a JSON object");

  SafetensorsHeader result;
  result.data_offset = 8 + header_bytes;
  const uint64_t data_size = file_bytes.size() - result.data_offset;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return InvalidArgument("__metadata__ is not a JSON object");
      for (const auto& [meta_key, meta_value] : value.items()) {
        if (!meta_value.is_string()) return InvalidArgument("__metadata__ value of '", meta_key, "' is not a string");
        result.metadata[meta_key] = meta_value.get<std::string>();
      }
      continue;
    }
    if (key.empty()) return InvalidArgument("a tensor has an empty name");
    auto info = ParseTensorEntry(key, value, data_size);
    if (!info.ok()) return info.status();
    result.tensors.push_back(std::move(info).value());
  }
  // Byte ranges must not overlap: two tensors aliasing the same bytes is a corrupt or malicious file.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& info : result.tensors) {
    if (info.NumBytes() > 0) by_offset.push_back(&info);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->data_begin < b->data_begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->data_begin < by_offset[i - 1]->data_end) {
      return InvalidArgument("tensors '", by_offset[i - 1]->name, "' and '", by_offset[i]->name,
                             "' have overlapping byte ranges");
    }
  }
  return result;
}

Result<Checkpoint> Checkpoint::Open(const std::string& path) {
  Checkpoint checkpoint;
  if (!IsDirectory(path)) {
    GLINT_RETURN_IF_ERROR(checkpoint.AddShard(path, nullptr));
  } else {
    const std::string index_path = JoinPath(path, "model.safetensors.index.json");
    if (PathExists(index_path)) {
      GLINT_ASSIGN_OR_RETURN(std::string index_text, ReadFile(index_path, size_t{64} << 20));
      if (!JsonDepthWithin(index_text, kMaxJsonFileDepth)) {
        return InvalidArgument(index_path, ": JSON nested more than ", kMaxJsonFileDepth, " levels deep");
      }
      Json index = Json::parse(index_text, nullptr, false);
      if (index.is_discarded() || !index.is_object()) {
        return InvalidArgument(index_path, ": not a JSON object");
      }
      auto map_it = index.find("weight_map");
      if (map_it == index.end() || !map_it->is_object()) {
        return InvalidArgument(index_path, ": missing object 'weight_map'");
      }
      std::map<std::string, std::vector<std::string>> names_by_shard;
      for (const auto& [name, shard] : map_it->items()) {
        if (!shard.is_string()) return InvalidArgument(index_path, ": weight_map entry '", name, "' is not a string");
        const std::string& shard_name = shard.get_ref<const std::string&>();
        if (shard_name.empty() || shard_name.find('/') != std::string::npos || shard_name == "." ||
            shard_name == "..") {
          return InvalidArgument(index_path, ": weight_map entry '", name, "' names shard '", shard_name,
                                 "'; expected a file name in the same directory");
        }
        names_by_shard[shard_name].push_back(name);
      }
      if (names_by_shard.empty()) return InvalidArgument(index_path, ": weight_map is empty");
      for (const auto& [shard_name, names] : names_by_shard) {
        const std::string shard_path = JoinPath(path, shard_name);
        if (!PathExists(shard_path)) {
          return NotFound(index_path, ": shard '", shard_name, "' (holding '", names.front(), "') does not exist");
        }
        GLINT_RETURN_IF_ERROR(checkpoint.AddShard(shard_path, &names));
      }
    } else {
      const std::string single = JoinPath(path, "model.safetensors");
      if (!PathExists(single)) {
        return NotFound("'", path, "' has neither model.safetensors.index.json nor model.safetensors");
      }
      GLINT_RETURN_IF_ERROR(checkpoint.AddShard(single, nullptr));
    }
  }
  std::sort(checkpoint.tensors_.begin(), checkpoint.tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  for (size_t i = 1; i < checkpoint.tensors_.size(); ++i) {
    if (checkpoint.tensors_[i].name == checkpoint.tensors_[i - 1].name) {
      const auto& a = checkpoint.tensors_[i - 1];
      const auto& b = checkpoint.tensors_[i];
      return InvalidArgument("tensor '", a.name, "' appears in both '", checkpoint.shard_paths_[a.shard], "' and '",
                             checkpoint.shard_paths_[b.shard], "'");
    }
  }
  return checkpoint;
}

Status Checkpoint::AddShard(const std::string& path, const std::vector<std::string>* expected_names) {
  GLINT_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(path));
  auto header = ParseSafetensorsHeader(mapped.bytes());
  if (!header.ok()) return header.status().WithContext(path);
  const int shard = static_cast<int>(shards_.size());
  if (expected_names != nullptr) {
    std::set<std::string> present;
    for (const auto& info : header->tensors) present.insert(info.name);
    for (const auto& name : *expected_names) {
      if (!present.count(name)) {
        return NotFound(path, ": the index places tensor '", name, "' in this shard but its header does not have it");
      }
    }
    std::set<std::string> expected(expected_names->begin(), expected_names->end());
    for (const auto& name : present) {
      if (!expected.count(name)) {
        return InvalidArgument(path, ": tensor '", name, "' is in this shard but not in the index's weight_map");
      }
    }
  }
  for (auto& info : header->tensors) {
    info.shard = shard;
    tensors_.push_back(std::move(info));
  }
  for (const auto& [key, value] : header->metadata) metadata_[key] = value;
  shard_paths_.push_back(path);
  shard_data_offsets_.push_back(header->data_offset);
  shards_.push_back(std::make_unique<MappedFile>(std::move(mapped)));
  return Status::Ok();
}

const TensorInfo* Checkpoint::Find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo& info, std::string_view key) { return info.name < key; });
  if (it == tensors_.end() || it->name != name) return nullptr;
  return &*it;
}

TensorView Checkpoint::ViewOf(const TensorInfo& info) const {
  const auto& mapped = *shards_[info.shard];
  const uint64_t begin = shard_data_offsets_[info.shard] + info.data_begin;
  return TensorView{&info, mapped.bytes().subspan(begin, info.NumBytes())};
}

Result<TensorView> Checkpoint::View(std::string_view name) const {
  const TensorInfo* info = Find(name);
  if (info == nullptr) return NotFound("tensor '", name, "' is not in the checkpoint");
  return ViewOf(*info);
}

Status SafetensorsWriter::Add(std::string name, DType dtype, std::vector<int64_t> shape,
                              std::span<const uint8_t> bytes) {
  int64_t elements = 1;
  for (int64_t extent : shape) {
    if (extent < 0) return InvalidArgument("tensor '", name, "': negative dimension");
    elements *= extent;
  }
  if (static_cast<uint64_t>(elements) * DTypeSize(dtype) != bytes.size()) {
    return InvalidArgument("tensor '", name, "': ", bytes.size(), " bytes do not match its shape and dtype");
  }
  for (const auto& existing : pending_) {
    if (existing.name == name) return InvalidArgument("tensor '", name, "' added twice");
  }
  pending_.push_back({std::move(name), dtype, std::move(shape),
                      std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size())});
  return Status::Ok();
}

Status SafetensorsWriter::AddF32(std::string name, std::vector<int64_t> shape, std::span<const float> values) {
  return Add(std::move(name), DType::kF32, std::move(shape),
             std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()), values.size_bytes()));
}

Status SafetensorsWriter::AddI32(std::string name, std::vector<int64_t> shape, std::span<const int32_t> values) {
  return Add(std::move(name), DType::kI32, std::move(shape),
             std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()), values.size_bytes()));
}

std::string SafetensorsWriter::Serialize() const {
  constexpr uint64_t kAlignment = 64;
  Json header = Json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  std::vector<uint64_t> begins;
  for (const auto& tensor : pending_) {
    offset = (offset + kAlignment - 1) / kAlignment * kAlignment;
    begins.push_back(offset);
    header[tensor.name] = {{"dtype", DTypeName(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + tensor.bytes.size()}}};
    offset += tensor.bytes.size();
  }
  std::string header_text = header.dump();
  while ((8 + header_text.size()) % kAlignment != 0) header_text.push_back(' ');
  std::string out;
  out.reserve(8 + header_text.size() + offset);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((header_text.size() >> (8 * i)) & 0xff));
  out += header_text;
  const size_t data_start = out.size();
  out.resize(data_start + offset, '\0');
  for (size_t i = 0; i < pending_.size(); ++i) {
    std::memcpy(out.data() + data_start + begins[i], pending_[i].bytes.data(), pending_[i].bytes.size());
  }
  return out;
}

Status SafetensorsWriter::WriteTo(const std::string& path) const { return WriteFileAtomic(path, Serialize()); }

}  // namespace glint
