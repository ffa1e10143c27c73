#include "server/worker_pool.h"

#include <algorithm>

namespace glint::server {

WorkerPool::WorkerPool(size_t max_threads) : max_threads_(std::max<size_t>(1, max_threads)) {}

WorkerPool::~WorkerPool() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    threads.swap(threads_);
  }
  ready_.notify_all();
  for (auto& thread : threads) thread.join();
}

void WorkerPool::Enqueue(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mutex_);
  tasks_.push_back(std::move(task));
  if (idle_ < tasks_.size() && threads_.size() < max_threads_) threads_.emplace_back([this] { Work(); });
  ready_.notify_one();
}

void WorkerPool::Work() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    ++idle_;
    ready_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
    --idle_;
    if (tasks_.empty()) return;  // stopping and nothing left
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    ++running_;
    lock.unlock();
    task();
    task = nullptr;  // whatever the task holds (a connection) is released outside the lock
    lock.lock();
    --running_;
  }
}

size_t WorkerPool::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tasks_.size() + running_;
}

size_t WorkerPool::threads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return threads_.size();
}

}  // namespace glint::server
