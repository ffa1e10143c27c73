#include "modelgen/safetensors_stream.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace glint {
namespace {
constexpr uint64_t kAlignment = 64;
}

Result<SafetensorsStreamWriter> SafetensorsStreamWriter::Create(const std::string& path, std::vector<Entry> entries,
                                                                const std::map<std::string, std::string>& metadata) {
  SafetensorsStreamWriter writer;
  writer.path_ = path;
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const Entry& entry : entries) {
    uint64_t elements = 1;
    for (int64_t dim : entry.shape) {
      if (dim < 0) return InvalidArgument("tensor ", entry.name, " has a negative dimension");
      elements *= static_cast<uint64_t>(dim);
    }
    if (header.contains(entry.name)) return InvalidArgument("tensor ", entry.name, " is declared twice");
    offset = (offset + kAlignment - 1) / kAlignment * kAlignment;
    const uint64_t size = elements * DTypeSize(entry.dtype);
    writer.begins_.push_back(offset);
    writer.sizes_.push_back(size);
    header[entry.name] = {
        {"dtype", DTypeName(entry.dtype)}, {"shape", entry.shape}, {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string header_text = header.dump();
  while ((8 + header_text.size()) % kAlignment != 0) header_text.push_back(' ');
  writer.entries_ = std::move(entries);
  writer.data_offset_ = 8 + header_text.size();
  writer.data_size_ = offset;
  writer.total_bytes_ = writer.data_offset_ + offset;

  writer.file_ = std::fopen(path.c_str(), "wb");
  if (writer.file_ == nullptr) return IoError("cannot create '", path, "': ", std::strerror(errno));
  std::setvbuf(writer.file_, nullptr, _IOFBF, size_t{1} << 20);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>((header_text.size() >> (8 * i)) & 0xff);
  if (std::fwrite(length, 1, 8, writer.file_) != 8 ||
      std::fwrite(header_text.data(), 1, header_text.size(), writer.file_) != header_text.size()) {
    return IoError("cannot write '", path, "': ", std::strerror(errno));
  }
  return writer;
}

SafetensorsStreamWriter::SafetensorsStreamWriter(SafetensorsStreamWriter&& other) noexcept
    : path_(std::move(other.path_)),
      file_(other.file_),
      entries_(std::move(other.entries_)),
      sizes_(std::move(other.sizes_)),
      begins_(std::move(other.begins_)),
      current_(other.current_),
      written_in_current_(other.written_in_current_),
      data_position_(other.data_position_),
      total_bytes_(other.total_bytes_),
      data_offset_(other.data_offset_),
      data_size_(other.data_size_) {
  other.file_ = nullptr;
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

const SafetensorsStreamWriter::Entry* SafetensorsStreamWriter::current() const {
  // Zero-size tensors are complete as soon as they are reached.
  size_t index = current_;
  uint64_t written = written_in_current_;
  while (index < entries_.size() && written == sizes_[index]) {
    ++index;
    written = 0;
  }
  return index < entries_.size() ? &entries_[index] : nullptr;
}

Status SafetensorsStreamWriter::WritePadding(uint64_t count) {
  static const uint8_t zeros[kAlignment] = {};
  if (count > 0 && std::fwrite(zeros, 1, count, file_) != count) {
    return IoError("cannot write '", path_, "': ", std::strerror(errno));
  }
  data_position_ += count;
  return Status::Ok();
}

Status SafetensorsStreamWriter::Write(std::span<const uint8_t> bytes) {
  if (file_ == nullptr) return FailedPrecondition("'", path_, "' is closed");
  while (!bytes.empty()) {
    while (current_ < entries_.size() && written_in_current_ == sizes_[current_]) {
      ++current_;
      written_in_current_ = 0;
    }
    if (current_ >= entries_.size()) {
      return InternalError("'", path_, "': ", bytes.size(), " bytes written after the last tensor");
    }
    if (written_in_current_ == 0) GLINT_RETURN_IF_ERROR(WritePadding(begins_[current_] - data_position_));
    const uint64_t room = sizes_[current_] - written_in_current_;
    const size_t take = static_cast<size_t>(std::min<uint64_t>(room, bytes.size()));
    if (std::fwrite(bytes.data(), 1, take, file_) != take) {
      return IoError("cannot write '", path_, "': ", std::strerror(errno));
    }
    written_in_current_ += take;
    data_position_ += take;
    bytes = bytes.subspan(take);
  }
  return Status::Ok();
}

Status SafetensorsStreamWriter::Close() {
  if (file_ == nullptr) return FailedPrecondition("'", path_, "' is already closed");
  if (const Entry* missing = current()) {
    return InternalError("'", path_, "': tensor ", missing->name, " was not written completely");
  }
  // Trailing zero-size tensors may sit past the last byte written; the data section extends to their offset.
  GLINT_RETURN_IF_ERROR(WritePadding(data_size_ - data_position_));
  bool ok = std::fflush(file_) == 0;
  ok = (::fsync(::fileno(file_)) == 0) && ok;
  ok = (std::fclose(file_) == 0) && ok;
  file_ = nullptr;
  if (!ok) return IoError("cannot finish '", path_, "': ", std::strerror(errno));
  return Status::Ok();
}

}  // namespace glint
