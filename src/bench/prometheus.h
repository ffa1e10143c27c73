// Speculative-decoding acceptance from a server's Prometheus /metrics, as `vllm bench serve` reports it: the
// counters are read before and after a concurrency level, and the rates come from their differences.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace glint::bench {

struct PrometheusSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses the Prometheus text exposition format (version 0.0.4): `name{label="value",...} value [timestamp]` lines,
// `#` comments, label values with \" \\ \n escapes, values such as NaN and +Inf. Errors give the line number.
Result<std::vector<PrometheusSample>> ParsePrometheusText(std::string_view text);

// The counters vLLM exports and glint exports under the same names (serving.md §1):
//   vllm:spec_decode_num_drafts_total, vllm:spec_decode_num_draft_tokens_total,
//   vllm:spec_decode_num_accepted_tokens_total, vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}.
// Series of one name with different labels (engines, models) are summed.
struct SpecDecodeCounters {
  bool present = false;  // at least the drafts, draft-token and accepted-token counters were exported
  double drafts = 0;
  double draft_tokens = 0;
  double accepted_tokens = 0;
  std::map<int, double> accepted_per_position;  // position → accepted tokens at that draft position
};

SpecDecodeCounters ExtractSpecDecodeCounters(const std::vector<PrometheusSample>& samples);

struct SpecDecodeMetrics {
  double drafts = 0;  // deltas over the level
  double draft_tokens = 0;
  double accepted_tokens = 0;
  double acceptance_rate = 0;                        // accepted / draft tokens
  double acceptance_length = 0;                      // 1 + accepted / drafts: tokens emitted per verification step
  std::vector<double> per_position_acceptance_rate;  // accepted at position i / drafts
};

// Rates from the difference of two scrapes. Empty when either scrape lacks the counters or no draft was made
// between them (a rate of 0/0 is not a measurement).
std::optional<SpecDecodeMetrics> SpecDecodeDelta(const SpecDecodeCounters& before, const SpecDecodeCounters& after);

}  // namespace glint::bench
