// How a long-running command (glint serve, glint router) stops: SIGTERM and SIGINT are blocked in every thread
// (BlockStopSignals, called before any thread starts, so every thread inherits the mask) and taken by one waiting
// thread (StopSignalWatcher), which calls the command's drain; so no handler runs in the middle of the engine or a
// request.
#pragma once

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <functional>
#include <thread>
#include <utility>

#include "base/log.h"

namespace glint::cli {

// From here on SIGTERM/SIGINT wait for a StopSignalWatcher (before, they end the process as usual).
inline void BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a peer that vanishes mid-write is an error return, not a signal
}

// While it lives, the first SIGTERM or SIGINT calls `on_stop` (once, on the watcher's thread).
class StopSignalWatcher {
 public:
  explicit StopSignalWatcher(std::function<void()> on_stop) : on_stop_(std::move(on_stop)) {
    thread_ = std::thread([this] {
      sigset_t signals;
      sigemptyset(&signals);
      sigaddset(&signals, SIGTERM);
      sigaddset(&signals, SIGINT);
      const timespec tick{0, 100'000'000};
      while (!done_.load()) {
        const int signal = sigtimedwait(&signals, nullptr, &tick);
        if (signal == SIGTERM || signal == SIGINT) {
          LogInfo("received ", signal == SIGTERM ? "SIGTERM" : "SIGINT");
          on_stop_();
          return;
        }
      }
    });
  }
  ~StopSignalWatcher() {
    done_.store(true);
    thread_.join();
  }
  StopSignalWatcher(const StopSignalWatcher&) = delete;
  StopSignalWatcher& operator=(const StopSignalWatcher&) = delete;

 private:
  std::function<void()> on_stop_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace glint::cli
