#include "server/batch_jobs.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <set>

#include "base/log.h"
#include "server/response_format.h"

namespace glint::server {
namespace {

constexpr std::string_view kObjectSuffix = ".json";
constexpr std::string_view kJournalSuffix = ".journal";
constexpr size_t kMaxObjectBytes = 1 << 20;
constexpr std::chrono::milliseconds kBusyRetry{200};

int64_t Now() { return static_cast<int64_t>(std::time(nullptr)); }

ApiError BatchNotFound(const std::string& id) {
  return ApiError{404, "invalid_request_error", StrCat("no batch with id '", id.substr(0, 128), "'"), "batch_id",
                  "not_found"};
}

std::string ObjectName(const std::string& id) { return id + std::string(kObjectSuffix); }
std::string JournalName(const std::string& id) { return id + std::string(kJournalSuffix); }
// The output and error files of a batch: fixed ids, so finishing twice writes the same files.
std::string OutputFileId(const std::string& id) { return "file-" + id + "-output"; }
std::string ErrorFileId(const std::string& id) { return "file-" + id + "-errors"; }

// A journal record: the line's number in the input (what identifies it, a custom_id may be missing) and its result.
std::string JournalRecord(const BatchLine& line, const Json& result) {
  return Json{{"line", line.line}, {"result", result}}.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

// The journal's whole records (a torn last one, from a crash during its append, is left out) and the byte length
// they take.
struct Journal {
  std::map<int64_t, Json> results;  // line → result
  size_t whole_bytes = 0;
};
Journal ParseJournal(std::string_view text) {
  Journal journal;
  for (size_t start = 0; start < text.size();) {
    const size_t newline = text.find('\n', start);
    if (newline == std::string_view::npos) break;  // torn: no end of line
    auto record = ParseJsonObject(text.substr(start, newline - start), 256);
    start = newline + 1;
    if (!record.ok()) break;  // torn inside (cannot happen with fdatasync'd appends, but never trusted)
    const auto line = record.value().find("line");
    const auto result = record.value().find("result");
    if (line == record.value().end() || !line->is_number_integer() || result == record.value().end()) break;
    journal.results.emplace(line->get<int64_t>(), std::move(*result));  // the first result of a line counts
    journal.whole_bytes = start;
  }
  return journal;
}

bool IsSuccess(const Json& result) {
  const auto response = result.find("response");
  return response != result.end() && response->is_object() && response->value("status_code", 0) == 200;
}

}  // namespace

Json ResultLine(const BatchLine& line, const BatchResponse& response) {
  return ResponseLine(line.custom_id, response.status, response.body);
}

void RunBatchLines(std::string_view content, const std::vector<BatchLine>& lines, const std::vector<size_t>& order,
                   const BatchExecutor& executor, const BatchRunOptions& options,
                   const std::function<bool(const BatchLine& line, const Json& result)>& on_result) {
  std::mutex mutex;
  size_t next = 0;
  bool stopped = false;
  const auto keep_going = [&] {
    if (!options.keep_going()) return false;
    std::lock_guard<std::mutex> lock(mutex);
    return !stopped;
  };
  const auto deliver = [&](const BatchLine& line, const Json& result) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!stopped && !on_result(line, result)) stopped = true;
  };
  const auto work = [&] {
    while (true) {
      size_t index = 0;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (stopped || next == order.size()) return;
        index = order[next++];
      }
      const BatchLine& line = lines[index];
      if (!line.error_code.empty()) {
        deliver(line, ErrorLine(line.custom_id, line.error_code, line.error_message));
        continue;
      }
      auto body = LineBody(content, line);
      if (!body.ok()) {  // validated before, so only if the file changed under us
        deliver(line, ErrorLine(line.custom_id, "invalid_json_line", body.error().message));
        continue;
      }
      const std::string text = body.value().dump(-1, ' ', false, Json::error_handler_t::replace);
      BatchResponse response;
      while (keep_going()) {
        response = executor(options.endpoint, text, keep_going);
        const bool busy = response.status == 429 || (response.status == 503 && keep_going());
        if (!busy) break;
        std::this_thread::sleep_for(kBusyRetry);
      }
      if (!keep_going()) return;  // cut short: no result, the line runs again on resume
      deliver(line, ResultLine(line, response));
    }
  };
  const int64_t threads = std::clamp<int64_t>(options.concurrency, 1, static_cast<int64_t>(order.size()));
  std::vector<std::thread> workers;
  for (int64_t i = 1; i < threads; ++i) workers.emplace_back(work);
  work();
  for (std::thread& worker : workers) worker.join();
}

}  // namespace glint::server

namespace glint::server {

BatchManager::BatchManager(BatchStorage& storage, FileStore& files, const BatchOptions& options, BatchExecutor executor)
    : storage_(storage), files_(files), options_(options), executor_(std::move(executor)) {}

BatchManager::~BatchManager() { Stop(); }

bool BatchManager::Unfinished(const Json& batch) const {
  const std::string status = batch.value("status", "");
  return status == "validating" || status == "in_progress" || status == "finalizing" || status == "cancelling";
}

void BatchManager::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (started_) return;
  started_ = true;
  std::string error;
  if (const BatchDirectory* directory = storage_.Get(/*create=*/false, &error)) {
    auto names = directory->List(kObjectSuffix);
    std::vector<std::pair<int64_t, std::string>> resume;
    for (const std::string& name : names.ok() ? names.value() : std::vector<std::string>{}) {
      if (!name.starts_with("batch_")) continue;
      auto text = directory->Read(name, kMaxObjectBytes);
      auto object = text.ok() ? ParseJsonObject(text.value()) : ApiOr<Json>(BadRequest("unreadable"));
      if (!object.ok() || ObjectName(object.value().value("id", "")) != name) {
        LogWarning("batch directory: ignoring ", name, ": not a batch glint wrote");
        continue;
      }
      const std::string id = object.value()["id"].get<std::string>();
      if (Unfinished(object.value())) resume.emplace_back(object.value().value("created_at", int64_t{0}), id);
      batches_[id] = std::move(object).value();
    }
    std::sort(resume.begin(), resume.end());
    for (const auto& [created, id] : resume) queue_.push_back(id);
    if (!resume.empty()) LogInfo("batches: resuming ", resume.size(), " unfinished batch(es) from ", storage_.path());
  } else if (!error.empty()) {
    LogWarning("batches: ", error, "; batch jobs will fail until it is fixed");
  }
  runner_ = std::thread([this] { RunnerLoop(); });
}

void BatchManager::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (runner_.joinable()) runner_.join();
}

ApiOr<Json> BatchManager::Create(const Json& request) {
  const auto string_field = [&](const char* name) -> ApiOr<std::string> {
    const auto found = request.find(name);
    if (found == request.end() || !found->is_string()) {
      return BadRequest(StrCat("'", name, "' is required and must be a string"), name);
    }
    return found->get<std::string>();
  };
  API_ASSIGN_OR_RETURN(const std::string input_file_id, string_field("input_file_id"));
  API_ASSIGN_OR_RETURN(const std::string endpoint, string_field("endpoint"));
  API_ASSIGN_OR_RETURN(const std::string window, string_field("completion_window"));
  if (!IsBatchEndpoint(endpoint)) {
    return BadRequest(
        StrCat("endpoint '", endpoint.substr(0, 128), "' is not one a batch can use: ", BatchEndpointList()),
        "endpoint", "invalid_endpoint");
  }
  if (window != "24h") return BadRequest("completion_window must be \"24h\"", "completion_window");
  const auto metadata = request.find("metadata");
  if (metadata != request.end() && !metadata->is_null() && (!metadata->is_object() || metadata->size() > 16)) {
    return BadRequest("metadata must be an object of at most 16 members", "metadata");
  }
  API_ASSIGN_OR_RETURN(const StoredFile input, files_.Get(input_file_id));
  if (input.purpose != "batch") {
    return BadRequest(StrCat("file '", input.id, "' has purpose '", input.purpose, "'; a batch input needs 'batch'"),
                      "input_file_id");
  }
  const int64_t now = Now();
  Json batch = {{"id", RandomId("batch_")},
                {"object", "batch"},
                {"endpoint", endpoint},
                {"errors", nullptr},
                {"input_file_id", input.id},
                {"completion_window", window},
                {"status", "validating"},
                {"output_file_id", nullptr},
                {"error_file_id", nullptr},
                {"created_at", now},
                {"in_progress_at", nullptr},
                {"expires_at", now + options_.completion_window_seconds},
                {"finalizing_at", nullptr},
                {"completed_at", nullptr},
                {"failed_at", nullptr},
                {"expired_at", nullptr},
                {"cancelling_at", nullptr},
                {"cancelled_at", nullptr},
                {"request_counts", {{"total", 0}, {"completed", 0}, {"failed", 0}}},
                {"metadata", metadata != request.end() ? *metadata : Json(nullptr)}};
  const std::string id = batch["id"].get<std::string>();
  std::string error;
  const BatchDirectory* directory = storage_.Get(/*create=*/true, &error);
  if (directory == nullptr) return StorageError(error);
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t unfinished = static_cast<size_t>(
      std::count_if(batches_.begin(), batches_.end(), [this](const auto& entry) { return Unfinished(entry.second); }));
  if (unfinished >= options_.max_unfinished) {
    return ApiError{429, "rate_limit_error",
                    StrCat(unfinished, " batches are unfinished (the most this server keeps): wait for some to end"),
                    "", "too_many_batches"};
  }
  if (Status saved = directory->WriteAtomic(ObjectName(id), batch.dump()); !saved.ok()) {
    return StorageError(saved.message());
  }
  batches_[id] = batch;
  queue_.push_back(id);
  wake_.notify_all();
  return batch;
}

ApiOr<Json> BatchManager::Get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = batches_.find(id);
  if (found == batches_.end()) return BatchNotFound(id);
  return found->second;
}

Json BatchManager::List(const std::string& after, int64_t limit) {
  std::vector<const Json*> all;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [id, batch] : batches_) all.push_back(&batch);
  std::stable_sort(all.begin(), all.end(), [](const Json* a, const Json* b) {
    return a->value("created_at", int64_t{0}) > b->value("created_at", int64_t{0});
  });
  size_t start = 0;
  if (!after.empty()) {
    for (size_t i = 0; i < all.size(); ++i) {
      if ((*all[i])["id"] == after) start = i + 1;
    }
  }
  Json data = Json::array();
  for (size_t i = start; i < all.size() && static_cast<int64_t>(data.size()) < limit; ++i) data.push_back(*all[i]);
  const bool more = start + data.size() < all.size();
  Json list = {{"object", "list"}, {"data", data}, {"has_more", more}};
  list["first_id"] = data.empty() ? Json(nullptr) : data.front()["id"];
  list["last_id"] = data.empty() ? Json(nullptr) : data.back()["id"];
  return list;
}

ApiOr<Json> BatchManager::Cancel(const std::string& id) {
  bool finish_now = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = batches_.find(id);
    if (found == batches_.end()) return BatchNotFound(id);
    const std::string status = found->second.value("status", "");
    if (status == "cancelling" || status == "cancelled") return found->second;
    if (status != "validating" && status != "in_progress") {
      return BadRequest(StrCat("batch '", id, "' is ", status,
                               ": only a validating or in-progress batch can be "
                               "cancelled"),
                        "batch_id", "batch_not_cancellable");
    }
    if (running_ == id) cancel_running_ = true;
    // A batch waiting its turn ends here; the running one ends when its requests in flight are cancelled.
    finish_now = running_ != id;
    if (finish_now) queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
  }
  Update(id, [](Json& batch) {
    batch["status"] = "cancelling";
    batch["cancelling_at"] = Now();
  });
  if (finish_now) Finish(id, "cancelled");
  return Get(id);
}

bool BatchManager::Update(const std::string& id, const std::function<void(Json&)>& change) {
  std::lock_guard<std::mutex> lock(mutex_);
  Json& batch = batches_.at(id);
  change(batch);
  const BatchDirectory* directory = storage_.Get(/*create=*/true, nullptr);
  Status saved = directory == nullptr ? FailedPrecondition("no batch directory")
                                      : directory->WriteAtomic(ObjectName(id), batch.dump());
  if (!saved.ok()) LogWarning("batch ", id, ": cannot save its state: ", saved.message());
  return saved.ok();
}

Json BatchManager::Snapshot(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  return batches_.at(id);
}

void BatchManager::RunnerLoop() {
  while (true) {
    std::string id;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      id = queue_.front();
      queue_.pop_front();
      running_ = id;
      cancel_running_ = false;
    }
    Process(id);
    std::lock_guard<std::mutex> lock(mutex_);
    running_.clear();
  }
}

void BatchManager::Fail(const std::string& id, const std::string& code, const std::string& message, int64_t line) {
  LogWarning("batch ", id, " failed: ", message);
  Update(id, [&](Json& batch) {
    Json error = {{"code", code}, {"message", message}, {"param", nullptr}};
    error["line"] = line > 0 ? Json(line) : Json(nullptr);
    batch["errors"] = {{"object", "list"}, {"data", Json::array({error})}};
    batch["status"] = "failed";
    batch["failed_at"] = Now();
  });
}

void BatchManager::Process(const std::string& id) {
  const Json batch = Snapshot(id);
  const std::string status = batch.value("status", "");
  if (status == "cancelling") return Finish(id, "cancelled");
  if (status == "finalizing") return Finish(id, "completed");
  auto content = files_.Content(batch.value("input_file_id", ""));
  if (!content.ok()) return Fail(id, "invalid_input_file", content.error().message);
  const std::string endpoint = batch.value("endpoint", "");
  const BatchInput input = ValidateBatchInput(content.value(), endpoint, options_.input);
  if (input.failure) return Fail(id, input.failure->code, input.failure->message, input.failure->line);
  if (status == "validating") {
    Update(id, [&](Json& object) {
      object["status"] = "in_progress";
      object["in_progress_at"] = Now();
      object["request_counts"]["total"] = input.lines.size();
    });
  }
  if (!RunRequests(id, content.value(), input.lines)) return;  // the server stops: resumed on restart
  const Json now = Snapshot(id);
  if (now.value("status", "") == "failed") return;
  if (cancel_running_) return Finish(id, "cancelled");
  if (Now() >= now.value("expires_at", int64_t{0})) return Finish(id, "expired");
  Finish(id, "completed");
}

bool BatchManager::RunRequests(const std::string& id, std::string_view content, const std::vector<BatchLine>& lines) {
  const BatchDirectory* directory = storage_.Get(/*create=*/true, nullptr);
  if (directory == nullptr) return Fail(id, "storage_error", "the batch directory is gone"), true;
  auto journal_file = directory->OpenAppend(JournalName(id));
  if (!journal_file.ok()) return Fail(id, "storage_error", journal_file.status().message()), true;
  AppendOnlyFile& file = journal_file.value();
  auto text = file.ReadAll(size_t{1} << 40);
  if (!text.ok()) return Fail(id, "storage_error", text.status().message()), true;
  Journal journal = ParseJournal(text.value());
  if (journal.whole_bytes < text.value().size()) {  // a torn last record: cut it
    LogInfo("batch ", id, ": dropping a torn journal record left by a crash");
    if (Status cut = file.TruncateTo(static_cast<int64_t>(journal.whole_bytes)); !cut.ok()) {
      return Fail(id, "storage_error", cut.message()), true;
    }
  }
  int64_t completed = 0, failed = 0;
  for (const auto& [line, result] : journal.results) (IsSuccess(result) ? completed : failed) += 1;
  std::vector<BatchLine> pending;
  for (const BatchLine& line : lines) {
    if (journal.results.count(line.line) == 0) pending.push_back(line);
  }
  if (!journal.results.empty()) {
    LogInfo("batch ", id, ": ", journal.results.size(), " of ", lines.size(), " requests were done before; ",
            pending.size(), " to go");
  }
  const int64_t expires_at = Snapshot(id).value("expires_at", int64_t{0});
  std::string storage_failure;
  BatchRunOptions run;
  run.endpoint = Snapshot(id).value("endpoint", "");
  run.concurrency = options_.concurrency;
  run.keep_going = [&] { return !stopping_ && !cancel_running_ && Now() < expires_at; };
  const auto counts = [&](Json& batch) {
    batch["request_counts"] = {{"total", lines.size()}, {"completed", completed}, {"failed", failed}};
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    counts(batches_.at(id));
  }
  RunBatchLines(content, pending, PrefixSharingOrder(content, pending), executor_, run,
                [&](const BatchLine& line, const Json& result) {
                  if (Status saved = file.Append(JournalRecord(line, result)); !saved.ok()) {
                    storage_failure = saved.message();
                    return false;
                  }
                  (IsSuccess(result) ? completed : failed) += 1;
                  std::lock_guard<std::mutex> lock(mutex_);
                  counts(batches_.at(id));  // in memory: a restart counts from the journal
                  return true;
                });
  if (!storage_failure.empty()) {
    Fail(id, "storage_error",
         StrCat("the batch's progress could not be saved (", storage_failure,
                "); the requests done so far are kept in its journal"));
    return true;
  }
  return !stopping_;
}

void BatchManager::Finish(const std::string& id, const std::string& status) {
  Update(id, [](Json& batch) {
    if (batch["status"] != "cancelling") batch["status"] = "finalizing";
    batch["finalizing_at"] = Now();
  });
  const BatchDirectory* directory = storage_.Get(/*create=*/true, nullptr);
  auto text = directory == nullptr ? Result<std::string>(NotFound("no batch directory"))
                                   : directory->Read(JournalName(id), size_t{1} << 40);
  const Journal journal = ParseJournal(text.ok() ? text.value() : "");
  std::string output, errors;
  int64_t completed = 0, failed = 0;
  for (const auto& [line, result] : journal.results) {
    const bool success = IsSuccess(result);
    (success ? output : errors) += result.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    (success ? completed : failed) += 1;
  }
  Json output_id = nullptr, error_id = nullptr;
  for (auto [content, file_id, slot] :
       {std::tuple(&output, OutputFileId(id), &output_id), std::tuple(&errors, ErrorFileId(id), &error_id)}) {
    if (content->empty()) continue;
    auto created = files_.Create(file_id + ".jsonl", "batch_output", *content, /*upload=*/false, file_id);
    if (!created.ok()) return Fail(id, "storage_error", created.error().message);
    *slot = file_id;
  }
  const bool saved = Update(id, [&](Json& batch) {
    batch["status"] = status;
    batch[status + "_at"] = Now();
    batch["output_file_id"] = output_id;
    batch["error_file_id"] = error_id;
    batch["request_counts"]["completed"] = completed;
    batch["request_counts"]["failed"] = failed;
  });
  // The journal goes once the batch's end is on disk (before, a restart would finish it again from the journal).
  if (saved) (void)directory->Remove(JournalName(id));
  LogInfo("batch ", id, " ", status, ": ", completed, " completed, ", failed, " failed");
}

}  // namespace glint::server
