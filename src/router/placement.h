// Where the router sends a request (docs/router.md "Placement"): the backends with their live state, the
// prefix-affinity map (a session's next turn goes where its previous turn went) and the id map (a file, batch or
// response id goes to the backend that created it). No I/O here: the proxy (router.cc) reports what happened and
// asks for choices, so every rule is testable without a socket (tests/unit/router_test.cc); each backend's pool of
// idle connections is only held here, for the proxy's calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "router/backend_url.h"
#include "router/upstream.h"
#include "server/metrics.h"

namespace glint::router {

// --replica: a `glint serve --role both` server; --decode / --prefill: the two halves of disaggregated serving.
enum class BackendRole { kReplica, kDecode, kPrefill };
// The `role` a backend's /health reports for this kind ("both" for a replica).
std::string_view HealthRoleName(BackendRole role);

struct Backend {
  Backend(BackendUrl url, BackendRole role);

  const BackendUrl url;
  const BackendRole role;
  std::atomic<bool> healthy{false};   // false until its first /health answers 200 (with the right role)
  std::atomic<int> transfer_port{0};  // a prefill server's, from its /health; 0 until known
  std::atomic<int64_t> outstanding{0};
  std::atomic<int64_t> requests{0};  // requests sent (for a prefill server: requests it was named for)
  std::atomic<int64_t> failures{0};  // connection failures, timeouts and 5xx answers
  server::Histogram latency;         // seconds, request sent → response complete (serving backends)
  // Seconds to connect, and from the request's start (connect included) to the response head: for a decode
  // server's streamed answer, its transfer of the prompt's state (docs/disaggregation.md "Where the time goes").
  server::Histogram connect_latency, head_latency;
  UpstreamPool connections;  // idle keep-alive connections, for the proxy's calls (not the health checks)

  void SetHealth(bool is_healthy, std::string why);
  std::string reason() const;  // why it is unhealthy ("" when healthy)

 private:
  mutable std::mutex mutex_;
  std::string reason_ = "not checked yet";
};

// A map of at most `capacity` entries that forgets the least recently used one. Thread-safe.
template <typename Key>
class LruMap {
 public:
  explicit LruMap(size_t capacity) : capacity_(capacity) {}

  std::optional<size_t> Find(const Key& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = index_.find(key);
    if (found == index_.end()) return std::nullopt;
    order_.splice(order_.begin(), order_, found->second);
    return found->second->second;
  }

  void Put(const Key& key, size_t value) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = index_.find(key);
    if (found != index_.end()) {
      found->second->second = value;
      order_.splice(order_.begin(), order_, found->second);
      return;
    }
    if (capacity_ == 0) return;
    if (index_.size() == capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    order_.emplace_front(key, value);
    index_.emplace(key, order_.begin());
  }

  void Erase(const Key& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = index_.find(key);
    if (found == index_.end()) return;
    order_.erase(found->second);
    index_.erase(found);
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return index_.size();
  }

 private:
  using Entry = std::pair<Key, size_t>;
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<Key, typename std::list<Entry>::iterator> index_;
};

struct Choice {
  size_t backend = 0;
  bool affinity_hit = false;      // chosen because its prefix key was remembered
  bool affinity_yielded = false;  // its prefix's backend was passed over for load (see BackendPool::ChooseServing)
};

class BackendPool {
 public:
  // `affinity_capacity` prefix keys and `id_capacity` ids are remembered (least recently used forgotten first).
  // `affinity_max_lead`: a remembered backend with this many more outstanding requests than the least loaded one
  // is passed over (0: affinity wins whatever the load).
  BackendPool(std::vector<std::unique_ptr<Backend>> backends, size_t affinity_capacity, size_t id_capacity,
              int64_t affinity_max_lead = 0);

  size_t size() const { return backends_.size(); }
  Backend& at(size_t index) { return *backends_[index]; }
  const Backend& at(size_t index) const { return *backends_[index]; }

  // A backend that answers the API (a replica or a decode server), healthy and not in `excluded`: the one that
  // served `prefix_key` before if it qualifies and is not `affinity_max_lead` or more outstanding requests ahead
  // of the least loaded, otherwise the least loaded (fewest outstanding requests, then fewest requests so far,
  // then the first listed). nullopt when none qualifies. A cache hit saves the prefix's prefill; a backend that
  // far ahead makes the request wait for others' steps instead, and a busy session would pin a replica forever.
  std::optional<Choice> ChooseServing(std::optional<uint64_t> prefix_key, const std::vector<size_t>& excluded);
  // The healthy prefill server with a known transfer port and the fewest outstanding requests.
  std::optional<size_t> ChoosePrefill() const;

  void RememberPrefix(uint64_t prefix_key, size_t backend) { prefixes_.Put(prefix_key, backend); }
  void RememberId(const std::string& id, size_t backend) { ids_.Put(id, backend); }
  void ForgetId(const std::string& id) { ids_.Erase(id); }
  std::optional<size_t> OwnerOf(const std::string& id) { return ids_.Find(id); }
  size_t remembered_ids() const { return ids_.size(); }
  size_t remembered_prefixes() const { return prefixes_.size(); }

  // Indices of the backends that answer the API (replicas and decode servers), healthy or not.
  const std::vector<size_t>& serving() const { return serving_; }
  bool has_prefill() const { return serving_.size() < backends_.size(); }

 private:
  bool Eligible(size_t index, const std::vector<size_t>& excluded) const;

  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<size_t> serving_;
  int64_t affinity_max_lead_ = 0;
  LruMap<uint64_t> prefixes_;
  LruMap<std::string> ids_;
};

}  // namespace glint::router
