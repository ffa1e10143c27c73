// Routing traces of the routed experts (`--expert-trace FILE`, docs/expert-cache.md "Policy") and the cache
// policies replayed against them (`glint replay-expert-trace`).
//
// A trace is text: a header line "# glint expert trace: moe_layers M experts E top_k K", then one line per MoE
// layer pass (what the expert cache is asked for at once):
//   <step> <layer> <expert>:<rows> <expert>:<rows> ...   (distinct experts ascending; layer "mtp" for the MTP layer)
// where step counts Forward calls (an MTP call belongs to the step before it) and rows is how many of the pass's
// rows chose that expert.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace glint {

struct ExpertTracePass {
  int64_t step = 0;
  int64_t layer = 0;                                 // hidden layer index; the MTP layer is num_hidden_layers
  std::vector<std::pair<int32_t, int32_t>> experts;  // (expert, rows), expert ascending
};

struct ExpertTrace {
  int64_t moe_layers = 0, experts = 0, top_k = 0;
  std::vector<ExpertTracePass> passes;
};

// Appends passes to a trace file (created with its header when new or empty). Not thread-safe (Forward is
// serialised).
class ExpertTraceWriter {
 public:
  static Result<std::unique_ptr<ExpertTraceWriter>> Open(const std::string& path, int64_t moe_layers, int64_t experts,
                                                         int64_t top_k, int64_t mtp_layer);
  ~ExpertTraceWriter();
  // One pass: `choices` [rows][k] expert ids of each row.
  void Record(int64_t step, int64_t layer, const std::vector<std::vector<int32_t>>& choices);

 private:
  ExpertTraceWriter() = default;
  std::FILE* file_ = nullptr;
  int64_t mtp_layer_ = 0;
};

// Parses a trace file's text; errors name the line.
Result<ExpertTrace> ParseExpertTrace(const std::string& text, int64_t mtp_layer_hint = 1 << 20);

// Eviction policies of a cache of `slots` experts, replayed over a trace pass by pass as DiskExpertCache serves
// them (every expert of a pass is requested at once; a hit is an expert already held).
enum class ExpertPolicy {
  kLru,                // least recently used (DiskExpertCache's policy)
  kLfuAged,            // least frequently used; every count halved every 8 × slots requests (ageing)
  kFrequencyWeighted,  // least rows-weighted use, decayed with a half-life of 4 steps' passes (LRFU-like)
};
std::string_view ExpertPolicyName(ExpertPolicy policy);         // "LRU", "LFU, aged", "frequency-weighted"
Result<ExpertPolicy> ParseExpertPolicy(std::string_view name);  // "lru", "lfu", "weighted" (--expert-policy)

// What a policy ranks a held expert by; one per cached expert (DiskExpertCache's slots, the replay's entries).
struct ExpertUse {
  uint64_t last_use = 0;  // pass clock of the last use
  double count = 0;       // uses, halved by ageing (LFU)
  double weight = 0;      // rows routed to it, decayed, as of weight_pass (frequency-weighted)
  uint64_t weight_pass = 0;
};

// The policies' bookkeeping, shared by the cache and the replay so that the replay predicts the cache.
class ExpertPolicyRanker {
 public:
  // `moe_layers` sets the frequency weight's half-life (4 steps' passes); `slots` the LFU ageing period.
  ExpertPolicyRanker(ExpertPolicy policy, int64_t moe_layers, int64_t slots);
  ExpertPolicy policy() const { return policy_; }
  // A use of the expert by `rows` rows at pass `pass`. True when every held count is now to be halved (ageing).
  bool Use(ExpertUse& use, uint64_t pass, int64_t rows);
  // Lower is evicted first.
  std::pair<double, uint64_t> Rank(const ExpertUse& use, uint64_t pass) const;

 private:
  double DecayedWeight(const ExpertUse& use, uint64_t pass) const;
  ExpertPolicy policy_;
  double half_life_;
  int64_t ageing_period_, requests_ = 0;
};

struct PolicyReplay {
  int64_t hits = 0, misses = 0;
  double hit_rate() const { return hits + misses > 0 ? static_cast<double>(hits) / (hits + misses) : 0; }
};
// `kept` (--expert-profile): (layer, expert) held for good from the start, never evicted, as
// DiskExpertCache::KeepHot keeps them (at most slots / 2 of them are used).
PolicyReplay ReplayExpertPolicy(const ExpertTrace& trace, int64_t slots, ExpertPolicy policy,
                                std::span<const std::pair<int64_t, int32_t>> kept = {});
// A profile's experts by routed rows, hottest first (ties: ascending layer, expert), layers as in the trace.
std::vector<std::pair<int64_t, int32_t>> HottestExperts(const ExpertTrace& profile);

}  // namespace glint
