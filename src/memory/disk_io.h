// One thread that runs file operations for a caller that must not block on them: the engine thread, for the prefix
// cache's disk tier (disk_tier.h). The caller waits for each operation at most a deadline. A job that outlives the
// wait is abandoned, not cancelled (a thread blocked in open() or read() cannot be interrupted): it owns everything
// it touches, so it finishes harmlessly whenever it does, and until it does new jobs are refused at once instead of
// queueing behind it. So a slow or hung file costs the caller one deadline, then nothing (issue 37).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

namespace glint {

class DiskIoThread {
 public:
  class Job {
   public:
    virtual ~Job() = default;
    virtual void Run() = 0;  // on the I/O thread
    // The caller stopped waiting: the job's result will never be read (a write then removes what it wrote).
    bool abandoned() const { return abandoned_.load(std::memory_order_acquire); }

   private:
    friend class DiskIoThread;
    std::atomic<bool> abandoned_{false};
    bool finished_ = false;  // guarded by the thread's mutex
  };
  enum class Outcome {
    kDone,      // the job ran to its end within the deadline
    kTimedOut,  // still running (or queued) at the deadline: abandoned
    kBusy,      // an abandoned job has not finished yet: not started
  };

  // `before_each` (tests): runs on the I/O thread before every job; a hook that sleeps stands for a slow disk.
  explicit DiskIoThread(std::function<void()> before_each = {});
  ~DiskIoThread();
  DiskIoThread(const DiskIoThread&) = delete;
  DiskIoThread& operator=(const DiskIoThread&) = delete;

  // Runs `job` on the thread and waits for it at most `timeout`. One caller thread at a time.
  Outcome Run(const std::shared_ptr<Job>& job, std::chrono::nanoseconds timeout);
  // Stops the thread: true once it has exited, false when it is still inside a job after `patience` (it is then
  // detached, holding the queue's state; whatever its jobs use must stay valid, e.g. a directory descriptor).
  bool Stop(std::chrono::nanoseconds patience);

 private:
  struct Shared;
  static void Loop(const std::shared_ptr<Shared>& shared);

  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace glint
