// A persistent pool of worker threads, created once by the caller and passed to whatever runs in parallel (no
// thread is created per operation; no global pool).
//
// Run(tasks, body) spreads body(task, worker) over the workers, the calling thread being worker 0, and returns when
// every task has run. Tasks are claimed one at a time from an atomic counter, so uneven tasks balance themselves.
// Between calls, idle workers spin briefly (a decode step issues a parallel operation every few tens of
// microseconds, less than a futex wake-up costs) and then sleep on a condition variable, so an idle pool costs no
// CPU on a machine shared with other work.
//
// A worker joins a call only while the call is open; the caller closes it once it runs out of tasks and then waits
// only for the workers that joined. A worker that the OS has not scheduled (or that was asleep) therefore never
// delays a call it took no part in: on a shared machine the caller would otherwise wait a scheduler time slice,
// several milliseconds, at each of the ~80 parallel calls of a decode step.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "base/function_ref.h"

namespace glint {

class WorkerPool {
 public:
  // `threads` workers in total, including the calling thread; at least 1 (1 = everything on the caller).
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int size() const { return static_cast<int>(threads_.size()) + 1; }

  // Calls body(task, worker) once for every task in [0, tasks); worker ∈ [0, size()) names the thread, for
  // per-thread scratch. Not reentrant: a body must not call Run on the same pool, and only one thread may call
  // Run at a time.
  void Run(int64_t tasks, FunctionRef<void(int64_t task, int worker)> body);

  // Run, or a plain loop on the calling thread when the whole call is smaller than `min_parallel_work` (in the
  // caller's unit, e.g. multiply-adds): a hand-off to a sleeping or descheduled worker costs more than tiny work.
  void RunIfWorthIt(int64_t tasks, int64_t work, int64_t min_parallel_work,
                    FunctionRef<void(int64_t task, int worker)> body) {
    if (work < min_parallel_work) {
      for (int64_t task = 0; task < tasks; ++task) body(task, 0);
    } else {
      Run(tasks, body);
    }
  }

  // Splits [0, count) into ranges of at most `grain` items and calls body(begin, end, worker) for each.
  void ParallelFor(int64_t count, int64_t grain, FunctionRef<void(int64_t begin, int64_t end, int worker)> body);

  // How long an idle worker polls for the next call before it sleeps. Default 200 µs.
  void set_spin_microseconds(int64_t microseconds) { spin_microseconds_ = microseconds; }

 private:
  void WorkerLoop(int worker);
  void RunTasks(int worker);

  std::vector<std::thread> threads_;
  std::atomic<uint64_t> generation_{0};  // bumped by each Run; workers wait for a change
  std::atomic<uint64_t> open_{0};        // the generation workers may still join, 0 once the caller closed it
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> joined_{0};  // workers inside a call (joining, running tasks, leaving)
  int64_t tasks_ = 0;
  const FunctionRef<void(int64_t, int)>* body_ = nullptr;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> spin_microseconds_{200};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool running_ = false;  // guards against reentrant Run
};

}  // namespace glint
