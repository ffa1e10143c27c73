// Batch jobs without a model (docs/batch.md): the multipart parser, input validation and the prefix-sharing order,
// the batch directory (atomic writes, the append-only journal and its torn tail), the file store's limits, and the
// batch manager with a scripted executor: a batch runs to its output and error files, a restart resumes it from
// the journal answering each custom_id once, cancellation ends it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "server/batch_dir.h"
#include "server/batch_files.h"
#include "server/batch_input.h"
#include "server/batch_jobs.h"
#include "server/multipart.h"
#include "test_util.h"

namespace glint::server {
namespace {

using testing::MakeTempDir;

BatchOptions Concurrency(int64_t concurrency) {
  BatchOptions options;
  options.concurrency = concurrency;
  return options;
}

// ---- multipart ----

std::string Part(std::string_view disposition, std::string_view data) {
  return StrCat("--XyZ\r\nContent-Disposition: form-data; ", disposition, "\r\n\r\n", data, "\r\n");
}

TEST(Multipart, BoundaryFromTheContentType) {
  ASSERT_OK_AND_ASSIGN(std::string plain, MultipartBoundary("multipart/form-data; boundary=abc123"));
  EXPECT_EQ(plain, "abc123");
  ASSERT_OK_AND_ASSIGN(std::string quoted, MultipartBoundary("Multipart/Form-Data; charset=x; boundary=\"a b;c\""));
  EXPECT_EQ(quoted, "a b;c");
  EXPECT_FALSE(MultipartBoundary("application/json").ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data").ok());
  EXPECT_FALSE(MultipartBoundary("multipart/form-data; boundary=" + std::string(71, 'a')).ok());
}

TEST(Multipart, PartsAreViewsIntoTheBody) {
  const std::string body = "preamble\r\n" + Part("name=\"purpose\"", "batch") +
                           Part("name=\"file\"; filename=\"in.jsonl\"", "line 1\r\n--XyZnot a boundary\nline 2") +
                           Part("name=\"empty\"", "") + "--XyZ--\r\nepilogue";
  ASSERT_OK_AND_ASSIGN(std::vector<MultipartPart> parts, ParseMultipart(body, "XyZ"));
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].name, "purpose");
  EXPECT_EQ(parts[0].data, "batch");
  EXPECT_FALSE(parts[0].filename.has_value());
  EXPECT_EQ(parts[1].filename, "in.jsonl");
  EXPECT_EQ(parts[1].data, "line 1\r\n--XyZnot a boundary\nline 2");
  EXPECT_GE(parts[1].data.data(), body.data());  // no copy
  EXPECT_EQ(parts[2].data, "");
}

// The blank line that ends a part's headers may share its CRLF with the next delimiter: the part is empty, and its
// data is still a view into the body (found by fuzz.multipart: it was a null view).
TEST(Multipart, AnEmptyPartWhoseHeadersMeetTheDelimiterIsAViewIntoTheBody) {
  const std::string body = "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n--XyZ--\r\n";
  ASSERT_OK_AND_ASSIGN(std::vector<MultipartPart> parts, ParseMultipart(body, "XyZ"));
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].data, "");
  ASSERT_NE(parts[0].data.data(), nullptr);
  EXPECT_GE(parts[0].data.data(), body.data());
  EXPECT_LE(parts[0].data.data(), body.data() + body.size());
}

TEST(Multipart, MalformedBodiesAreErrors) {
  EXPECT_FALSE(ParseMultipart("no boundary here", "XyZ").ok());
  EXPECT_FALSE(ParseMultipart(Part("name=\"a\"", "x"), "XyZ").ok()) << "no closing boundary";
  EXPECT_FALSE(ParseMultipart("--XyZ\r\nContent-Disposition: form-data\r\n\r\nx\r\n--XyZ--", "XyZ").ok()) << "no name";
  EXPECT_FALSE(ParseMultipart("--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--", "XyZ").ok()) << "no disposition";
  EXPECT_FALSE(ParseMultipart("--XyZ\r\n" + std::string(10000, 'h'), "XyZ").ok()) << "headers without an end";
  std::string many;
  for (int i = 0; i < 17; ++i) many += Part("name=\"p\"", "x");
  EXPECT_FALSE(ParseMultipart(many + "--XyZ--", "XyZ").ok()) << "more parts than the limit";
}

// ---- input ----

std::string Line(std::string_view custom_id, std::string_view content = "hi",
                 std::string_view url = "/v1/chat/completions") {
  return StrCat(R"({"custom_id": ")", custom_id, R"(", "method": "POST", "url": ")", url,
                R"(", "body": {"messages": [{"role": "user", "content": ")", content, R"("}]}})", "\n");
}

TEST(BatchInput, MalformedLinesBecomeErrorLines) {
  const std::string content = Line("a") + "\n" + "{not json\n" + Line("b", "x", "/v1/completions") +
                              R"({"custom_id": "c", "method": "GET", "url": "/v1/chat/completions", "body": {}})" +
                              "\n" + R"({"method": "POST"})" + "\n" +
                              R"({"custom_id": "s", "method": "POST", "url": "/v1/chat/completions",)" +
                              R"( "body": {"stream": true}})" + "\n" + Line("long", std::string(200, 'x'));
  const BatchInput input =
      ValidateBatchInput(content, "/v1/chat/completions", {.max_requests = 10, .max_line_bytes = 150});
  ASSERT_FALSE(input.failure.has_value()) << input.failure->message;
  ASSERT_EQ(input.lines.size(), 7u);  // the blank line is skipped
  EXPECT_EQ(input.lines[0].custom_id, "a");
  EXPECT_TRUE(input.lines[0].error_code.empty());
  EXPECT_EQ(input.lines[1].line, 3);
  EXPECT_EQ(input.lines[1].error_code, "invalid_json_line");
  EXPECT_EQ(input.lines[2].error_code, "mismatched_url");
  EXPECT_EQ(input.lines[3].error_code, "invalid_method");
  EXPECT_EQ(input.lines[4].error_code, "missing_custom_id");
  EXPECT_EQ(input.lines[5].error_code, "invalid_body");
  EXPECT_EQ(input.lines[6].error_code, "line_too_long");
  ASSERT_OK_AND_ASSIGN(Json body, [&]() -> Result<Json> {
    auto parsed = LineBody(content, input.lines[0]);
    if (!parsed.ok()) return InvalidArgument(parsed.error().message);
    return parsed.value();
  }());
  EXPECT_EQ(body["messages"][0]["content"], "hi");
}

TEST(BatchInput, WholeFileFailures) {
  const auto failure = [](std::string_view content, size_t max_requests = 100) {
    BatchInput input = ValidateBatchInput(content, "/v1/chat/completions", {.max_requests = max_requests});
    EXPECT_TRUE(input.lines.empty());
    return input.failure.value_or(BatchInputFailure{"none", "", 0});
  };
  EXPECT_EQ(failure("id,prompt\n1,hi\n").code, "invalid_json_line");
  EXPECT_EQ(failure("id,prompt\n1,hi\n").line, 1);
  EXPECT_EQ(failure("\n  \n").code, "empty_file");
  EXPECT_EQ(failure(Line("a") + Line("b") + Line("c"), 2).code, "too_many_requests");
  const BatchInputFailure duplicate = failure(Line("a") + Line("b") + Line("a"));
  EXPECT_EQ(duplicate.code, "duplicate_custom_id");
  EXPECT_EQ(duplicate.line, 3);
  EXPECT_NE(duplicate.message.find("on line 3 repeats line 1"), std::string::npos) << duplicate.message;
}

TEST(BatchInput, PrefixSharingOrderGroupsCommonPrompts) {
  const std::string content = Line("1", "zeta") + Line("2", "alpha one") + Line("3", "zeta two") + Line("4", "alpha");
  const BatchInput input = ValidateBatchInput(content, "/v1/chat/completions", {});
  ASSERT_FALSE(input.failure.has_value());
  EXPECT_EQ(PrefixSharingOrder(content, input.lines), (std::vector<size_t>{1, 3, 2, 0}));
}

// ---- directory and journal ----

TEST(BatchDirectory, CreatesPrivatelyWritesAtomicallyAndLocks) {
  const std::string root = MakeTempDir("batch_dir");
  const std::string path = root + "/a/b";
  EXPECT_EQ(BatchDirectory::Open(path, false).status().code(), ErrorCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(auto directory, BatchDirectory::Open(path, true));
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_all);
  EXPECT_FALSE(BatchDirectory::Open(path, true).ok()) << "a second holder is refused";
  ASSERT_OK(directory->WriteAtomic("x.json", "one"));
  ASSERT_OK(directory->WriteAtomic("x.json", "two"));
  ASSERT_OK_AND_ASSIGN(std::string text, directory->Read("x.json", 100));
  EXPECT_EQ(text, "two");
  EXPECT_FALSE(directory->Read("x.json", 2).ok()) << "over max_bytes";
  // A symlink planted under a name is replaced by a write, never followed by a read.
  std::filesystem::create_symlink("/etc/passwd", path + "/link.json");
  EXPECT_FALSE(directory->Read("link.json", 1 << 20).ok());
  ASSERT_OK_AND_ASSIGN(auto names, directory->List(".json"));
  EXPECT_EQ(names, (std::vector<std::string>{"x.json"}));
  EXPECT_FALSE(IsPlainName("../x"));
  EXPECT_FALSE(IsPlainName(".hidden"));
  EXPECT_FALSE(IsPlainName("a/b"));
  std::filesystem::remove_all(root);
}

TEST(BatchDirectory, AppendOnlyFileKeepsWholeRecords) {
  const std::string root = MakeTempDir("batch_journal");
  ASSERT_OK_AND_ASSIGN(auto directory, BatchDirectory::Open(root, true));
  {
    ASSERT_OK_AND_ASSIGN(AppendOnlyFile file, directory->OpenAppend("j.journal"));
    ASSERT_OK(file.Append("one\n"));
    ASSERT_OK(file.Append("two\n"));
  }
  std::ofstream(root + "/j.journal", std::ios::app) << "tor";  // a crash in the middle of an append
  ASSERT_OK_AND_ASSIGN(AppendOnlyFile file, directory->OpenAppend("j.journal"));
  ASSERT_OK_AND_ASSIGN(std::string text, file.ReadAll(1 << 20));
  EXPECT_EQ(text, "one\ntwo\ntor");
  ASSERT_OK(file.TruncateTo(8));
  ASSERT_OK(file.Append("three\n"));
  ASSERT_OK_AND_ASSIGN(text, file.ReadAll(1 << 20));
  EXPECT_EQ(text, "one\ntwo\nthree\n");
  std::filesystem::remove_all(root);
}

// ---- file store ----

TEST(FileStore, LimitsAndReload) {
  const std::string root = MakeTempDir("file_store");
  BatchStorage storage(root + "/batches");
  FileStore files(storage, {.max_file_bytes = 10, .max_files = 2, .max_total_bytes = 15});
  EXPECT_TRUE(files.List("").empty()) << "no directory yet, no files, nothing created";
  EXPECT_FALSE(std::filesystem::exists(root + "/batches"));
  EXPECT_EQ(files.Create("a", "batch", std::string(11, 'x'), true).error().status, 413);
  auto first = files.Create("a.jsonl", "batch", "0123456789", true);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(files.Create("b", "batch", "012345", true).error().status, 413) << "total bytes";
  ASSERT_TRUE(files.Create("b", "batch", "01234", true).ok());
  EXPECT_EQ(files.Create("c", "batch", "0", true).error().status, 413) << "file count";
  ASSERT_TRUE(files.Create("out", "batch_output", std::string(100, 'o'), false, "file-x-output").ok())
      << "outputs are not uploads";
  const std::string id = first.value().id;
  {
    BatchStorage reopened_storage(root + "/batches_other");
    (void)reopened_storage;
  }
  ASSERT_TRUE(files.Delete(id).ok());
  EXPECT_EQ(files.Get(id).error().status, 404);
  EXPECT_EQ(files.Content(id).error().status, 404);
  ASSERT_TRUE(files.Create("c", "batch", "0", true).ok()) << "room again after a delete";
  std::filesystem::remove_all(root);
}

// ---- the manager ----

// Answers each request with its messages echoed; counts how often each custom content was run.
struct ScriptedExecutor {
  std::mutex mutex;
  std::multiset<std::string> seen;
  std::atomic<int> delay_ms{0};
  BatchResponse operator()(const std::string& url, std::string body, const std::function<bool()>& keep_going) {
    for (int i = 0; i < delay_ms.load() && keep_going(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!keep_going()) return {499, Json::object()};
    const Json request = Json::parse(body);
    const std::string content = request["messages"][0]["content"].get<std::string>();
    std::lock_guard<std::mutex> lock(mutex);
    seen.insert(content);
    if (content == "fail") return {400, {{"error", {{"message", "no"}}}}};
    return {200, {{"id", "chatcmpl-" + content}, {"object", "chat.completion"}, {"echo", content}}};
  }
};

Json WaitForBatch(BatchManager& batches, const std::string& id, std::set<std::string> statuses) {
  for (int i = 0; i < 2000; ++i) {
    Json batch = batches.Get(id).value();
    if (statuses.count(batch["status"].get<std::string>()) != 0) return batch;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ADD_FAILURE() << "batch " << id << " did not reach the status";
  return batches.Get(id).value();
}

std::vector<Json> FileLines(FileStore& files, const Json& id) {
  std::vector<Json> lines;
  if (id.is_null()) return lines;
  const std::string text = files.Content(id.get<std::string>()).value();
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    lines.push_back(Json::parse(text.substr(start, end - start)));
    start = end + 1;
  }
  return lines;
}

TEST(BatchManager, RunsABatchToItsOutputAndErrorFiles) {
  const std::string root = MakeTempDir("batch_manager");
  BatchStorage storage(root);
  FileStore files(storage, {});
  ScriptedExecutor executor;
  BatchManager batches(storage, files, Concurrency(3),
                       [&](const std::string& url, std::string body, const std::function<bool()>& keep_going) {
                         return executor(url, std::move(body), keep_going);
                       });
  batches.Start();
  const std::string input = Line("a", "one") + Line("b", "fail") + "{broken\n" + Line("c", "three");
  const std::string file_id = files.Create("in.jsonl", "batch", input, true).value().id;
  EXPECT_EQ(batches.Create({{"input_file_id", file_id}, {"endpoint", "/v1/embeddings"}, {"completion_window", "24h"}})
                .error()
                .code,
            "invalid_endpoint");
  auto created =
      batches.Create({{"input_file_id", file_id}, {"endpoint", "/v1/chat/completions"}, {"completion_window", "24h"}});
  ASSERT_TRUE(created.ok()) << created.error().message;
  const Json batch = WaitForBatch(batches, created.value()["id"], {"completed", "failed"});
  ASSERT_EQ(batch["status"], "completed") << batch.dump();
  EXPECT_EQ(batch["request_counts"], Json({{"total", 4}, {"completed", 2}, {"failed", 2}}));
  const std::vector<Json> output = FileLines(files, batch["output_file_id"]);
  ASSERT_EQ(output.size(), 2u);
  EXPECT_EQ(output[0]["response"]["status_code"], 200);
  EXPECT_EQ(output[0]["response"]["request_id"],
            "chatcmpl-" + output[0]["response"]["body"]["echo"].get<std::string>());
  const std::vector<Json> errors = FileLines(files, batch["error_file_id"]);
  ASSERT_EQ(errors.size(), 2u);
  std::set<std::string> error_kinds;
  for (const Json& line : errors) {
    error_kinds.insert(line["error"].is_null() ? StrCat("status ", line["response"]["status_code"].get<int>())
                                               : line["error"]["code"].get<std::string>());
  }
  EXPECT_EQ(error_kinds, (std::set<std::string>{"status 400", "invalid_json_line"}));
  batches.Stop();  // the runner removes the journal just after it saves the final status
  EXPECT_FALSE(std::filesystem::exists(root + "/" + batch["id"].get<std::string>() + ".journal"));
  std::filesystem::remove_all(root);
}

TEST(BatchManager, ARestartResumesFromTheJournalAnsweringEachRequestOnce) {
  const std::string root = MakeTempDir("batch_resume");
  std::string input;
  for (int i = 0; i < 40; ++i) input += Line(StrCat("id", i), StrCat("q", i));
  ScriptedExecutor executor;
  const auto run = [&](const std::string& url, std::string body, const std::function<bool()>& keep_going) {
    return executor(url, std::move(body), keep_going);
  };
  std::string id;
  {
    BatchStorage storage(root);
    FileStore files(storage, {});
    BatchManager batches(storage, files, Concurrency(2), run);
    batches.Start();
    executor.delay_ms = 5;
    const std::string file_id = files.Create("in.jsonl", "batch", input, true).value().id;
    id =
        batches.Create({{"input_file_id", file_id}, {"endpoint", "/v1/chat/completions"}, {"completion_window", "24h"}})
            .value()["id"];
    while (batches.Get(id).value()["request_counts"]["completed"].get<int>() < 10) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    batches.Stop();  // as a server that stops: the batch stays in progress, its journal on disk
    EXPECT_EQ(batches.Get(id).value()["status"], "in_progress");
  }
  const size_t before = executor.seen.size();
  EXPECT_LT(before, 40u);
  executor.delay_ms = 0;
  BatchStorage storage(root);
  FileStore files(storage, {});
  BatchManager batches(storage, files, Concurrency(2), run);
  batches.Start();
  const Json batch = WaitForBatch(batches, id, {"completed", "failed"});
  ASSERT_EQ(batch["status"], "completed") << batch.dump();
  const std::vector<Json> output = FileLines(files, batch["output_file_id"]);
  std::set<std::string> custom_ids;
  for (const Json& line : output) custom_ids.insert(line["custom_id"].get<std::string>());
  EXPECT_EQ(output.size(), 40u);
  EXPECT_EQ(custom_ids.size(), 40u);
  // No request ran twice to completion: those in flight at the stop were cancelled (not journaled) and ran again.
  std::set<std::string> distinct(executor.seen.begin(), executor.seen.end());
  EXPECT_EQ(distinct.size(), 40u);
  EXPECT_LE(executor.seen.size(), 40u + 2u);
  batches.Stop();
  std::filesystem::remove_all(root);
}

TEST(BatchManager, CancelEndsARunningBatch) {
  const std::string root = MakeTempDir("batch_cancel");
  BatchStorage storage(root);
  FileStore files(storage, {});
  ScriptedExecutor executor;
  executor.delay_ms = 20;
  BatchManager batches(storage, files, Concurrency(1),
                       [&](const std::string& url, std::string body, const std::function<bool()>& keep_going) {
                         return executor(url, std::move(body), keep_going);
                       });
  batches.Start();
  std::string input;
  for (int i = 0; i < 100; ++i) input += Line(StrCat("id", i), StrCat("q", i));
  const std::string file_id = files.Create("in.jsonl", "batch", input, true).value().id;
  const std::string id =
      batches.Create({{"input_file_id", file_id}, {"endpoint", "/v1/chat/completions"}, {"completion_window", "24h"}})
          .value()["id"];
  WaitForBatch(batches, id, {"in_progress"});
  auto cancelling = batches.Cancel(id);
  ASSERT_TRUE(cancelling.ok());
  const Json batch = WaitForBatch(batches, id, {"cancelled"});
  EXPECT_LT(batch["request_counts"]["completed"].get<int>(), 100);
  EXPECT_FALSE(batch["cancelled_at"].is_null());
  EXPECT_EQ(batches.Cancel(id).value()["status"], "cancelled");
  EXPECT_EQ(batches.Get("batch_nope").error().status, 404);
  batches.Stop();
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace glint::server
