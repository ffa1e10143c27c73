// Threads for request handlers that may block (tokenizing a long prompt, waiting for generation, streaming): the
// event loop hands each such request to this pool so that a slow request never stalls other connections.
//
// Threads start on demand up to `max_threads` and stay for reuse; tasks beyond that wait in order. Each connection
// has at most one request in a handler at a time, so the queue is bounded by the connection cap.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace glint::server {

class WorkerPool {
 public:
  explicit WorkerPool(size_t max_threads);
  // Runs the tasks already queued, then joins every thread.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Enqueue(std::function<void()> task);
  // Tasks queued or running.
  size_t pending() const;
  size_t threads() const;

 private:
  void Work();

  const size_t max_threads_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  size_t running_ = 0;
  bool stopping_ = false;
};

}  // namespace glint::server
