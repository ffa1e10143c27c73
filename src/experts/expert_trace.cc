#include "experts/expert_trace.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

namespace glint {

Result<std::unique_ptr<ExpertTraceWriter>> ExpertTraceWriter::Open(const std::string& path, int64_t moe_layers,
                                                                   int64_t experts, int64_t top_k, int64_t mtp_layer) {
  std::unique_ptr<ExpertTraceWriter> writer(new ExpertTraceWriter());
  writer->file_ = std::fopen(path.c_str(), "a");
  if (writer->file_ == nullptr) return IoError("--expert-trace: cannot open '", path, "': ", std::strerror(errno));
  writer->mtp_layer_ = mtp_layer;
  if (std::ftell(writer->file_) == 0) {
    std::fprintf(writer->file_, "# glint expert trace: moe_layers %lld experts %lld top_k %lld\n",
                 static_cast<long long>(moe_layers), static_cast<long long>(experts), static_cast<long long>(top_k));
  }
  return writer;
}

ExpertTraceWriter::~ExpertTraceWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void ExpertTraceWriter::Record(int64_t step, int64_t layer, const std::vector<std::vector<int32_t>>& choices) {
  std::map<int32_t, int32_t> rows;
  for (const std::vector<int32_t>& row : choices) {
    for (int32_t expert : row) ++rows[expert];
  }
  if (layer == mtp_layer_) {
    std::fprintf(file_, "%lld mtp", static_cast<long long>(step));
  } else {
    std::fprintf(file_, "%lld %lld", static_cast<long long>(step), static_cast<long long>(layer));
  }
  for (const auto& [expert, count] : rows) std::fprintf(file_, " %d:%d", expert, count);
  std::fputc('\n', file_);
}

Result<ExpertTrace> ParseExpertTrace(const std::string& text, int64_t mtp_layer_hint) {
  ExpertTrace trace;
  std::istringstream lines(text);
  std::string line;
  int64_t number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) continue;
    if (line[0] == '#') {
      long long m = 0, e = 0, k = 0;
      if (std::sscanf(line.c_str(), "# glint expert trace: moe_layers %lld experts %lld top_k %lld", &m, &e, &k) == 3) {
        trace.moe_layers = m, trace.experts = e, trace.top_k = k;
      }
      continue;
    }
    std::istringstream fields(line);
    ExpertTracePass pass;
    std::string layer, item;
    if (!(fields >> pass.step >> layer)) return InvalidArgument("expert trace line ", number, ": no step and layer");
    pass.layer = layer == "mtp" ? mtp_layer_hint : std::atoll(layer.c_str());
    while (fields >> item) {
      int expert = 0, rows = 0;
      if (std::sscanf(item.c_str(), "%d:%d", &expert, &rows) != 2 || expert < 0 || rows < 1) {
        return InvalidArgument("expert trace line ", number, ": '", item, "' is not expert:rows");
      }
      pass.experts.emplace_back(expert, rows);
    }
    trace.passes.push_back(std::move(pass));
  }
  if (trace.top_k <= 0) return InvalidArgument("expert trace: no '# glint expert trace:' header line");
  return trace;
}

std::string_view ExpertPolicyName(ExpertPolicy policy) {
  switch (policy) {
    case ExpertPolicy::kLru:
      return "LRU";
    case ExpertPolicy::kLfuAged:
      return "LFU, aged";
    case ExpertPolicy::kFrequencyWeighted:
      return "frequency-weighted";
  }
  return "?";
}

Result<ExpertPolicy> ParseExpertPolicy(std::string_view name) {
  if (name == "lru") return ExpertPolicy::kLru;
  if (name == "lfu") return ExpertPolicy::kLfuAged;
  if (name == "weighted") return ExpertPolicy::kFrequencyWeighted;
  return InvalidArgument("--expert-policy '", name, "' is not one of lru, lfu, weighted");
}

ExpertPolicyRanker::ExpertPolicyRanker(ExpertPolicy policy, int64_t moe_layers, int64_t slots)
    : policy_(policy),
      half_life_(4.0 * static_cast<double>(std::max<int64_t>(moe_layers, 1))),
      ageing_period_(8 * std::max<int64_t>(slots, 1)) {}

double ExpertPolicyRanker::DecayedWeight(const ExpertUse& use, uint64_t pass) const {
  return use.weight * std::exp2(-static_cast<double>(pass - use.weight_pass) / half_life_);
}

bool ExpertPolicyRanker::Use(ExpertUse& use, uint64_t pass, int64_t rows) {
  use.weight = DecayedWeight(use, pass) + static_cast<double>(rows);
  use.weight_pass = pass;
  use.last_use = pass;
  use.count += 1;
  return ++requests_ % ageing_period_ == 0;
}

std::pair<double, uint64_t> ExpertPolicyRanker::Rank(const ExpertUse& use, uint64_t pass) const {
  switch (policy_) {
    case ExpertPolicy::kLru:
      return {0.0, use.last_use};
    case ExpertPolicy::kLfuAged:
      return {use.count, use.last_use};
    case ExpertPolicy::kFrequencyWeighted:
      return {DecayedWeight(use, pass), use.last_use};
  }
  return {0.0, use.last_use};
}

std::vector<std::pair<int64_t, int32_t>> HottestExperts(const ExpertTrace& profile) {
  std::map<std::pair<int64_t, int32_t>, int64_t> rows;
  for (const ExpertTracePass& pass : profile.passes) {
    for (const auto& [expert, count] : pass.experts) rows[{pass.layer, expert}] += count;
  }
  std::vector<std::pair<int64_t, int32_t>> hot;
  hot.reserve(rows.size());
  for (const auto& [key, count] : rows) hot.push_back(key);
  std::stable_sort(hot.begin(), hot.end(), [&](const auto& a, const auto& b) { return rows[a] > rows[b]; });
  return hot;
}

PolicyReplay ReplayExpertPolicy(const ExpertTrace& trace, int64_t slots, ExpertPolicy policy,
                                std::span<const std::pair<int64_t, int32_t>> kept) {
  PolicyReplay replay;
  // Kept experts take slots for good: the policy replays the rest of the cache.
  std::set<std::pair<int64_t, int32_t>> forever(kept.begin(), kept.begin() + std::min<size_t>(kept.size(), slots / 2));
  slots -= static_cast<int64_t>(forever.size());
  std::map<std::pair<int64_t, int32_t>, ExpertUse> held;
  ExpertPolicyRanker ranker(policy, trace.moe_layers, slots);
  uint64_t clock = 0;
  for (const ExpertTracePass& pass : trace.passes) {
    ++clock;
    // As DiskExpertCache::Begin: the pass's experts already held are hits and pinned for the whole pass.
    std::set<std::pair<int64_t, int32_t>> pinned;
    for (const auto& [expert, rows] : pass.experts) {
      if (held.count({pass.layer, expert}) != 0) pinned.insert({pass.layer, expert});
    }
    for (const auto& [expert, rows] : pass.experts) {
      const std::pair<int64_t, int32_t> key{pass.layer, expert};
      if (forever.count(key) != 0) {
        ++replay.hits;
        continue;
      }
      auto it = held.find(key);
      if (it != held.end()) {
        ++replay.hits;
      } else {
        ++replay.misses;
        if (static_cast<int64_t>(held.size()) >= slots) {  // evict: outside this pass first (its experts are pinned)
          auto victim = held.end();
          for (int outside = 1; outside >= 0 && victim == held.end(); --outside) {
            for (auto h = held.begin(); h != held.end(); ++h) {
              if (outside == 1 && (pinned.count(h->first) != 0 || h->second.last_use == clock)) continue;
              if (victim == held.end() || ranker.Rank(h->second, clock) < ranker.Rank(victim->second, clock))
                victim = h;
            }
          }
          held.erase(victim);
        }
        it = held.emplace(key, ExpertUse{}).first;
      }
      if (ranker.Use(it->second, clock, rows)) {
        for (auto& [k, other] : held) other.count /= 2;
      }
    }
  }
  return replay;
}

}  // namespace glint
