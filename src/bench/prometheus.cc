#include "bench/prometheus.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace glint::bench {
namespace {

bool IsNameChar(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

Result<double> ParseValue(std::string_view token) {
  if (token == "NaN") return std::nan("");
  if (token == "+Inf" || token == "Inf") return HUGE_VAL;
  if (token == "-Inf") return -HUGE_VAL;
  std::string copy(token);
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size()) return InvalidArgument("'", token, "' is not a number");
  return value;
}

// Parses `{a="x",b="y"}` starting at text[pos] == '{'; leaves pos after the '}'.
Status ParseLabels(std::string_view text, size_t& pos, std::map<std::string, std::string>& labels) {
  ++pos;  // '{'
  while (true) {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == ',')) ++pos;
    if (pos < text.size() && text[pos] == '}') {
      ++pos;
      return Status::Ok();
    }
    const size_t name_start = pos;
    while (pos < text.size() && IsNameChar(text[pos], pos == name_start)) ++pos;
    if (pos == name_start) return InvalidArgument("expected a label name at column ", pos + 1);
    std::string name(text.substr(name_start, pos - name_start));
    if (pos + 1 >= text.size() || text[pos] != '=' || text[pos + 1] != '"') {
      return InvalidArgument("expected =\" after label ", name);
    }
    pos += 2;
    std::string value;
    while (pos < text.size() && text[pos] != '"') {
      if (text[pos] == '\\' && pos + 1 < text.size()) {
        ++pos;
        value.push_back(text[pos] == 'n' ? '\n' : text[pos]);
      } else {
        value.push_back(text[pos]);
      }
      ++pos;
    }
    if (pos >= text.size()) return InvalidArgument("unterminated value of label ", name);
    ++pos;  // closing quote
    labels[name] = std::move(value);
  }
}

Result<PrometheusSample> ParseSampleLine(std::string_view line) {
  PrometheusSample sample;
  size_t pos = 0;
  while (pos < line.size() && IsNameChar(line[pos], pos == 0)) ++pos;
  if (pos == 0) return InvalidArgument("expected a metric name");
  sample.name = std::string(line.substr(0, pos));
  if (pos < line.size() && line[pos] == '{') GLINT_RETURN_IF_ERROR(ParseLabels(line, pos, sample.labels));
  while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
  size_t end = pos;
  while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
  if (end == pos) return InvalidArgument("metric ", sample.name, " has no value");
  GLINT_ASSIGN_OR_RETURN(sample.value, ParseValue(line.substr(pos, end - pos)));
  return sample;  // an optional timestamp may follow; it is not needed
}

}  // namespace

Result<std::vector<PrometheusSample>> ParsePrometheusText(std::string_view text) {
  std::vector<PrometheusSample> samples;
  size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    auto sample = ParseSampleLine(line);
    if (!sample.ok()) return sample.status().WithContext(StrCat("/metrics line ", line_number));
    samples.push_back(std::move(sample).value());
  }
  return samples;
}

SpecDecodeCounters ExtractSpecDecodeCounters(const std::vector<PrometheusSample>& samples) {
  SpecDecodeCounters counters;
  bool has_drafts = false, has_draft_tokens = false, has_accepted = false;
  for (const PrometheusSample& sample : samples) {
    if (sample.name == "vllm:spec_decode_num_drafts_total") {
      counters.drafts += sample.value;
      has_drafts = true;
    } else if (sample.name == "vllm:spec_decode_num_draft_tokens_total") {
      counters.draft_tokens += sample.value;
      has_draft_tokens = true;
    } else if (sample.name == "vllm:spec_decode_num_accepted_tokens_total") {
      counters.accepted_tokens += sample.value;
      has_accepted = true;
    } else if (sample.name == "vllm:spec_decode_num_accepted_tokens_per_pos_total") {
      auto position = sample.labels.find("position");
      if (position == sample.labels.end()) continue;
      char* end = nullptr;
      const long index = std::strtol(position->second.c_str(), &end, 10);
      if (end == position->second.c_str() || *end != '\0' || index < 0 || index > 1024) continue;
      counters.accepted_per_position[static_cast<int>(index)] += sample.value;
    }
  }
  counters.present = has_drafts && has_draft_tokens && has_accepted;
  return counters;
}

std::optional<SpecDecodeMetrics> SpecDecodeDelta(const SpecDecodeCounters& before, const SpecDecodeCounters& after) {
  if (!before.present || !after.present) return std::nullopt;
  SpecDecodeMetrics metrics;
  metrics.drafts = after.drafts - before.drafts;
  metrics.draft_tokens = after.draft_tokens - before.draft_tokens;
  metrics.accepted_tokens = after.accepted_tokens - before.accepted_tokens;
  if (metrics.drafts <= 0 || metrics.draft_tokens <= 0) return std::nullopt;
  metrics.acceptance_rate = metrics.accepted_tokens / metrics.draft_tokens;
  metrics.acceptance_length = 1.0 + metrics.accepted_tokens / metrics.drafts;
  int positions = 0;
  for (const auto& [position, count] : after.accepted_per_position) positions = std::max(positions, position + 1);
  for (int position = 0; position < positions; ++position) {
    auto now = after.accepted_per_position.find(position);
    auto then = before.accepted_per_position.find(position);
    const double accepted = (now == after.accepted_per_position.end() ? 0 : now->second) -
                            (then == before.accepted_per_position.end() ? 0 : then->second);
    metrics.per_position_acceptance_rate.push_back(accepted / metrics.drafts);
  }
  return metrics;
}

}  // namespace glint::bench
