// libFuzzer target: config.json parsing (io/config.h) refuses deep nesting and implausible sizes before any
// allocation sized by them: an accepted config has every dimension within the caps of LargestPlausible, so
// nothing downstream allocates per expert or per layer beyond them. Crashes (stack overflow on deep JSON),
// sanitizer reports, out-of-memory (-rss_limit_mb) and hangs are failures.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "io/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = glint::ParseModelConfig(text, "fuzz.json");
  if (!config.ok()) return 0;
  if (config->hidden_size > (int64_t{1} << 16) || config->num_hidden_layers > 1024) std::abort();
  if (config->n_routed_experts > 4096 || config->vocab_size > (int64_t{1} << 21)) std::abort();
  if (static_cast<int64_t>(config->attention_kinds.size()) != config->num_hidden_layers) std::abort();
  return 0;
}
