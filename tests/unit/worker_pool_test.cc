// The worker pool: every task runs exactly once per call, on a valid worker id, for many consecutive calls (the
// hand-off between calls is where a race would lose or repeat a task), including calls after idle workers went to
// sleep; ParallelFor covers its range exactly.
#include "base/worker_pool.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace glint {
namespace {

TEST(WorkerPool, EveryTaskRunsOnceOnAValidWorker) {
  for (int threads : {1, 2, 3}) {
    WorkerPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int call = 0; call < 500; ++call) {
      const int64_t tasks = 1 + call % 37;
      std::vector<std::atomic<int>> runs(tasks);
      std::atomic<bool> bad_worker{false};
      pool.Run(tasks, [&](int64_t task, int worker) {
        runs[task].fetch_add(1);
        if (worker < 0 || worker >= threads) bad_worker = true;
      });
      for (int64_t t = 0; t < tasks; ++t) ASSERT_EQ(runs[t].load(), 1) << "call " << call << " task " << t;
      ASSERT_FALSE(bad_worker);
    }
  }
}

TEST(WorkerPool, WakesSleepingWorkersAndUsesThem) {
  WorkerPool pool(2);
  pool.set_spin_microseconds(0);
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // workers are asleep now
    std::atomic<int> on_worker_one{0};
    // The caller's tasks wait for the woken worker to take one (bounded at 10 s), so a loaded machine that is slow
    // to schedule the worker cannot let the caller finish everything alone; only a worker never woken fails.
    pool.Run(8, [&](int64_t, int worker) {
      if (worker == 1) {
        on_worker_one.fetch_add(1);
        return;
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (on_worker_one.load() == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    EXPECT_GT(on_worker_one.load(), 0) << "round " << round;
  }
}

// A process-directed SIGTERM must never land on a compute thread (it would kill `glint serve` instead of draining
// it): workers block every signal, and the creating thread's own mask is left as it was.
TEST(WorkerPool, WorkersBlockSignalsAndTheCallerKeepsItsMask) {
  sigset_t before;
  pthread_sigmask(SIG_BLOCK, nullptr, &before);
  ASSERT_FALSE(sigismember(&before, SIGTERM));
  WorkerPool pool(2);
  sigset_t after;
  pthread_sigmask(SIG_BLOCK, nullptr, &after);
  EXPECT_FALSE(sigismember(&after, SIGTERM));
  std::atomic<int> checked{0}, unblocked{0};
  pool.Run(16, [&](int64_t, int worker) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (worker == 0) return;
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    checked.fetch_add(1);
    if (!sigismember(&mask, SIGTERM) || !sigismember(&mask, SIGINT)) unblocked.fetch_add(1);
  });
  EXPECT_GT(checked.load(), 0);
  EXPECT_EQ(unblocked.load(), 0);
}

TEST(WorkerPool, ParallelForCoversTheRangeExactly) {
  WorkerPool pool(3);
  for (int64_t count : {0, 1, 7, 64, 1001}) {
    for (int64_t grain : {1, 3, 64, 5000}) {
      std::vector<std::atomic<int>> hits(count);
      pool.ParallelFor(count, grain, [&](int64_t begin, int64_t end, int) {
        EXPECT_LE(end - begin, grain);
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(hits[i].load(), 1) << count << "/" << grain << " at " << i;
    }
  }
}

}  // namespace
}  // namespace glint
