#include "dist/peer_watch.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace glint {

Result<double> ParsePeerTimeout(const char* text) {
  if (text == nullptr) return kDefaultPeerTimeoutSeconds;
  char* end = nullptr;
  errno = 0;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !std::isfinite(seconds) || seconds < 0 || seconds > 86400) {
    return InvalidArgument(kPeerTimeoutVariable, "='", text,
                           "': expected the seconds after which a silent rank ends the job (0 to 86400; 0 turns "
                           "the heartbeats off)");
  }
  return seconds;
}

PeerSilence::PeerSilence(int ranks, int self, Clock::time_point start)
    : last_heard_(ranks, start), departed_(ranks, false) {
  departed_[self] = true;
}

void PeerSilence::Heard(int peer, Clock::time_point when) {
  if (when > last_heard_[peer]) last_heard_[peer] = when;
}

void PeerSilence::Departed(int peer) { departed_[peer] = true; }

void PeerSilence::Resumed(Clock::time_point now) {
  for (Clock::time_point& heard : last_heard_) heard = std::max(heard, now);
}

std::optional<int> PeerSilence::FirstSilent(Clock::time_point now, std::chrono::duration<double> timeout) const {
  std::optional<int> silent;
  for (int peer = 0; peer < static_cast<int>(last_heard_.size()); ++peer) {
    if (departed_[peer] || now - last_heard_[peer] <= timeout) continue;
    if (!silent || last_heard_[peer] < last_heard_[*silent]) silent = peer;
  }
  return silent;
}

double PeerSilence::SecondsSilent(int peer, Clock::time_point now) const {
  return std::chrono::duration<double>(now - last_heard_[peer]).count();
}

}  // namespace glint
