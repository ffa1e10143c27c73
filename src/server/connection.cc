#include "server/connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

namespace glint::server {
namespace {

thread_local bool t_reject_thread = false;

// "address", port of a socket address (IPv4 or IPv6).
bool Describe(const sockaddr_storage& address, std::string& text, int& port) {
  char buffer[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &v4->sin_addr, buffer, sizeof(buffer));
    port = ntohs(v4->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &v6->sin6_addr, buffer, sizeof(buffer));
    port = ntohs(v6->sin6_port);
  } else {
    return false;
  }
  text = buffer;
  return true;
}

}  // namespace

ConnectionPool::ConnectionPool(size_t max_threads, size_t max_pending, std::atomic<int64_t>* active)
    : max_threads_(max_threads), max_pending_(max_pending), active_(active) {
  reject_thread_ = std::thread([this] { RejectWork(); });
}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::enqueue(std::function<void()> task) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (running_ + tasks_.size() >= max_threads_ + max_pending_) {
    rejected_.push_back(std::move(task));
    reject_ready_.notify_one();
    return;
  }
  tasks_.push_back(std::move(task));
  if (idle_ < tasks_.size() && threads_.size() < max_threads_) {
    threads_.emplace_back([this] { Work(); });
  }
  ready_.notify_one();
}

void ConnectionPool::Work() {
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
    if (active_ != nullptr) active_->fetch_add(1);
    task();
    if (active_ != nullptr) active_->fetch_sub(1);
    lock.lock();
    --running_;
  }
}

void ConnectionPool::RejectWork() {
  t_reject_thread = true;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    reject_ready_.wait(lock, [&] { return stopping_ || !rejected_.empty(); });
    if (rejected_.empty()) return;
    std::function<void()> task = std::move(rejected_.front());
    rejected_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

void ConnectionPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && threads_.empty() && !reject_thread_.joinable()) return;
    stopping_ = true;
    threads.swap(threads_);
  }
  ready_.notify_all();
  reject_ready_.notify_all();
  for (auto& thread : threads) thread.join();
  if (reject_thread_.joinable()) reject_thread_.join();
}

bool ConnectionPool::IsRejectThread() { return t_reject_thread; }

size_t ConnectionPool::threads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return threads_.size();
}

int FindConnectionSocket(const std::string& local_address, int local_port, const std::string& remote_address,
                         int remote_port) {
  DIR* directory = opendir("/proc/self/fd");
  if (directory == nullptr) return -1;
  int found = -1;
  while (dirent* entry = readdir(directory)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(directory)) continue;
    struct stat info {};
    if (fstat(static_cast<int>(fd), &info) != 0 || !S_ISSOCK(info.st_mode)) continue;
    sockaddr_storage local{};
    sockaddr_storage remote{};
    socklen_t local_size = sizeof(local);
    socklen_t remote_size = sizeof(remote);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_size) != 0) continue;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&remote), &remote_size) != 0) continue;
    std::string local_text, remote_text;
    int local_number = 0, remote_number = 0;
    if (!Describe(local, local_text, local_number) || !Describe(remote, remote_text, remote_number)) continue;
    if (local_number == local_port && remote_number == remote_port && remote_text == remote_address &&
        (local_address.empty() || local_text == local_address)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(directory);
  return found;
}

bool PeerClosed(int socket) {
  pollfd entry{socket, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&entry, 1, 0) <= 0) return false;
  if (entry.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (entry.revents & POLLIN) {
    char byte = 0;
    return recv(socket, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

}  // namespace glint::server
