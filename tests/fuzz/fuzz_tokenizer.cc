// libFuzzer target: the tokenizer.json loader and Encode/Decode. Input = tokenizer.json text, a NUL byte, then the
// text to encode. The loader must return an error or a tokenizer; a tokenizer must encode any bytes into ids that
// exist, and (when lossless) decode them back to the same bytes. Crashes, sanitizer reports or hangs are failures.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string_view json = input.substr(0, split);
  const std::string_view text = split == std::string_view::npos ? std::string_view() : input.substr(split + 1);
  auto tokenizer = glint::Tokenizer::FromJson(json, "fuzz.json");
  if (!tokenizer.ok()) return 0;
  for (bool parse_special : {false, true}) {
    auto ids = tokenizer->Encode(text, parse_special);
    if (!ids.ok()) continue;  // the regex engine gave up (a pathological pattern): an error, not a crash
    for (int32_t id : *ids) {
      if (!tokenizer->HasToken(id)) std::abort();
    }
    if (!parse_special && tokenizer->IsLossless() && tokenizer->Decode(*ids) != text) std::abort();
  }
  return 0;
}
