// Figures the HTTP transport keeps for /metrics (a header of its own: metrics.h needs them, the transport fills
// them in, and neither should include the other).
#pragma once

#include <atomic>
#include <cstdint>

namespace glint::server {

// Gauges the transport keeps (all go back to 0 when the server is idle); rendered by /metrics.
struct TransportGauges {
  std::atomic<int64_t> connections{0};           // open connections (those refused at the cap not included)
  std::atomic<int64_t> requests{0};              // from the end of a request's headers to its last response byte
  std::atomic<int64_t> rejected_connections{0};  // a counter: connections answered 503 at the cap
};

}  // namespace glint::server
