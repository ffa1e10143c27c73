// Noticing a lost rank (docs/distributed.md "Faults"): every rank sends a heartbeat to every other rank twice a
// second, on a communicator of its own, from a thread of its own; a rank that hears nothing from a peer for
// GLINT_PEER_TIMEOUT seconds (default 4) ends the job with a message naming that peer and its host.
//
// Why heartbeats and not a deadline on each collective: Open MPI's TCP transport has no heartbeat, so a peer that
// is stopped (SIGSTOP, a debugger, a frozen VM) or whose link went down leaves every rank waiting in its next
// collective for as long as TCP keeps the connection (hours). A deadline on collectives would have to tell a dead
// peer from a slow one — a rank still loading its shard, reading experts from a slow disk, or an idle server whose
// followers wait minutes for the next batch plan — and a non-blocking collective cannot say which rank is
// missing. A heartbeat from a thread that does nothing else is independent of how long the work takes: it stops
// only when the process stops or the network between two ranks does, and the silent peer is known by name.
//
// This file holds the bookkeeping (no MPI: unit-tested in tests/unit/dist_test.cc); the thread that sends and
// receives the heartbeats is in mpi_communicator.cc.
#pragma once

#include <chrono>
#include <optional>
#include <vector>

#include "base/status.h"

namespace glint {

// The environment variable that sets the timeout in seconds; 0 turns the heartbeats off.
inline constexpr const char* kPeerTimeoutVariable = "GLINT_PEER_TIMEOUT";
inline constexpr double kDefaultPeerTimeoutSeconds = 4;

// The value of GLINT_PEER_TIMEOUT (`text`, null when unset): seconds ≥ 0 (0: off), at most one day.
Result<double> ParsePeerTimeout(const char* text);

// When each peer was last heard from, and which ones said goodbye (a rank that ends normally stops sending).
class PeerSilence {
 public:
  using Clock = std::chrono::steady_clock;
  // Peers 0 … ranks−1 except `self`, all heard from at `start`.
  PeerSilence(int ranks, int self, Clock::time_point start);

  void Heard(int peer, Clock::time_point when);
  void Departed(int peer);  // said goodbye: no longer watched
  // This rank itself was not running (stopped, or starved of CPU) until `now`: what it did not hear meanwhile says
  // nothing about its peers, so every peer counts as heard from now.
  void Resumed(Clock::time_point now);
  bool departed(int peer) const { return departed_[peer]; }
  // The peer silent the longest, if that is longer than `timeout` (a departed peer is never silent).
  std::optional<int> FirstSilent(Clock::time_point now, std::chrono::duration<double> timeout) const;
  // Seconds since `peer` was last heard from.
  double SecondsSilent(int peer, Clock::time_point now) const;

 private:
  std::vector<Clock::time_point> last_heard_;  // [ranks]
  std::vector<bool> departed_;                 // [ranks]; self counts as departed
};

}  // namespace glint
