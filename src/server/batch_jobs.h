// Batch jobs (docs/batch.md): the Batches API's batches, run one at a time beside online traffic, and the loop
// that runs a batch's requests, which `glint batch` shares.
//
// A batch goes validating → in_progress → finalizing → completed (or failed, cancelling → cancelled, expired), as
// in OpenAI's API. Its object lives in `<id>.json` under --batch-dir (rewritten atomically at each change of
// status); each finished request appends its result line to `<id>.journal` and syncs it before the request counts
// as done. So a server killed at any point (SIGKILL included) finds on restart the batches it had not finished and
// resumes them, running only the requests the journal does not hold: every custom_id is answered exactly once.
// Finishing splits the journal into the output file (status 200) and the error file (everything else), with ids
// derived from the batch's, so finishing again after a crash rewrites the same two files.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/batch_files.h"
#include "server/batch_input.h"

namespace glint::server {

// One request's answer: the HTTP status and the JSON body the endpoint gave.
struct BatchResponse {
  int status = 0;
  Json body;
};
// Runs one request of a batch through the server's own handlers (http_server.cc), as if it came over HTTP, at
// batch priority. `keep_going` turns false when the batch is cancelled or the server stops: the request is then
// cancelled (its answer is not a result).
using BatchExecutor =
    std::function<BatchResponse(const std::string& url, std::string body, const std::function<bool()>& keep_going)>;

struct BatchRunOptions {
  std::string endpoint;     // every line's url
  int64_t concurrency = 8;  // requests in flight at once (each waits on its own thread)
  std::function<bool()> keep_going;
};

// Runs `lines` in `order` (indices into lines) with `concurrency` threads, and gives each one's result line to
// `on_result` (one call at a time; returning false stops the run, e.g. when the result could not be saved). A
// line that did not validate gets its error line without running. A full server (429, or 503 server_busy) is
// waited out and the request retried. Returns when every line has a result or keep_going turned false (then the
// requests in flight are cancelled and give no result).
void RunBatchLines(std::string_view content, const std::vector<BatchLine>& lines, const std::vector<size_t>& order,
                   const BatchExecutor& executor, const BatchRunOptions& options,
                   const std::function<bool(const BatchLine& line, const Json& result)>& on_result);

// The result line of one request as the output and error files carry it.
Json ResultLine(const BatchLine& line, const BatchResponse& response);

struct BatchOptions {
  BatchInputLimits input;
  int64_t concurrency = 8;
  size_t max_unfinished = 64;  // batches validating, in progress or finishing at once; then 429
  int64_t completion_window_seconds = 24 * 3600;
};

class BatchManager {
 public:
  BatchManager(BatchStorage& storage, FileStore& files, const BatchOptions& options, BatchExecutor executor);
  ~BatchManager();  // Stop()
  BatchManager(const BatchManager&) = delete;
  BatchManager& operator=(const BatchManager&) = delete;

  // Finds the batches a previous run left unfinished (when the directory exists) and starts the thread that runs
  // batches; those resume first, oldest first.
  void Start();
  // Stops the runner: the running batch's requests in flight are cancelled and it stays in_progress (a restart
  // resumes it). Idempotent.
  void Stop();

  // POST /v1/batches: input_file_id, endpoint, completion_window "24h", optional metadata.
  ApiOr<Json> Create(const Json& request);
  ApiOr<Json> Get(const std::string& id);
  // GET /v1/batches: newest first, after the batch `after` (its id), at most `limit`.
  Json List(const std::string& after, int64_t limit);
  ApiOr<Json> Cancel(const std::string& id);

 private:
  void RunnerLoop();
  void Process(const std::string& id);
  // Runs a validated batch's remaining requests; false when it stopped because the server stops.
  bool RunRequests(const std::string& id, std::string_view content, const std::vector<BatchLine>& lines);
  // Writes the output and error files from the journal and ends the batch in `status`. Caller holds no lock.
  void Finish(const std::string& id, const std::string& status);
  void Fail(const std::string& id, const std::string& code, const std::string& message, int64_t line = 0);
  // Sets fields of the batch's object and saves it. False (logged) when the save failed.
  bool Update(const std::string& id, const std::function<void(Json&)>& change);
  Json Snapshot(const std::string& id);
  bool Unfinished(const Json& batch) const;

  BatchStorage& storage_;
  FileStore& files_;
  const BatchOptions options_;
  BatchExecutor executor_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::string, Json> batches_;  // id → its object
  std::deque<std::string> queue_;        // waiting to run, in order
  std::string running_;                  // the batch the runner works on ("" when none)
  std::atomic<bool> cancel_running_{false};
  std::atomic<bool> stopping_{false};
  bool started_ = false;
  std::thread runner_;
};

}  // namespace glint::server
