#include "plan/assumptions.h"

#include <charconv>
#include <cmath>

namespace glint::plan {

Assumptions Assumptions::Defaults() {
  Assumptions a;
  auto add = [&](std::string name, double value, std::string unit, std::string meaning, double min, double max,
                 bool integer = false) {
    a.list_.push_back({std::move(name), value, value, std::move(unit), std::move(meaning), min, max, integer});
  };
  // Memory.
  add("memory_threshold", 0.80, "fraction",
      "usage of a chip's memory above this is flagged; cache room = threshold x capacity - weights (the rest is "
      "runtime, activations, fragmentation)",
      0.05, 1.0);
  // Quantisation metadata (design.md §4: int8 with a scale per output row and K-group).
  add("int8_group_size", 128, "elements", "input (K) elements sharing one int8 scale, per output row", 1, 1 << 20,
      true);
  add("int4_group_size", 32, "elements", "input (K) elements sharing one int4 scale, per output row", 1, 1 << 20, true);
  add("quant_scale_bytes", 2, "bytes", "bytes per int8/int4 group scale (bf16/fp16 scale)", 1, 8, true);
  add("int4_zero_point_bytes", 0, "bytes", "bytes per int4 group zero point (0: symmetric int4)", 0, 8, true);
  // Per-sequence caches (design.md §4, model-glm53.md §16).
  add("cache_latent_bytes", 2, "bytes", "bytes per MLA latent value in the cache (2 = bf16, 1 = fp8 + group scales)", 1,
      4, true);
  add("cache_fp8_group_size", 128, "values", "latent values sharing one scale when cache_latent_bytes = 1", 1, 1 << 16,
      true);
  add("cache_fp8_scale_bytes", 4, "bytes", "bytes per fp8 latent-cache scale (f32)", 1, 8, true);
  add("cache_index_key_bytes", 2, "bytes", "bytes per pooled indexer key value (bf16, as the reference)", 1, 4, true);
  add("cache_index_key_scale_bytes", 0, "bytes", "bytes of scale per pooled indexer key (4 = glint's fp8/int8 keys)", 0,
      8, true);
  add("kda_state_bytes", 4, "bytes", "bytes per KDA recurrent-state value (4 = fp32 as the reference, 2 = bf16)", 1, 4,
      true);
  add("conv_state_bytes", 2, "bytes", "bytes per KDA short-conv window value (bf16)", 1, 4, true);
  add("cache_mtp_layer", 1, "0/1", "1: the MTP layer's latent and indexer caches are kept (speculative decoding on)", 0,
      1, true);
  // Roofline.
  add("bandwidth_efficiency", 1.0, "fraction",
      "fraction of peak memory bandwidth reached by weight and cache reads (1 = roofline; kernels reach 0.7-0.9)", 0.01,
      1.0);
  add("mfu", 0.40, "fraction", "fraction of the peak matmul rate of the dtype used (prefill, compute-bound decode)",
      0.01, 1.0);
  add("collective_latency_us", 10, "µs", "fixed cost of one collective (launch + synchronisation + hops)", 0, 1e6);
  add("interconnect_direction_fraction", 0.5, "fraction",
      "share of a chip's quoted interconnect bandwidth (both directions summed) its outgoing bytes can use", 0.01, 1.0);
  add("collective_width_multiple", 1, "x hidden",
      "width of an all-reduce payload per token in units of hidden: 1 = the sublayer output (mHC streams replicated "
      "and mixed locally); hc_mult = an implementation that reduces the widened residual",
      1, 64);
  add("activation_bytes", 2, "bytes", "bytes per activation value crossing chips (bf16)", 1, 4, true);
  return a;
}

Assumption* Assumptions::Find(std::string_view name) {
  for (Assumption& a : list_) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

const Assumption* Assumptions::Find(std::string_view name) const {
  for (const Assumption& a : list_) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

double Assumptions::Get(std::string_view name) const {
  const Assumption* a = Find(name);
  GLINT_CHECK(a != nullptr) << "unknown assumption '" << name << "'";
  return a->value;
}

Status Assumptions::Set(std::string_view name, double value) {
  Assumption* a = Find(name);
  if (a == nullptr) {
    std::string names;
    for (const Assumption& known : list_) names += (names.empty() ? "" : ", ") + known.name;
    return InvalidArgument("unknown assumption '", name, "'; known: ", names);
  }
  if (!std::isfinite(value) || value < a->min || value > a->max) {
    return InvalidArgument("assumption ", name, " = ", value, " is out of range; expected ", a->min, " to ", a->max,
                           " (", a->unit, ")");
  }
  if (a->integer && value != std::floor(value)) {
    return InvalidArgument("assumption ", name, " = ", value, " must be a whole number of ", a->unit);
  }
  a->value = value;
  return Status::Ok();
}

Status Assumptions::Override(std::string_view text) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return InvalidArgument("--assume '", text, "': expected NAME=VALUE, e.g. mfu=0.5");
  }
  const std::string_view name = text.substr(0, eq);
  const std::string value_text(text.substr(eq + 1));
  double value = 0;
  const auto [end, error] = std::from_chars(value_text.data(), value_text.data() + value_text.size(), value);
  if (error != std::errc() || end != value_text.data() + value_text.size() || value_text.empty()) {
    return InvalidArgument("--assume '", text, "': '", value_text, "' is not a number");
  }
  return Set(name, value);
}

}  // namespace glint::plan
