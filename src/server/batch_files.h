// The Files API's store (POST/GET/DELETE /v1/files, docs/batch.md "Files"): uploaded batch inputs and the output
// and error files batches write, kept under --batch-dir as `<id>` (the bytes) and `<id>.meta.json` (the file
// object), both written atomically. The index of file objects is kept in memory (loaded once); contents are read
// from disk when asked for. Bounded: a file's size, the number of files and their total size (413 past any).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/batch_dir.h"
#include "server/json_body.h"

namespace glint::server {

// The batch directory, opened (and created) when first needed: a server that never sees a batch request never
// touches the disk.
class BatchStorage {
 public:
  explicit BatchStorage(std::string path) : path_(std::move(path)) {}
  // The directory; `create`: make it if missing. Null with `error` set when it cannot be had (or is missing and
  // `create` is false: then `error` is empty).
  const BatchDirectory* Get(bool create, std::string* error);
  const std::string& path() const { return path_; }

 private:
  std::mutex mutex_;
  std::string path_;
  std::unique_ptr<BatchDirectory> directory_;
};

struct FileLimits {
  size_t max_file_bytes = size_t{200} << 20;  // one upload (OpenAI's batch input limit is 200 MB)
  size_t max_files = 1000;                    // uploads kept at once (outputs of batches do not count)
  size_t max_total_bytes = size_t{10} << 30;  // uploads together
};

struct StoredFile {
  std::string id;  // "file-" + 24 letters and digits
  std::string filename;
  std::string purpose;  // "batch" (uploads), "batch_output" (what batches write)
  int64_t bytes = 0;
  int64_t created_at = 0;
  Json ToJson() const;  // OpenAI's file object
};

class FileStore {
 public:
  FileStore(BatchStorage& storage, const FileLimits& limits) : storage_(storage), limits_(limits) {}

  // A new file. `upload`: counts against the limits (413 past them); batch outputs are bounded by their inputs
  // instead. `id`: given (a batch's output files have ids derived from the batch, so that finishing it again after
  // a crash rewrites the same files), or empty for a new random one. 500 when the disk refuses the write.
  ApiOr<StoredFile> Create(const std::string& filename, const std::string& purpose, std::string_view content,
                           bool upload, const std::string& id = "");
  ApiOr<StoredFile> Get(const std::string& id);
  std::vector<StoredFile> List(const std::string& purpose);  // newest first; purpose "" for all
  ApiOr<std::string> Content(const std::string& id);
  ApiOr<StoredFile> Delete(const std::string& id);
  const FileLimits& limits() const { return limits_; }

 private:
  // Loads the index from the directory the first time it is needed. Caller holds mutex_.
  std::optional<ApiError> Load(bool create);

  BatchStorage& storage_;
  const FileLimits limits_;
  std::mutex mutex_;
  bool loaded_ = false;
  std::map<std::string, StoredFile> files_;
  size_t upload_count_ = 0;
  size_t upload_bytes_ = 0;
  size_t reserved_bytes_ = 0;  // uploads being written
  size_t reserved_count_ = 0;
};

// An ApiError for a failure of the batch directory (500, naming the cause: a full disk says so).
ApiError StorageError(const std::string& message);

}  // namespace glint::server
