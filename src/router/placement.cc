#include "router/placement.h"

#include <algorithm>
#include <tuple>

namespace glint::router {
namespace {

// Request latencies through the router: from a cached token count to a long generation.
const std::vector<double> kLatencyBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
// A connection: from a loopback connect (≈ 0.1 ms) to a connect timeout.
const std::vector<double> kConnectBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1, 5};

}  // namespace

std::string_view HealthRoleName(BackendRole role) {
  switch (role) {
    case BackendRole::kReplica:
      return "both";
    case BackendRole::kDecode:
      return "decode";
    case BackendRole::kPrefill:
      return "prefill";
  }
  return "both";
}

Backend::Backend(BackendUrl url, BackendRole role)
    : url(std::move(url)),
      role(role),
      latency(kLatencyBuckets),
      connect_latency(kConnectBuckets),
      head_latency(kLatencyBuckets) {}

void Backend::SetHealth(bool is_healthy, std::string why) {
  std::lock_guard<std::mutex> lock(mutex_);
  healthy.store(is_healthy);
  reason_ = is_healthy ? std::string() : std::move(why);
}

std::string Backend::reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reason_;
}

BackendPool::BackendPool(std::vector<std::unique_ptr<Backend>> backends, size_t affinity_capacity, size_t id_capacity,
                         int64_t affinity_max_lead)
    : backends_(std::move(backends)),
      affinity_max_lead_(affinity_max_lead),
      prefixes_(affinity_capacity),
      ids_(id_capacity) {
  for (size_t i = 0; i < backends_.size(); ++i) {
    if (backends_[i]->role != BackendRole::kPrefill) serving_.push_back(i);
  }
}

bool BackendPool::Eligible(size_t index, const std::vector<size_t>& excluded) const {
  return index < backends_.size() && backends_[index]->role != BackendRole::kPrefill &&
         backends_[index]->healthy.load() && std::find(excluded.begin(), excluded.end(), index) == excluded.end();
}

std::optional<Choice> BackendPool::ChooseServing(std::optional<uint64_t> prefix_key,
                                                 const std::vector<size_t>& excluded) {
  std::optional<size_t> best;
  auto load = [&](size_t i) {
    return std::make_tuple(backends_[i]->outstanding.load(), backends_[i]->requests.load());
  };
  for (size_t index : serving_) {
    if (!Eligible(index, excluded)) continue;
    if (!best || load(index) < load(*best)) best = index;
  }
  if (!best) return std::nullopt;
  const std::optional<size_t> previous = prefix_key ? prefixes_.Find(*prefix_key) : std::nullopt;
  if (previous && Eligible(*previous, excluded)) {
    const int64_t lead = backends_[*previous]->outstanding.load() - backends_[*best]->outstanding.load();
    if (affinity_max_lead_ <= 0 || lead < affinity_max_lead_) return Choice{*previous, true, false};
    return Choice{*best, false, true};
  }
  return Choice{*best, false, false};
}

std::optional<size_t> BackendPool::ChoosePrefill() const {
  std::optional<size_t> best;
  for (size_t i = 0; i < backends_.size(); ++i) {
    const Backend& backend = *backends_[i];
    if (backend.role != BackendRole::kPrefill || !backend.healthy.load() || backend.transfer_port.load() <= 0) continue;
    if (!best || backend.outstanding.load() < backends_[*best]->outstanding.load()) best = i;
  }
  return best;
}

}  // namespace glint::router
