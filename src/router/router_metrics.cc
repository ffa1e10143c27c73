#include "router/router_metrics.h"

namespace glint::router {
namespace {

// One metric family: its HELP and TYPE lines, then a sample per backend.
template <typename Value>
void Family(const BackendPool& pool, std::string_view name, std::string_view type, std::string_view help, Value value,
            std::string& out) {
  out += StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  for (size_t i = 0; i < pool.size(); ++i) {
    const Backend& backend = pool.at(i);
    out += StrCat(name, "{backend=\"", backend.url.text, "\",role=\"", HealthRoleName(backend.role), "\"} ",
                  value(backend), "\n");
  }
}

// A histogram family with a histogram per serving backend (the router does not see a prefill server's own time).
void BackendHistogram(const BackendPool& pool, std::string_view name, std::string_view help,
                      server::Histogram Backend::*histogram, std::string& out) {
  out += StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " histogram\n");
  for (size_t i = 0; i < pool.size(); ++i) {
    const Backend& backend = pool.at(i);
    if (backend.role == BackendRole::kPrefill) continue;
    (backend.*histogram)
        .Render(std::string(name),
                StrCat("backend=\"", backend.url.text, "\",role=\"", HealthRoleName(backend.role), "\""), out);
  }
}

void Single(std::string_view name, std::string_view type, std::string_view help, int64_t value, std::string& out) {
  out += StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ", value, "\n");
}

}  // namespace

std::string RenderRouterMetrics(const BackendPool& pool, const RouterCounters& counters,
                                const server::TransportGauges& gauges) {
  std::string out;
  Family(
      pool, "glint_router_backend_requests_total", "counter",
      "requests sent to the backend (a prefill server: requests it was named for)",
      [](const Backend& b) { return b.requests.load(); }, out);
  Family(
      pool, "glint_router_backend_failures_total", "counter",
      "connection failures, timeouts, broken streams and 5xx answers of the backend",
      [](const Backend& b) { return b.failures.load(); }, out);
  Family(
      pool, "glint_router_backend_outstanding", "gauge", "requests in progress on the backend",
      [](const Backend& b) { return b.outstanding.load(); }, out);
  Family(
      pool, "glint_router_backend_healthy", "gauge", "1 when the backend's last /health check passed",
      [](const Backend& b) { return b.healthy.load() ? 1 : 0; }, out);
  Family(
      pool, "glint_router_backend_connections_opened_total", "counter",
      "connections opened to the backend for requests (health checks aside)",
      [](const Backend& b) { return b.connections.opened(); }, out);
  Family(
      pool, "glint_router_backend_connections_reused_total", "counter",
      "requests sent on an idle keep-alive connection to the backend instead of a new one",
      [](const Backend& b) { return b.connections.reused(); }, out);
  BackendHistogram(pool, "glint_router_backend_request_seconds", "request sent to the backend -> response complete",
                   &Backend::latency, out);
  BackendHistogram(pool, "glint_router_backend_connect_seconds", "connecting to the backend (new connections only)",
                   &Backend::connect_latency, out);
  BackendHistogram(pool, "glint_router_backend_response_head_seconds",
                   "request started (connect included) -> response head (a decode server: its state transfer)",
                   &Backend::head_latency, out);
  Single("glint_router_prefix_affinity_hits_total", "counter",
         "requests sent to the backend that served their conversation prefix before", counters.affinity_hits.load(),
         out);
  Single("glint_router_prefix_affinity_misses_total", "counter",
         "requests with a conversation prefix placed by load (prefix new, forgotten, or its backend down)",
         counters.affinity_misses.load(), out);
  Single("glint_router_prefix_affinity_yields_total", "counter",
         "requests with a remembered prefix placed by load: its backend had --affinity-max-lead more outstanding "
         "requests than the least loaded",
         counters.affinity_yields.load(), out);
  Single("glint_router_retries_total", "counter", "requests retried on another backend after a connection failure",
         counters.retries.load(), out);
  Single("glint_router_unavailable_total", "counter", "requests answered 503: no backend could take them",
         counters.unavailable.load(), out);
  Single("glint_router_id_probes_total", "counter", "ids not in the id map, looked for on every backend",
         counters.id_probes.load(), out);
  Single("glint_router_unknown_ids_total", "counter", "ids no backend holds (answered 404)",
         counters.unknown_ids.load(), out);
  Single("glint_router_decode_without_prefill_total", "counter",
         "requests sent to a decode server while no prefill server was healthy (it prefilled locally)",
         counters.decode_without_prefill.load(), out);
  Single("glint_router_connections", "gauge", "open client connections", gauges.connections.load(), out);
  Single("glint_router_requests_in_progress", "gauge", "client requests in progress", gauges.requests.load(), out);
  return out;
}

}  // namespace glint::router
