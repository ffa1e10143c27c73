#include "base/worker_pool.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>

#include "base/status.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GLINT_CPU_RELAX() _mm_pause()
#else
#define GLINT_CPU_RELAX() std::this_thread::yield()
#endif

namespace glint {

WorkerPool::WorkerPool(int threads) {
  GLINT_CHECK(threads >= 1) << "a worker pool needs at least one thread, got " << threads;
  threads_.reserve(threads - 1);
  // Workers block every signal: a process-directed signal (SIGTERM, SIGINT) then goes to a thread that expects it
  // (glint serve's signal watcher, or the main thread's default action), never to a compute thread, whatever mask
  // the creating thread had. A new thread inherits its creator's mask, so the mask is set around the creation.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  for (int worker = 1; worker < threads; ++worker) threads_.emplace_back([this, worker] { WorkerLoop(worker); });
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void WorkerPool::RunTasks(int worker) {
  const FunctionRef<void(int64_t, int)>& body = *body_;
  for (int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed); task < tasks_;
       task = next_task_.fetch_add(1, std::memory_order_relaxed)) {
    body(task, worker);
  }
}

void WorkerPool::WorkerLoop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    // Poll for the next generation, then sleep until it comes.
    const auto spin_until = std::chrono::steady_clock::now() +
                            std::chrono::microseconds(spin_microseconds_.load(std::memory_order_relaxed));
    uint64_t generation = generation_.load(std::memory_order_acquire);
    while (generation == seen && !stop_.load(std::memory_order_acquire)) {
      for (int i = 0; i < 64; ++i) GLINT_CPU_RELAX();
      generation = generation_.load(std::memory_order_acquire);
      if (generation != seen || std::chrono::steady_clock::now() > spin_until) break;
    }
    if (generation == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
      });
      generation = generation_.load(std::memory_order_acquire);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation;
    // Join, then check the call is still open (sequentially consistent against the caller's close-then-count, so
    // either the caller sees this worker or this worker sees the call closed).
    joined_.fetch_add(1, std::memory_order_seq_cst);
    if (open_.load(std::memory_order_seq_cst) == generation) RunTasks(worker);
    joined_.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void WorkerPool::Run(int64_t tasks, FunctionRef<void(int64_t task, int worker)> body) {
  GLINT_CHECK(!running_) << "WorkerPool::Run called from inside a task (or from two threads at once)";
  if (tasks <= 0) return;
  if (threads_.empty() || tasks == 1) {  // nothing to share: skip the hand-off
    for (int64_t task = 0; task < tasks; ++task) body(task, 0);
    return;
  }
  running_ = true;
  body_ = &body;
  tasks_ = tasks;
  next_task_.store(0, std::memory_order_relaxed);
  {
    // Under the mutex so that a worker between its predicate check and its wait cannot miss the wake-up.
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
    open_.store(generation, std::memory_order_seq_cst);
    generation_.store(generation, std::memory_order_seq_cst);
  }
  wake_.notify_all();
  RunTasks(0);
  // Close the call, then wait for the workers that joined it to leave (body_ and the counters are reused next).
  open_.store(0, std::memory_order_seq_cst);
  while (joined_.load(std::memory_order_seq_cst) != 0) GLINT_CPU_RELAX();
  body_ = nullptr;
  running_ = false;
}

void WorkerPool::ParallelFor(int64_t count, int64_t grain,
                             FunctionRef<void(int64_t begin, int64_t end, int worker)> body) {
  if (count <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t tasks = (count + grain - 1) / grain;
  Run(tasks, [&](int64_t task, int worker) {
    const int64_t begin = task * grain;
    body(begin, std::min(count, begin + grain), worker);
  });
}

}  // namespace glint
