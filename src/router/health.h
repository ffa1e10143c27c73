// Backend health (docs/router.md "Health"): one GET /health, and what its answer means for routing.
#pragma once

#include <functional>

#include "router/placement.h"
#include "router/upstream.h"

namespace glint::router {

// Asks `backend` for /health and records the verdict (Backend::SetHealth): healthy when it answers 200 with a
// JSON object whose `role` matches how it was listed (a missing role counts as "both", what servers without roles
// report), and, for a prefill server, a `transfer_port` in [1, 65535]. A failed connection, a timeout, another
// status (503 while a server is damaged, stalled or shutting down) or a wrong role makes it unhealthy, with the
// reason kept for /health and /metrics. Logs each change. `keep_going` false abandons the check (shutdown).
void CheckBackend(Backend& backend, const UpstreamTimeouts& timeouts, const std::function<bool()>& keep_going);

}  // namespace glint::router
