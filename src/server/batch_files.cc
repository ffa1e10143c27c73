#include "server/batch_files.h"

#include <algorithm>
#include <ctime>

#include "base/log.h"
#include "server/response_format.h"

namespace glint::server {
namespace {

constexpr std::string_view kMetaSuffix = ".meta.json";
constexpr size_t kMaxMetaBytes = 64 << 10;

bool IsUpload(const StoredFile& file) { return file.purpose == "batch"; }

ApiError FileNotFound(const std::string& id) {
  return ApiError{404, "invalid_request_error", StrCat("no file with id '", id.substr(0, 128), "'"), "file_id",
                  "not_found"};
}

ApiError TooLarge(std::string message) {
  return ApiError{413, "invalid_request_error", std::move(message), "file", "file_too_large"};
}

std::optional<StoredFile> FileFromJson(const Json& meta) {
  try {
    StoredFile file;
    file.id = meta.at("id").get<std::string>();
    file.filename = meta.at("filename").get<std::string>();
    file.purpose = meta.at("purpose").get<std::string>();
    file.bytes = meta.at("bytes").get<int64_t>();
    file.created_at = meta.at("created_at").get<int64_t>();
    if (!IsPlainName(file.id) || file.bytes < 0) return std::nullopt;
    return file;
  } catch (const Json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

ApiError StorageError(const std::string& message) {
  return ApiError{500, "server_error", StrCat("batch storage: ", message), "", "storage_error"};
}

const BatchDirectory* BatchStorage::Get(bool create, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (directory_ != nullptr) return directory_.get();
  auto opened = BatchDirectory::Open(path_, create);
  if (!opened.ok()) {
    if (error != nullptr) {
      *error = opened.status().code() == ErrorCode::kNotFound && !create ? "" : opened.status().message();
    }
    return nullptr;
  }
  directory_ = std::move(opened).value();
  LogInfo("batch directory: ", path_);
  return directory_.get();
}

Json StoredFile::ToJson() const {
  return {{"id", id},
          {"object", "file"},
          {"bytes", bytes},
          {"created_at", created_at},
          {"filename", filename},
          {"purpose", purpose},
          {"status", "processed"}};
}

std::optional<ApiError> FileStore::Load(bool create) {
  if (loaded_) return std::nullopt;
  std::string error;
  const BatchDirectory* directory = storage_.Get(create, &error);
  if (directory == nullptr) {
    if (error.empty()) return std::nullopt;  // no directory yet, and nothing asked to create one: no files
    return StorageError(error);
  }
  auto names = directory->List(kMetaSuffix);
  if (!names.ok()) return StorageError(names.status().message());
  for (const std::string& name : names.value()) {
    auto text = directory->Read(name, kMaxMetaBytes);
    auto meta = text.ok() ? ParseJsonObject(text.value()) : ApiOr<Json>(BadRequest("unreadable"));
    std::optional<StoredFile> file = meta.ok() ? FileFromJson(meta.value()) : std::nullopt;
    if (!file || name != file->id + std::string(kMetaSuffix)) {
      LogWarning("batch directory: ignoring ", name, ": not a file record glint wrote");
      continue;
    }
    if (IsUpload(*file)) ++upload_count_, upload_bytes_ += static_cast<size_t>(file->bytes);
    files_[file->id] = std::move(*file);
  }
  loaded_ = true;
  return std::nullopt;
}

ApiOr<StoredFile> FileStore::Create(const std::string& filename, const std::string& purpose, std::string_view content,
                                    bool upload, const std::string& id) {
  StoredFile file{id.empty() ? RandomId("file-") : id, filename, purpose, static_cast<int64_t>(content.size()),
                  static_cast<int64_t>(std::time(nullptr))};
  const BatchDirectory* directory = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto error = Load(/*create=*/true)) return *error;
    if (upload) {
      if (content.size() > limits_.max_file_bytes) {
        return TooLarge(StrCat("the file is ", content.size(), " bytes; at most ", limits_.max_file_bytes,
                               " (--batch-max-file-bytes)"));
      }
      if (upload_count_ + reserved_count_ >= limits_.max_files) {
        return TooLarge(StrCat("the server holds ", limits_.max_files,
                               " uploaded files already (--batch-max-files): delete some first"));
      }
      if (upload_bytes_ + reserved_bytes_ + content.size() > limits_.max_total_bytes) {
        return TooLarge(StrCat("the uploaded files would take more than ", limits_.max_total_bytes,
                               " bytes (--batch-max-total-bytes): delete some first"));
      }
      ++reserved_count_, reserved_bytes_ += content.size();
    }
    directory = storage_.Get(true, nullptr);
  }
  // Written outside the lock (a large upload does not hold up other requests); the metadata last, so a crash
  // between the two leaves only an unindexed content file.
  Status written = directory->WriteAtomic(file.id, content);
  if (written.ok()) written = directory->WriteAtomic(file.id + std::string(kMetaSuffix), file.ToJson().dump());
  std::lock_guard<std::mutex> lock(mutex_);
  if (upload) --reserved_count_, reserved_bytes_ -= content.size();
  if (!written.ok()) {
    (void)directory->Remove(file.id);
    return StorageError(written.message());
  }
  auto previous = files_.find(file.id);
  if (previous != files_.end() && IsUpload(previous->second)) {
    --upload_count_, upload_bytes_ -= static_cast<size_t>(previous->second.bytes);
  }
  if (upload) ++upload_count_, upload_bytes_ += content.size();
  files_[file.id] = file;
  return file;
}

ApiOr<StoredFile> FileStore::Get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto error = Load(false)) return *error;
  auto found = files_.find(id);
  if (found == files_.end()) return FileNotFound(id);
  return found->second;
}

std::vector<StoredFile> FileStore::List(const std::string& purpose) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<StoredFile> files;
  if (Load(false)) return files;
  for (const auto& [id, file] : files_) {
    if (purpose.empty() || file.purpose == purpose) files.push_back(file);
  }
  std::stable_sort(files.begin(), files.end(),
                   [](const StoredFile& a, const StoredFile& b) { return a.created_at > b.created_at; });
  return files;
}

ApiOr<std::string> FileStore::Content(const std::string& id) {
  API_ASSIGN_OR_RETURN(const StoredFile file, Get(id));
  const BatchDirectory* directory = storage_.Get(false, nullptr);
  if (directory == nullptr) return StorageError("the batch directory is gone");
  auto content = directory->Read(file.id, static_cast<size_t>(file.bytes));
  if (!content.ok()) return StorageError(content.status().message());
  return std::move(content).value();
}

ApiOr<StoredFile> FileStore::Delete(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto error = Load(false)) return *error;
  auto found = files_.find(id);
  if (found == files_.end()) return FileNotFound(id);
  const BatchDirectory* directory = storage_.Get(false, nullptr);
  Status removed = directory->Remove(id + std::string(kMetaSuffix));
  if (removed.ok()) removed = directory->Remove(id);
  if (!removed.ok()) return StorageError(removed.message());
  StoredFile file = std::move(found->second);
  files_.erase(found);
  if (IsUpload(file)) --upload_count_, upload_bytes_ -= static_cast<size_t>(file.bytes);
  return file;
}

}  // namespace glint::server
