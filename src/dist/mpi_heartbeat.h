// The heartbeat thread of an MPI rank (dist/peer_watch.h says why heartbeats): on a duplicate of MPI_COMM_WORLD
// used by nothing else, it sends one int to every peer every `period` and keeps one receive posted from each; a
// peer silent for longer than the timeout is reported to `on_silent`, which ends the job and does not return.
// Needs MPI_THREAD_MULTIPLE (this thread and the engine thread call MPI at the same time). Compiled only with MPI.
#pragma once

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "dist/peer_watch.h"

namespace glint {

class MpiHeartbeat {
 public:
  // Called on the heartbeat thread with the silent peer's world rank and how long it has been silent.
  using OnSilent = std::function<void(int peer, double seconds)>;
  // Collective over `world` (it is duplicated here): every rank creates its heartbeat at the same point.
  MpiHeartbeat(MPI_Comm world, double timeout_seconds, OnSilent on_silent);
  // Says goodbye to every peer (they stop watching this rank), then stops the thread: before MPI_Finalize.
  ~MpiHeartbeat();
  MpiHeartbeat(const MpiHeartbeat&) = delete;
  MpiHeartbeat& operator=(const MpiHeartbeat&) = delete;

 private:
  enum Message : int { kAlive = 1, kGoodbye = 2 };
  void Run();
  void SendToEveryPeer(Message message);
  // Completes the receives that arrived, records them and posts the next ones.
  void Receive(PeerSilence::Clock::time_point now);
  void Finish();  // goodbyes sent (waiting at most 1 s), receives cancelled

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, ranks_ = 1;
  std::chrono::duration<double> timeout_, period_;
  OnSilent on_silent_;
  PeerSilence silence_;
  std::vector<MPI_Request> sends_, receives_;  // [ranks]; MPI_REQUEST_NULL when none is pending
  std::vector<int> send_values_, received_values_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace glint
