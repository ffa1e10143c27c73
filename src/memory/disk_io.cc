#include "memory/disk_io.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>

namespace glint {

// What the thread and its owner share; held by both, so a detached thread never outlives it.
struct DiskIoThread::Shared {
  std::mutex mutex;
  std::condition_variable wake, done;
  std::deque<std::shared_ptr<Job>> queue;  // guarded by mutex
  int64_t abandoned_running = 0;           // abandoned jobs not yet finished; guarded by mutex
  bool stopping = false, exited = false;   // guarded by mutex
  std::function<void()> before_each;
};

DiskIoThread::DiskIoThread(std::function<void()> before_each) : shared_(std::make_shared<Shared>()) {
  shared_->before_each = std::move(before_each);
  thread_ = std::thread([shared = shared_] { Loop(shared); });
}

DiskIoThread::~DiskIoThread() { Stop(std::chrono::seconds(1)); }

void DiskIoThread::Loop(const std::shared_ptr<Shared>& shared) {
  std::unique_lock<std::mutex> lock(shared->mutex);
  for (;;) {
    shared->wake.wait(lock, [&] { return shared->stopping || !shared->queue.empty(); });
    if (shared->queue.empty()) break;  // stopping, and every queued job has run
    std::shared_ptr<Job> job = std::move(shared->queue.front());
    shared->queue.pop_front();
    lock.unlock();
    if (shared->before_each) shared->before_each();
    job->Run();
    lock.lock();
    job->finished_ = true;
    if (job->abandoned()) --shared->abandoned_running;
    shared->done.notify_all();
  }
  shared->exited = true;
  shared->done.notify_all();
}

DiskIoThread::Outcome DiskIoThread::Run(const std::shared_ptr<Job>& job, std::chrono::nanoseconds timeout) {
  std::unique_lock<std::mutex> lock(shared_->mutex);
  if (shared_->abandoned_running > 0) return Outcome::kBusy;
  shared_->queue.push_back(job);
  shared_->wake.notify_one();
  if (shared_->done.wait_for(lock, timeout, [&] { return job->finished_; })) return Outcome::kDone;
  job->abandoned_.store(true, std::memory_order_release);
  ++shared_->abandoned_running;
  return Outcome::kTimedOut;
}

bool DiskIoThread::Stop(std::chrono::nanoseconds patience) {
  if (!thread_.joinable()) return true;
  bool exited;
  {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    shared_->stopping = true;
    shared_->wake.notify_one();
    exited = shared_->done.wait_for(lock, patience, [&] { return shared_->exited; });
  }
  if (exited) {
    thread_.join();
  } else {
    thread_.detach();  // blocked in a job for good: it keeps `shared` alive and exits if the job ever returns
  }
  return exited;
}

}  // namespace glint
