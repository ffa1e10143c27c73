#include "io/weight_container.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "base/json_depth.h"

namespace glint {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t{256} << 20;
constexpr uint64_t kLargeBlob = uint64_t{1} << 20;

uint64_t AlignFor(uint64_t bytes) { return bytes >= kLargeBlob ? 4096 : 64; }
uint64_t RoundUp(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

void PutLittleEndian64(uint8_t* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint64_t GetLittleEndian64(const uint8_t* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

// Checksums are written as 16 lowercase hex digits: fixed width, so the header written before the data (with
// placeholders) and the one written after (with the sums) have the same length.
std::string ChecksumHex(uint64_t checksum) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(checksum));
  return text;
}

bool ParseChecksumHex(const Json& value, uint64_t& checksum) {
  if (!value.is_string()) return false;
  const std::string& text = value.get_ref<const std::string&>();
  if (text.size() != 16) return false;
  checksum = 0;
  for (char c : text) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return false;
    checksum = (checksum << 4) | static_cast<uint64_t>(digit);
  }
  return true;
}

// A part of the file whose bytes are not those `glint convert` wrote: what the engine, the expert cache and /health
// report (the phrase "does not match its checksum" is what tests and operators look for).
Status ChecksumMismatch(const std::string& path, const std::string& what, uint64_t sum, uint64_t expected) {
  return DataLoss("'", path, "' ", what, " does not match its checksum (", ChecksumHex(sum), ", expected ",
                  ChecksumHex(expected),
                  "): the file changed after `glint convert` wrote it, or the disk returned wrong bytes; re-run "
                  "`glint convert` and restart");
}

template <typename... Parts>
Status NotAContainer(const std::string& path, const Parts&... parts) {
  return InvalidArgument("'", path, "' is not a valid glint container: ", parts...);
}

}  // namespace

uint64_t ContainerChecksum(std::span<const uint8_t> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

// A streaming XXH3-64 (the one-shot ContainerChecksum of the concatenated input).
struct ContainerWriter::HashState {
  HashState() : state(XXH3_createState()) {
    if (state == nullptr) throw std::bad_alloc();
    Reset();
  }
  ~HashState() { XXH3_freeState(state); }
  HashState(const HashState&) = delete;
  HashState& operator=(const HashState&) = delete;
  void Reset() { XXH3_64bits_reset(state); }
  void Update(std::span<const uint8_t> bytes) { XXH3_64bits_update(state, bytes.data(), bytes.size()); }
  uint64_t Digest() const { return XXH3_64bits_digest(state); }
  XXH3_state_t* state;
};

Result<std::unique_ptr<ContainerWriter>> ContainerWriter::Create(const std::string& path,
                                                                 std::vector<ContainerEntrySpec> entries,
                                                                 std::map<std::string, std::string> metadata) {
  std::set<std::string> names;
  for (const ContainerEntrySpec& entry : entries) {
    if (!names.insert(entry.name).second) return InvalidArgument("container tensor '", entry.name, "' is listed twice");
  }
  // The header's size depends on the offsets written into it and vice versa: assume a header size, lay out, and
  // grow the assumption until the serialised header fits.
  std::unique_ptr<ContainerWriter> writer(new ContainerWriter());
  writer->entries_ = std::move(entries);
  std::string header_text;
  // The sums are known only once the data is written (RewriteHeader); until then each is the sum of no bytes, which
  // is right for a tensor without blobs.
  const std::string kPlaceholder = ChecksumHex(ContainerChecksum({}));
  for (uint64_t reserved = 4096;; reserved *= 2) {
    Json tensors = Json::array(), extents = Json::array();
    uint64_t position = RoundUp(16 + reserved, 4096);
    writer->offsets_.assign(writer->entries_.size(), {});
    writer->extents_.clear();
    std::set<std::string> closed_extents;
    // An extent opens at a 4 KiB boundary with its first tensor and closes, padded to 4 KiB, before the next tensor
    // that is not in it.
    auto close_extent = [&] {
      if (writer->extents_.empty() || writer->extents_.back().bytes != 0) return;
      position = RoundUp(position, kExtentAlignment);
      ContainerExtent& open = writer->extents_.back();
      open.bytes = position - open.offset;
      extents.push_back(Json::array({open.name, open.offset, open.bytes, kPlaceholder}));
      closed_extents.insert(open.name);
    };
    for (size_t e = 0; e < writer->entries_.size(); ++e) {
      const ContainerEntrySpec& entry = writer->entries_[e];
      const bool continues = !entry.extent.empty() && !writer->extents_.empty() && writer->extents_.back().bytes == 0 &&
                             writer->extents_.back().name == entry.extent;
      if (!continues) {
        close_extent();
        if (!entry.extent.empty()) {
          if (closed_extents.count(entry.extent) != 0) {
            return InvalidArgument("container extent '", entry.extent, "' is not one run of consecutive tensors");
          }
          position = RoundUp(position, kExtentAlignment);
          writer->extents_.push_back({entry.extent, position, 0});
        }
      }
      Json blobs = Json::array();
      for (uint64_t bytes : entry.blob_bytes) {
        position = RoundUp(position, entry.extent.empty() ? AlignFor(bytes) : 64);
        writer->offsets_[e].push_back(position);
        blobs.push_back(Json::array({position, bytes}));
        position += bytes;
      }
      Json tensor = {{"name", entry.name}, {"kind", entry.kind}, {"dims", entry.dims}, {"blobs", blobs}};
      if (!entry.extent.empty()) tensor["extent"] = entry.extent;
      if (entry.extent.empty()) tensor["xxh3"] = kPlaceholder;  // an extent's tensors are covered by its sum
      tensors.push_back(std::move(tensor));
    }
    close_extent();
    Json header = {
        {"container_version", kContainerVersion}, {"metadata", metadata}, {"tensors", tensors}, {"extents", extents}};
    header_text = header.dump();
    if (header_text.size() <= reserved) {
      header_text.resize(reserved, ' ');  // padding keeps the computed offsets valid
      writer->total_bytes_ = position;
      writer->header_ = std::make_unique<Json>(std::move(header));
      writer->header_bytes_ = reserved;
      break;
    }
  }
  GLINT_RETURN_IF_ERROR(writer->Start(path, header_text));
  return writer;
}

Status ContainerWriter::Start(const std::string& path, const std::string& header_text) {
  checksums_.assign(entries_.size(), ContainerChecksum({}));
  tensor_hash_ = std::make_unique<HashState>();
  extent_hash_ = std::make_unique<HashState>();
  path_ = path;
  tmp_path_ = path + ".tmp";
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (file_ == nullptr) return IoError("cannot create '", tmp_path_, "': ", std::strerror(errno));
  uint8_t prefix[16];
  std::memcpy(prefix, kContainerMagic, 8);
  PutLittleEndian64(prefix + 8, header_text.size());
  if (std::fwrite(prefix, 1, 16, file_) != 16 ||
      std::fwrite(header_text.data(), 1, header_text.size(), file_) != header_text.size()) {
    return IoError("cannot write '", tmp_path_, "': ", std::strerror(errno));
  }
  position_ = 16 + header_text.size();
  return Status::Ok();
}

ContainerWriter::~ContainerWriter() {
  if (file_ != nullptr) {  // not finished: leave nothing behind
    std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

Status ContainerWriter::PadTo(uint64_t offset) {
  static const uint8_t kZeros[4096] = {};
  while (position_ < offset) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof(kZeros), offset - position_));
    GLINT_RETURN_IF_ERROR(Emit(std::span<const uint8_t>(kZeros, n)));
  }
  return Status::Ok();
}

Status ContainerWriter::Emit(std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    size_t take = bytes.size();
    bool in_extent = false;
    if (next_extent_ < extents_.size()) {
      const ContainerExtent& extent = extents_[next_extent_];
      if (position_ < extent.offset) {
        take = static_cast<size_t>(std::min<uint64_t>(take, extent.offset - position_));
      } else {
        take = static_cast<size_t>(std::min<uint64_t>(take, extent.offset + extent.bytes - position_));
        in_extent = true;
      }
    }
    if (std::fwrite(bytes.data(), 1, take, file_) != take) {
      return IoError("cannot write '", tmp_path_, "': ", std::strerror(errno));
    }
    if (in_extent) {
      extent_hash_->Update(bytes.first(take));
      ContainerExtent& extent = extents_[next_extent_];
      if (position_ + take == extent.offset + extent.bytes) {  // the extent's last byte: its sum is complete
        extent.checksum = extent_hash_->Digest();
        extent_hash_->Reset();
        ++next_extent_;
      }
    }
    position_ += take;
    bytes = bytes.subspan(take);
  }
  return Status::Ok();
}

Status ContainerWriter::RewriteHeader() {
  Json& header = *header_;
  for (size_t e = 0; e < entries_.size(); ++e) {
    if (entries_[e].extent.empty()) header["tensors"][e]["xxh3"] = ChecksumHex(checksums_[e]);
  }
  for (size_t x = 0; x < extents_.size(); ++x) header["extents"][x][3] = ChecksumHex(extents_[x].checksum);
  std::string text = header.dump();
  if (text.size() > header_bytes_) return InternalError("container: the header grew when its checksums were filled");
  text.resize(header_bytes_, ' ');
  if (std::fseek(file_, 16, SEEK_SET) != 0 || std::fwrite(text.data(), 1, text.size(), file_) != text.size()) {
    return IoError("cannot write '", tmp_path_, "': ", std::strerror(errno));
  }
  return Status::Ok();
}

Status ContainerWriter::WriteNextBlob(std::span<const uint8_t> bytes) {
  while (next_entry_ < entries_.size() && next_blob_ >= entries_[next_entry_].blob_bytes.size()) {
    ++next_entry_;
    next_blob_ = 0;
  }
  if (next_entry_ >= entries_.size()) return InternalError("container: more blobs written than declared");
  const ContainerEntrySpec& entry = entries_[next_entry_];
  if (bytes.size() != entry.blob_bytes[next_blob_]) {
    return InternalError("container tensor '", entry.name, "' blob ", next_blob_, ": ", bytes.size(),
                         " bytes written, ", entry.blob_bytes[next_blob_], " declared");
  }
  GLINT_RETURN_IF_ERROR(PadTo(offsets_[next_entry_][next_blob_]));
  GLINT_RETURN_IF_ERROR(Emit(bytes));
  if (entry.extent.empty()) {  // the tensor's sum: its blobs in order, without the padding between them
    if (next_blob_ == 0) tensor_hash_->Reset();
    tensor_hash_->Update(bytes);
    if (next_blob_ + 1 == entry.blob_bytes.size()) checksums_[next_entry_] = tensor_hash_->Digest();
  }
  ++next_blob_;
  return Status::Ok();
}

Status ContainerWriter::Finish() {
  while (next_entry_ < entries_.size() && next_blob_ >= entries_[next_entry_].blob_bytes.size()) {
    ++next_entry_;
    next_blob_ = 0;
  }
  if (next_entry_ < entries_.size()) {
    return InternalError("container: tensor '", entries_[next_entry_].name, "' was never written");
  }
  GLINT_RETURN_IF_ERROR(PadTo(total_bytes_));  // a last extent ends on its 4 KiB boundary inside the file
  if (next_extent_ != extents_.size()) return InternalError("container: an extent was not written to its end");
  GLINT_RETURN_IF_ERROR(RewriteHeader());
  bool ok = std::fflush(file_) == 0;
  ok = ::fsync(::fileno(file_)) == 0 && ok;
  // The written pages, clean once synced, leave the page cache: the cache would keep them in the small folios the
  // writes made, and a load mapping them then gets 4 KB pages for good; read in again by that load (advised
  // MADV_HUGEPAGE, MappedFile::Open) they come as 2 MB pages where the kernel supports it, which the products
  // stream faster from (docs/performance.md "Weights on 2 MB pages"). Advice: an error changes nothing.
  if (ok) ::posix_fadvise(::fileno(file_), 0, 0, POSIX_FADV_DONTNEED);
  ok = std::fclose(file_) == 0 && ok;
  file_ = nullptr;
  if (!ok) {
    std::remove(tmp_path_.c_str());
    return IoError("cannot write '", tmp_path_, "': ", std::strerror(errno));
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    std::remove(tmp_path_.c_str());
    return IoError("cannot rename '", tmp_path_, "' to '", path_, "': ", std::strerror(errno));
  }
  return Status::Ok();
}

Result<ContainerFile> ContainerFile::Open(const std::string& path) {
  GLINT_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(path));
  ContainerFile container;
  container.file_ = std::make_unique<MappedFile>(std::move(mapped));
  const std::span<const uint8_t> bytes = container.file_->bytes();
  auto fail = [&](auto... parts) { return NotAContainer(path, parts...); };
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kContainerMagic, 8) != 0) {
    return fail("missing the GLINTWC1 magic (write one with `glint convert`)");
  }
  const uint64_t header_bytes = GetLittleEndian64(bytes.data() + 8);
  if (header_bytes > kMaxHeaderBytes || header_bytes > bytes.size() - 16) {
    return fail("header length ", header_bytes, " does not fit the file of ", bytes.size(), " bytes");
  }
  const uint64_t data_begin = 16 + header_bytes;
  if (!JsonDepthWithin(std::string_view(reinterpret_cast<const char*>(bytes.data()) + 16, header_bytes),
                       kMaxJsonFileDepth)) {
    return fail("the header JSON is nested more than ", kMaxJsonFileDepth, " levels deep");
  }
  Json header = Json::parse(bytes.begin() + 16, bytes.begin() + data_begin, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return fail("the header is not a JSON object");
  // Json::value throws when the key holds another type: check it first (a fuzzer found an array there).
  int64_t version = 0;
  if (header.contains("container_version")) {
    if (!header["container_version"].is_number_integer()) {
      return fail("container_version is not an integer (expected ", kContainerVersion, ")");
    }
    version = header["container_version"].get<int64_t>();
  }
  if (version == 1 || version == 2) {
    return fail("container_version ", version,
                version == 1 ? " predates per-expert extents and checksums" : " has no checksums", " (version ",
                kContainerVersion, " has them); re-run `glint convert` to rewrite it");
  }
  if (version != kContainerVersion) return fail("unsupported container_version (expected ", kContainerVersion, ")");
  GLINT_RETURN_IF_ERROR(container.ReadExtents(header, data_begin).WithContext(StrCat("'", path, "'")));
  GLINT_RETURN_IF_ERROR(container.ReadMetadata(header, path));
  GLINT_RETURN_IF_ERROR(container.ReadTensors(header["tensors"], data_begin, path));
  return container;
}

Status ContainerFile::ReadMetadata(const Json& header, const std::string& path) {
  if (!header.contains("metadata")) return Status::Ok();
  if (!header["metadata"].is_object()) return NotAContainer(path, "'metadata' is not an object");
  for (const auto& [key, value] : header["metadata"].items()) {
    if (!value.is_string()) return NotAContainer(path, "metadata '", key, "' is not a string");
    metadata_[key] = value.get<std::string>();
  }
  return Status::Ok();
}

Status ContainerFile::ReadTensors(const Json& tensors, uint64_t data_begin, const std::string& path) {
  const std::span<const uint8_t> bytes = file_->bytes();
  auto fail = [&](auto... parts) { return NotAContainer(path, parts...); };
  if (!tensors.is_array()) return fail("'tensors' is not an array");
  for (const Json& tensor : tensors) {
    if (!tensor.is_object() || !tensor.contains("name") || !tensor["name"].is_string() || !tensor.contains("kind") ||
        !tensor["kind"].is_string() || !tensor.contains("dims") || !tensor["dims"].is_array() ||
        !tensor.contains("blobs") || !tensor["blobs"].is_array()) {
      return fail("a tensor entry lacks name, kind, dims or blobs: ", tensor.dump().substr(0, 200));
    }
    ContainerEntry entry;
    entry.name = tensor["name"].get<std::string>();
    entry.kind = tensor["kind"].get<std::string>();
    for (const Json& dim : tensor["dims"]) {
      if (!dim.is_number_integer()) return fail("tensor '", entry.name, "' has a non-integer dim");
      entry.dims.push_back(dim.get<int64_t>());
    }
    for (const Json& blob : tensor["blobs"]) {
      if (!blob.is_array() || blob.size() != 2 || !blob[0].is_number_unsigned() || !blob[1].is_number_unsigned()) {
        return fail("tensor '", entry.name, "' has a blob that is not [offset, bytes]");
      }
      const uint64_t offset = blob[0].get<uint64_t>(), size = blob[1].get<uint64_t>();
      if (offset < data_begin || offset > bytes.size() || size > bytes.size() - offset) {
        return fail("tensor '", entry.name, "' blob [", offset, ", +", size, ") lies outside the data section [",
                    data_begin, ", ", bytes.size(), ") (a truncated file?)");
      }
      if (offset % 64 != 0) return fail("tensor '", entry.name, "' blob at ", offset, " is not 64-byte aligned");
      entry.blobs.push_back(bytes.subspan(offset, size));
    }
    if (tensor.contains("extent")) {
      const auto it =
          tensor["extent"].is_string() ? extent_index_.find(tensor["extent"].get<std::string>()) : extent_index_.end();
      if (it == extent_index_.end()) return fail("tensor '", entry.name, "' names an unknown extent");
      const ContainerExtent& extent = extents_[it->second];
      for (const auto& blob : entry.blobs) {
        const uint64_t offset = static_cast<uint64_t>(blob.data() - bytes.data());
        if (offset < extent.offset || offset + blob.size() > extent.offset + extent.bytes) {
          return fail("tensor '", entry.name, "' has a blob outside its extent '", extent.name, "'");
        }
      }
      entry.extent = static_cast<int64_t>(it->second);
    } else if (!tensor.contains("xxh3") || !ParseChecksumHex(tensor["xxh3"], entry.checksum)) {
      return fail("tensor '", entry.name, "' has no checksum (\"xxh3\": 16 hex digits)");
    }
    if (!index_.emplace(entry.name, entries_.size()).second) return fail("tensor '", entry.name, "' is listed twice");
    entries_.push_back(std::move(entry));
  }
  return Status::Ok();
}

Status ContainerFile::ReadExtents(const nlohmann::json& header, uint64_t data_begin) {
  const auto fail = [](auto... parts) { return InvalidArgument("not a valid glint container: ", parts...); };
  if (!header.contains("extents") || !header["extents"].is_array()) return fail("'extents' is not an array");
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const Json& extent : header["extents"]) {
    ContainerExtent parsed;
    if (!extent.is_array() || extent.size() != 4 || !extent[0].is_string() || !extent[1].is_number_unsigned() ||
        !extent[2].is_number_unsigned() || !ParseChecksumHex(extent[3], parsed.checksum)) {
      return fail("an extent is not [name, offset, bytes, checksum (16 hex digits)]");
    }
    parsed.name = extent[0].get<std::string>();
    parsed.offset = extent[1].get<uint64_t>();
    parsed.bytes = extent[2].get<uint64_t>();
    if (parsed.offset % kExtentAlignment != 0 || parsed.bytes % kExtentAlignment != 0 || parsed.offset < data_begin ||
        parsed.offset > size() || parsed.bytes > size() - parsed.offset) {
      return fail("extent '", parsed.name, "' [", parsed.offset, ", +", parsed.bytes,
                  ") is not 4 KiB-aligned or lies outside the data section of the ", size(),
                  "-byte file (a truncated file?)");
    }
    if (!extent_index_.emplace(parsed.name, extents_.size()).second) {
      return fail("extent '", parsed.name, "' is listed twice");
    }
    ranges.emplace_back(parsed.offset, parsed.bytes);
    extents_.push_back(std::move(parsed));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i - 1].first + ranges[i - 1].second > ranges[i].first) return fail("two extents overlap");
  }
  return Status::Ok();
}

Status VerifyContainerExtent(const std::string& path, const ContainerExtent& extent, std::span<const uint8_t> bytes) {
  const uint64_t sum = ContainerChecksum(bytes);
  if (bytes.size() == extent.bytes && sum == extent.checksum) return Status::Ok();
  return ChecksumMismatch(
      path, StrCat("extent '", extent.name, "' (bytes ", extent.offset, " .. ", extent.offset + extent.bytes, ")"), sum,
      extent.checksum);
}

Status ContainerFile::VerifyEntry(const ContainerEntry& entry, bool release_pages) const {
  if (entry.extent >= 0) {
    const ContainerExtent& extent = extents_[entry.extent];
    const std::span<const uint8_t> bytes = file_->bytes().subspan(extent.offset, extent.bytes);
    GLINT_RETURN_IF_ERROR(VerifyContainerExtent(path(), extent, bytes));
    return release_pages ? file_->Release(bytes) : Status::Ok();
  }
  XXH3_state_t* state = XXH3_createState();
  if (state == nullptr) return ResourceExhausted("no memory for a checksum state");
  XXH3_64bits_reset(state);
  for (const std::span<const uint8_t>& blob : entry.blobs) XXH3_64bits_update(state, blob.data(), blob.size());
  const uint64_t sum = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  for (const std::span<const uint8_t>& blob : entry.blobs) {
    if (release_pages) GLINT_RETURN_IF_ERROR(file_->Release(blob));
  }
  if (sum == entry.checksum) return Status::Ok();
  return ChecksumMismatch(path(), StrCat("tensor '", entry.name, "'"), sum, entry.checksum);
}

const ContainerExtent* ContainerFile::FindExtent(const std::string& name) const {
  auto it = extent_index_.find(name);
  return it == extent_index_.end() ? nullptr : &extents_[it->second];
}

const ContainerEntry* ContainerFile::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

}  // namespace glint
