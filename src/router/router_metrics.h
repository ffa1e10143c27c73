// The router's /metrics (Prometheus text format): per backend requests, failures, outstanding requests, health and
// latency, and the router's own counters. Names and meanings: docs/router.md "Metrics".
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "router/placement.h"
#include "server/transport_gauges.h"

namespace glint::router {

struct RouterCounters {
  std::atomic<int64_t> affinity_hits{0};           // keyed requests sent where their prefix went before
  std::atomic<int64_t> affinity_misses{0};         // keyed requests placed by load (new prefix, or its backend is down)
  std::atomic<int64_t> affinity_yields{0};         // keyed requests whose prefix's backend was too far ahead in load
  std::atomic<int64_t> retries{0};                 // requests sent again to another backend after a connection failure
  std::atomic<int64_t> unavailable{0};             // requests answered 503 because no backend could take them
  std::atomic<int64_t> id_probes{0};               // ids looked for on every backend (not in the id map)
  std::atomic<int64_t> unknown_ids{0};             // ids no backend holds (404)
  std::atomic<int64_t> decode_without_prefill{0};  // requests sent to a decode server while no prefill server was up
};

std::string RenderRouterMetrics(const BackendPool& pool, const RouterCounters& counters,
                                const server::TransportGauges& gauges);

}  // namespace glint::router
