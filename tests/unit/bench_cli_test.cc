// `glint bench` as a user runs it: the real binary against the in-process fake server on loopback, including a
// real SIGINT (Ctrl-C) in the middle of a sweep.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "base/file.h"
#include "bench_fake_server.h"
#include "test_util.h"

extern char** environ;

namespace glint::bench {
namespace {

using fake::FakeReply;
using fake::FakeServer;

struct Child {
  pid_t pid = -1;
  std::string stdout_path;
  std::string stderr_path;
};

Child SpawnGlint(const std::vector<std::string>& arguments, const std::string& dir) {
  Child child;
  child.stdout_path = JoinPath(dir, "stdout.txt");
  child.stderr_path = JoinPath(dir, "stderr.txt");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, child.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, child.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  std::vector<std::string> argv = {GLINT_BINARY, "bench"};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  std::vector<char*> pointers;
  for (std::string& arg : argv) pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  const int error = posix_spawn(&child.pid, GLINT_BINARY, &actions, nullptr, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(error, 0) << "cannot start " << GLINT_BINARY;
  return child;
}

// Exit code, or -1 after `timeout_s` (the child is then killed so the test cannot hang).
int WaitFor(const Child& child, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (waitpid(child.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(child.pid, SIGKILL);
      waitpid(child.pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string Slurp(const std::string& path) {
  auto text = ReadFile(path);
  return text.ok() ? *text : std::string();
}

TEST(BenchCli, SweepWritesResultsTableAndPlotThenCompares) {
  FakeServer server([](int64_t, const nlohmann::json&) {
    FakeReply reply;
    reply.ttft_s = 0.005;
    reply.itl_s = 0.002;
    return reply;
  });
  const std::string dir = testing::MakeTempDir("bench_cli_sweep");
  const std::string out = JoinPath(dir, "results");
  const Child child = SpawnGlint({"--base-url",
                                  server.base_url(),
                                  "--input-len",
                                  "8",
                                  "--output-len",
                                  "3",
                                  "--concurrency",
                                  "1,2",
                                  "--prompts-per-level",
                                  "2",
                                  "--warmup-requests",
                                  "1",
                                  "--seed",
                                  "1",
                                  "--no-progress",
                                  "--chips",
                                  "2",
                                  "--price-per-chip-hour",
                                  "3",
                                  "--range-ratio",
                                  "0.5",
                                  "--range-convention",
                                  "vllm",
                                  "--out",
                                  out},
                                 dir);
  ASSERT_EQ(WaitFor(child, 60), 0) << Slurp(child.stderr_path);
  const std::string printed = Slurp(child.stdout_path);
  EXPECT_NE(printed.find("TPOT p50"), std::string::npos) << printed;
  EXPECT_NE(printed.find("plot: " + JoinPath(out, "pareto.png")), std::string::npos) << printed;
  EXPECT_EQ(server.generation_requests(), 2 * (1 + 2));  // per level: 1 warm-up + 2 measured

  const nlohmann::json results = nlohmann::json::parse(Slurp(JoinPath(out, "results.json")));
  EXPECT_EQ(results["config"]["chips"], 2);
  EXPECT_EQ(results["config"]["price_per_chip_hour"], 3.0);
  EXPECT_EQ(results["config"]["range_convention"], "vllm");
  EXPECT_EQ(results["config"]["input_len_range"], nlohmann::json({4, 12}));
  EXPECT_EQ(results["config"]["seed"], 1);
  EXPECT_EQ(results["config"]["model"], "fake-model");
  ASSERT_EQ(results["levels"].size(), 2u);
  for (const auto& level : results["levels"]) {
    EXPECT_EQ(level["completed"], 2);
    EXPECT_EQ(level["usage_check"]["prompt_mismatches"], 0);
    EXPECT_TRUE(level["cost_per_million_output_tokens"].is_number());
  }
  EXPECT_TRUE(PathExists(JoinPath(out, "pareto.png")));
  EXPECT_TRUE(PathExists(JoinPath(out, "results.csv")));

  const std::string compare = JoinPath(dir, "compare");
  const Child overlay =
      SpawnGlint({"--compare", JoinPath(out, "results.json"), JoinPath(out, "results.json"), "--out", compare}, dir);
  ASSERT_EQ(WaitFor(overlay, 30), 0) << Slurp(overlay.stderr_path);
  EXPECT_TRUE(PathExists(JoinPath(compare, "compare.png")));
}

TEST(BenchCli, CtrlCStopsTheSweepAndWritesPartialResults) {
  FakeServer server([](int64_t, const nlohmann::json&) {
    FakeReply reply;
    reply.ttft_s = 0.05;
    reply.itl_s = 0.05;  // 20 tokens: about a second per request
    return reply;
  });
  const std::string dir = testing::MakeTempDir("bench_cli_sigint");
  const std::string out = JoinPath(dir, "results");
  const Child child =
      SpawnGlint({"--base-url", server.base_url(), "--input-len", "8", "--output-len", "20", "--concurrency", "2,4",
                  "--prompts-per-level", "6", "--warmup-requests", "0", "--no-progress", "--out", out},
                 dir);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (server.generation_requests() < 2 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(server.generation_requests(), 2) << Slurp(child.stderr_path);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(kill(child.pid, SIGINT), 0);
  const auto signalled = std::chrono::steady_clock::now();
  EXPECT_EQ(WaitFor(child, 10), 1);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count(), 2.0);
  EXPECT_NE(Slurp(child.stderr_path).find("interrupted by Ctrl-C: partial results written to " + out),
            std::string::npos)
      << Slurp(child.stderr_path);
  const nlohmann::json results = nlohmann::json::parse(Slurp(JoinPath(out, "results.json")));
  EXPECT_TRUE(results["interrupted"].get<bool>());
  ASSERT_EQ(results["levels"].size(), 1u);
  EXPECT_EQ(results["levels"][0]["cancelled"], 2);
  EXPECT_EQ(results["levels"][0]["skipped"], 4);
  EXPECT_NE(Slurp(child.stdout_path).find("interrupted"), std::string::npos);
}

TEST(BenchCli, BadInvocationsAreClearErrors) {
  const std::string dir = testing::MakeTempDir("bench_cli_errors");
  struct Case {
    std::vector<std::string> arguments;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--base-url", "http://127.0.0.1:1", "--workload", "nope"}, "unknown workload 'nope'"},
      {{"--base-url", "http://127.0.0.1:1", "--compare", "x.json"}, "either --base-url"},
      {{"--base-url", "http://127.0.0.1:1", "--extra-body", "{bad"}, "--extra-body is not valid JSON"},
      {{"--base-url", "http://127.0.0.1:1", "--range-ratio", "1.5"}, "outside [0, 1]"},
      {{"--base-url", "http://127.0.0.1:1", "--concurrency", "1", "--out", JoinPath(dir, "never")},
       "cannot reach the server at http://127.0.0.1:1"},
      {{}, "--base-url is required"},
      // The file is read before the server is asked anything (the server here is unreachable).
      {{"--base-url", "http://127.0.0.1:1", "--requests", JoinPath(dir, "missing.jsonl")},
       "--requests " + JoinPath(dir, "missing.jsonl")},
      {{"--compare", JoinPath(dir, "missing.json")}, "missing.json"},
  };
  for (const Case& c : cases) {
    const Child child = SpawnGlint(c.arguments, dir);
    EXPECT_EQ(WaitFor(child, 30), 1) << c.message;
    EXPECT_NE(Slurp(child.stderr_path).find(c.message), std::string::npos)
        << "expected '" << c.message << "' in: " << Slurp(child.stderr_path);
  }
  EXPECT_FALSE(PathExists(JoinPath(dir, "never")));  // no output directory when nothing was measured
}

}  // namespace
}  // namespace glint::bench
