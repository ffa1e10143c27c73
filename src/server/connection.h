// Connection plumbing under cpp-httplib 0.11 (Debian 12): a bounded, lazily grown thread pool for connections,
// and disconnect detection for a request in progress.
//
// Why disconnect detection looks up the socket: httplib 0.11 does not give a handler its socket, and a waiting
// handler (queued request, long prefill, non-streaming generation) writes nothing, so a write error cannot tell
// it the client left. The connection is identified by its address pair (local and remote address and port, which
// Request carries), found among the process's sockets once per request, and polled for end-of-stream.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace glint::server {

// httplib's task queue: each accepted connection is one task that serves it until it closes. Up to
// `max_threads` connections are served at once (threads start on demand); up to `max_pending` more wait for a
// thread; beyond that, connections are handed to one reject thread on which IsRejectThread() is true, so the
// request handler answers 503 as soon as the request has arrived (a rejected client that sends nothing holds the
// reject thread until the keep-alive timeout, delaying other rejected clients, never the served ones).
class ConnectionPool final : public httplib::TaskQueue {
 public:
  // `active` (may be null) counts the connections being served.
  ConnectionPool(size_t max_threads, size_t max_pending, std::atomic<int64_t>* active = nullptr);
  ~ConnectionPool() override;

  void enqueue(std::function<void()> task) override;
  void shutdown() override;

  static bool IsRejectThread();
  size_t threads() const;

 private:
  void Work();
  void RejectWork();

  const size_t max_threads_;
  const size_t max_pending_;
  std::atomic<int64_t>* active_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::condition_variable reject_ready_;
  std::deque<std::function<void()>> tasks_;
  std::deque<std::function<void()>> rejected_;
  std::vector<std::thread> threads_;
  std::thread reject_thread_;
  size_t idle_ = 0;     // threads waiting for a task
  size_t running_ = 0;  // tasks being served (counted apart from idle_: a thread just started is neither)
  bool stopping_ = false;
};

// The socket of the connection with this address pair, or −1 if none is found.
int FindConnectionSocket(const std::string& local_address, int local_port, const std::string& remote_address,
                         int remote_port);
// True when the peer has closed (or reset) the connection; data waiting to be read does not count.
bool PeerClosed(int socket);

}  // namespace glint::server
