#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/utf8.h"

namespace glint {

struct SplitRegex::Compiled {
  std::string pattern;
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

std::string Pcre2ErrorText(int error_code) {
  PCRE2_UCHAR buffer[256];
  int length = pcre2_get_error_message(error_code, buffer, sizeof(buffer));
  if (length < 0) return StrCat("PCRE2 error ", error_code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(length));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

}  // namespace

Result<SplitRegex> SplitRegex::Compile(std::string_view pattern, bool literal) {
  auto compiled = std::make_shared<Compiled>();
  compiled->pattern = std::string(pattern);
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  if (literal) options |= PCRE2_LITERAL;
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error_code,
                                 &error_offset, nullptr);
  if (compiled->code == nullptr) {
    return InvalidArgument("cannot compile the pre-tokenizer regex at offset ", error_offset, ": ",
                           Pcre2ErrorText(error_code), " (pattern: ", pattern, ")");
  }
  // JIT is an optimisation with identical results; a PCRE2 built without JIT (or a system that forbids
  // executable memory) returns an error here and matching uses the interpreter.
  compiled->jit = pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE) == 0;
  SplitRegex regex;
  regex.compiled_ = std::move(compiled);
  return regex;
}

const std::string& SplitRegex::pattern() const { return compiled_->pattern; }
bool SplitRegex::jit() const { return compiled_->jit; }

Status SplitRegex::Split(std::string_view text, SplitBehavior behavior, std::vector<std::string_view>& pieces) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr));
  if (match == nullptr) return ResourceExhausted("cannot allocate PCRE2 match data");
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_begin = 0;  // start of the text not yet assigned to a piece
  size_t search_from = 0;
  while (search_from < text.size()) {
    // MATCH_INVALID_UTF makes PCRE2 skip its UTF check (ill-formed bytes simply never match).
    int result = pcre2_match(compiled_->code, subject, text.size(), search_from, 0, match.get(), nullptr);
    if (result == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The JIT's fixed machine stack ran out on a long backtracking match; the interpreter keeps its
      // backtracking state on the heap and gives the same answer.
      result = pcre2_match(compiled_->code, subject, text.size(), search_from, PCRE2_NO_JIT, match.get(), nullptr);
    }
    if (result == PCRE2_ERROR_NOMATCH) break;
    if (result < 0) {
      return ResourceExhausted("the pre-tokenizer regex failed at byte ", search_from, " of a ", text.size(),
                               "-byte text: ", Pcre2ErrorText(result), " (pattern: ", compiled_->pattern, ")");
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end <= begin) {
      // An empty match splits nothing; step over one character (or one ill-formed byte) and search on.
      Utf8Scan scan = ScanUtf8(text.substr(begin));
      search_from = begin + (scan.kind == Utf8Scan::kComplete ? scan.length : 1);
      continue;
    }
    if (begin > gap_begin) pieces.push_back(text.substr(gap_begin, begin - gap_begin));
    if (behavior == SplitBehavior::kIsolated) pieces.push_back(text.substr(begin, end - begin));
    gap_begin = end;
    search_from = end;
  }
  if (gap_begin < text.size()) pieces.push_back(text.substr(gap_begin));
  return Status::Ok();
}

}  // namespace glint
