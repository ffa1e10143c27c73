#include "dist/mpi_heartbeat.h"

#include <algorithm>

namespace glint {
namespace {
constexpr int kTag = 7;
// Often enough that a silent peer is noticed within a timeout of a few seconds, rarely enough to cost nothing.
constexpr std::chrono::duration<double> kLongestPeriod{0.5};
}  // namespace

MpiHeartbeat::MpiHeartbeat(MPI_Comm world, double timeout_seconds, OnSilent on_silent)
    : timeout_(timeout_seconds),
      period_(std::min(kLongestPeriod, timeout_ / 4)),
      on_silent_(std::move(on_silent)),
      silence_(1, 0, PeerSilence::Clock::now()) {
  MPI_Comm_dup(world, &comm_);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &ranks_);
  silence_ = PeerSilence(ranks_, rank_, PeerSilence::Clock::now());
  sends_.assign(ranks_, MPI_REQUEST_NULL);
  receives_.assign(ranks_, MPI_REQUEST_NULL);
  send_values_.assign(ranks_, kAlive);
  received_values_.assign(ranks_, 0);
  thread_ = std::thread([this] { Run(); });
}

MpiHeartbeat::~MpiHeartbeat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  MPI_Comm_free(&comm_);
}

void MpiHeartbeat::SendToEveryPeer(Message message) {
  for (int peer = 0; peer < ranks_; ++peer) {
    if (peer == rank_ || silence_.departed(peer)) continue;
    int done = 1;
    // A heartbeat still queued (a peer whose link is down) is not doubled: one pending message per peer.
    if (sends_[peer] != MPI_REQUEST_NULL) MPI_Test(&sends_[peer], &done, MPI_STATUS_IGNORE);
    if (!done) continue;
    send_values_[peer] = message;
    MPI_Isend(&send_values_[peer], 1, MPI_INT, peer, kTag, comm_, &sends_[peer]);
  }
}

void MpiHeartbeat::Receive(PeerSilence::Clock::time_point now) {
  for (int peer = 0; peer < ranks_; ++peer) {
    if (peer == rank_ || silence_.departed(peer)) continue;
    for (;;) {  // every message that arrived, then one receive left posted
      if (receives_[peer] == MPI_REQUEST_NULL) {
        MPI_Irecv(&received_values_[peer], 1, MPI_INT, peer, kTag, comm_, &receives_[peer]);
      }
      int done = 0;
      MPI_Test(&receives_[peer], &done, MPI_STATUS_IGNORE);
      if (!done) break;
      silence_.Heard(peer, now);
      if (received_values_[peer] == kGoodbye) {
        silence_.Departed(peer);
        break;
      }
    }
  }
}

void MpiHeartbeat::Run() {
  using Clock = PeerSilence::Clock;
  // Polls receives five times per period: a heartbeat is noticed within period / 5 of its arrival.
  const auto poll = std::chrono::duration_cast<Clock::duration>(period_ / 5);
  auto next_send = Clock::now(), last_round = next_send;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    lock.unlock();
    const auto now = Clock::now();
    // A round more than half a timeout after the last: this process was stopped (SIGSTOP, then SIGCONT) or
    // starved, and its own silence is no sign of its peers'. (Without this a rank resumed by mpirun's kill
    // sequence would blame a healthy peer before it dies.)
    if (now - last_round > timeout_ / 2) silence_.Resumed(now);
    last_round = now;
    if (now >= next_send) {
      SendToEveryPeer(kAlive);
      next_send = now + std::chrono::duration_cast<Clock::duration>(period_);
    }
    Receive(now);
    if (const std::optional<int> silent = silence_.FirstSilent(now, timeout_)) {
      on_silent_(*silent, silence_.SecondsSilent(*silent, now));
    }
    lock.lock();
    wake_.wait_for(lock, poll, [this] { return stop_; });
  }
  lock.unlock();
  Finish();
}

void MpiHeartbeat::Finish() {
  SendToEveryPeer(kGoodbye);
  // The goodbyes leave at once unless a peer is unreachable; then they are given up after a second, so that the
  // end of this rank cannot hang on a lost peer.
  const auto give_up = PeerSilence::Clock::now() + std::chrono::seconds(1);
  for (int peer = 0; peer < ranks_; ++peer) {
    if (receives_[peer] != MPI_REQUEST_NULL) {
      MPI_Cancel(&receives_[peer]);
      MPI_Request_free(&receives_[peer]);
    }
    while (sends_[peer] != MPI_REQUEST_NULL && PeerSilence::Clock::now() < give_up) {
      int done = 0;
      MPI_Test(&sends_[peer], &done, MPI_STATUS_IGNORE);
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (sends_[peer] != MPI_REQUEST_NULL) MPI_Request_free(&sends_[peer]);
  }
}

}  // namespace glint
