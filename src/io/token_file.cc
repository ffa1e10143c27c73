#include "io/token_file.h"

#include <charconv>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/json_depth.h"

namespace glint {
namespace {

Status CheckId(int64_t id, int64_t vocab_size, const std::string& where) {
  if (id < 0 || id > INT32_MAX || (vocab_size > 0 && id >= vocab_size)) {
    return InvalidArgument(where, ": token id ", id, " is out of range; expected 0 ≤ id < ",
                           vocab_size > 0 ? vocab_size : int64_t{INT32_MAX} + 1);
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::vector<int32_t>>> ParseTokenSequences(std::string_view json_text, std::string_view source,
                                                              int64_t vocab_size) {
  const std::string context(source);
  if (!JsonDepthWithin(json_text, kMaxJsonFileDepth)) {
    return InvalidArgument(context, ": JSON nested more than ", kMaxJsonFileDepth, " levels deep");
  }
  nlohmann::json root = nlohmann::json::parse(json_text, nullptr, false);
  if (root.is_discarded()) return InvalidArgument(context, ": not valid JSON");
  if (!root.is_array() || root.empty()) {
    return InvalidArgument(context, ": expected a non-empty JSON list of token-id lists, e.g. [[1, 2, 3], [4, 5]]");
  }
  std::vector<std::vector<int32_t>> sequences;
  for (size_t i = 0; i < root.size(); ++i) {
    const auto& sequence = root[i];
    if (!sequence.is_array() || sequence.empty()) {
      return InvalidArgument(context, ": sequence ", i, " is not a non-empty list of token ids");
    }
    std::vector<int32_t> ids;
    for (size_t j = 0; j < sequence.size(); ++j) {
      if (!sequence[j].is_number_integer()) {
        return InvalidArgument(context, ": sequence ", i, " entry ", j, " is ", sequence[j].dump(),
                               "; expected an integer token id");
      }
      const int64_t id = sequence[j].get<int64_t>();
      GLINT_RETURN_IF_ERROR(CheckId(id, vocab_size, StrCat(context, ": sequence ", i, " entry ", j)));
      ids.push_back(static_cast<int32_t>(id));
    }
    sequences.push_back(std::move(ids));
  }
  return sequences;
}

Result<std::vector<std::vector<int32_t>>> ReadTokenSequences(const std::string& path, int64_t vocab_size) {
  GLINT_ASSIGN_OR_RETURN(std::string text, ReadFile(path, size_t{256} << 20));
  return ParseTokenSequences(text, path, vocab_size);
}

Result<std::vector<int32_t>> ParseTokenList(std::string_view text, int64_t vocab_size) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ',' || text[i] == ' ' || text[i] == '\t' || text[i] == '\n') {
      ++i;
      continue;
    }
    int64_t id = 0;
    auto [end, error] = std::from_chars(text.data() + i, text.data() + text.size(), id);
    if (error != std::errc() || (end < text.data() + text.size() && *end != ',' && *end != ' ')) {
      return InvalidArgument("token list '", text, "': expected integers separated by commas or spaces");
    }
    GLINT_RETURN_IF_ERROR(CheckId(id, vocab_size, StrCat("token list entry ", ids.size())));
    ids.push_back(static_cast<int32_t>(id));
    i = static_cast<size_t>(end - text.data());
  }
  if (ids.empty()) return InvalidArgument("the token list is empty; expected at least one token id");
  return ids;
}

}  // namespace glint
