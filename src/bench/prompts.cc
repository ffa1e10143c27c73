#include "bench/prompts.h"

#include <algorithm>
#include <cstdlib>
#include <set>

namespace glint::bench {
namespace {

constexpr const char* kTokenizeHint =
    " (glint bench builds prompts of exact token length with the server's POST /tokenize and /detokenize)";

}  // namespace

Result<std::vector<int32_t>> ServerTokenizer::Encode(const std::string& text, bool add_special_tokens) {
  nlohmann::json body = {{"prompt", text}, {"add_special_tokens", add_special_tokens}};
  if (!model_.empty()) body["model"] = model_;
  auto reply = http_.PostJson("/tokenize", body);
  if (!reply.ok()) return reply.status().WithContext(StrCat("tokenize", kTokenizeHint));
  auto tokens = reply->find("tokens");
  if (tokens == reply->end() || !tokens->is_array()) {
    return InvalidArgument("/tokenize replied without a \"tokens\" array: ", reply->dump().substr(0, 200));
  }
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  for (const auto& token : *tokens) {
    if (!token.is_number_integer() || token.get<int64_t>() < 0 || token.get<int64_t>() > INT32_MAX) {
      return InvalidArgument("/tokenize returned token ", token.dump(), ", expected a non-negative 32-bit integer");
    }
    ids.push_back(token.get<int32_t>());
  }
  return ids;
}

Result<std::string> ServerTokenizer::Decode(const std::vector<int32_t>& ids) {
  nlohmann::json body = {{"tokens", ids}};
  if (!model_.empty()) body["model"] = model_;
  auto reply = http_.PostJson("/detokenize", body);
  if (!reply.ok()) return reply.status().WithContext(StrCat("detokenize", kTokenizeHint));
  auto prompt = reply->find("prompt");
  if (prompt == reply->end() || !prompt->is_string()) {
    return InvalidArgument("/detokenize replied without a \"prompt\" string: ", reply->dump().substr(0, 200));
  }
  return prompt->get<std::string>();
}

const std::vector<std::string>& PromptWords() {
  // Common English words: plain ASCII, so every decoded prefix is valid text.
  static const std::vector<std::string> words = {
      "the",    "of",      "and",      "to",        "in",         "is",          "that",      "for",     "it",
      "as",     "was",     "with",     "be",        "by",         "on",          "not",       "he",      "this",
      "are",    "or",      "his",      "from",      "at",         "which",       "but",       "have",    "an",
      "had",    "they",    "you",      "were",      "their",      "one",         "all",       "we",      "can",
      "her",    "has",     "there",    "been",      "if",         "more",        "when",      "will",    "would",
      "who",    "so",      "no",       "time",      "people",     "year",        "way",       "day",     "man",
      "thing",  "woman",   "life",     "child",     "world",      "school",      "state",     "family",  "student",
      "group",  "country", "problem",  "hand",      "part",       "place",       "case",      "week",    "company",
      "system", "program", "question", "work",      "government", "number",      "night",     "point",   "home",
      "water",  "room",    "mother",   "area",      "money",      "story",       "fact",      "month",   "lot",
      "right",  "study",   "book",     "eye",       "job",        "word",        "business",  "issue",   "side",
      "kind",   "head",    "house",    "service",   "friend",     "father",      "power",     "hour",    "game",
      "line",   "end",     "member",   "law",       "car",        "city",        "community", "name",    "president",
      "team",   "minute",  "idea",     "kid",       "body",       "information", "back",      "parent",  "face",
      "others", "level",   "office",   "door",      "health",     "person",      "art",       "war",     "history",
      "party",  "result",  "change",   "morning",   "reason",     "research",    "girl",      "guy",     "moment",
      "air",    "teacher", "force",    "education", "river",      "mountain",    "garden",    "window",  "music",
      "paper",  "market",  "energy",   "signal",    "engine",     "memory",      "stream",    "token",   "matrix",
      "vector", "kernel",  "cache",    "server",    "client",     "network",     "model",     "layer",   "expert",
      "router", "batch",   "queue",    "thread",    "socket",     "buffer",      "record",    "quickly", "slowly",
      "bright", "green",   "silent",   "heavy",     "simple",     "careful",     "ancient",   "modern",  "open",
      "close",  "build",   "measure",  "carry",     "follow",     "answer",      "travel",    "gather",  "remember",
      "seven",  "twelve",  "hundred",  "thousand",  "north",      "south",       "winter",    "summer",  "yellow",
      "purple"};
  return words;
}

Status PromptFactory::EnsurePool() {
  if (!pool_.empty()) return Status::Ok();
  std::string text;
  for (const std::string& word : PromptWords()) {
    if (!text.empty()) text.push_back(' ');
    text += word;
  }
  ++tokenizer_calls_;
  GLINT_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer_.Encode(text, /*add_special_tokens=*/false));
  std::set<int32_t> distinct(ids.begin(), ids.end());
  if (distinct.empty()) return FailedPrecondition("the tokenizer encoded ", PromptWords().size(), " words to 0 tokens");
  pool_.assign(distinct.begin(), distinct.end());
  return Status::Ok();
}

Result<std::vector<int32_t>> PromptFactory::RandomTokenIds(int64_t count, Rng& rng) {
  if (count < 0) return InvalidArgument("token count ", count, " is negative");
  if (id_end_ > id_begin_) {
    std::vector<int32_t> ids(static_cast<size_t>(count));  // (count)
    for (int32_t& id : ids) id = static_cast<int32_t>(rng.UniformInt(id_begin_, id_end_ - 1));
    return ids;
  }
  GLINT_RETURN_IF_ERROR(EnsurePool());
  std::vector<int32_t> ids(static_cast<size_t>(count));  // (count)
  for (int32_t& id : ids) id = pool_[static_cast<size_t>(rng.UniformInt(0, static_cast<int64_t>(pool_.size()) - 1))];
  return ids;
}

Result<int64_t> PromptFactory::EncodedLength(const std::string& text, bool add_special_tokens) {
  ++tokenizer_calls_;
  GLINT_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer_.Encode(text, add_special_tokens));
  return static_cast<int64_t>(ids.size());
}

Result<int64_t> PromptFactory::SpecialTokenCount() {
  if (special_tokens_ < 0) {
    GLINT_ASSIGN_OR_RETURN(special_tokens_, EncodedLength("", /*add_special_tokens=*/true));
  }
  return special_tokens_;
}

Result<std::string> PromptFactory::ExactLengthText(int64_t count, bool count_special_tokens, Rng& rng) {
  constexpr int kSequences = 3;  // fresh random sequences to try
  constexpr int kSteps = 24;     // cut-point corrections per sequence (bisection needs ~log2 of the length)
  int64_t special = 0;
  if (count_special_tokens) {
    GLINT_ASSIGN_OR_RETURN(special, SpecialTokenCount());
  }
  const int64_t content = count - special;
  if (content < 1) {
    return InvalidArgument("a prompt of ", count, " tokens leaves no room for text after the ", special,
                           " special tokens the server adds to every prompt");
  }
  int64_t closest = -1;
  for (int sequence = 0; sequence < kSequences; ++sequence) {
    // Room to extend the cut when decoding merges tokens.
    GLINT_ASSIGN_OR_RETURN(std::vector<int32_t> ids, RandomTokenIds(content + content / 4 + 16, rng));
    // The encoded length f(cut) of the first `cut` ids grows with cut (not strictly: merges at the cut). Move the
    // cut by the length error, which lands at once when tokens round-trip about one-to-one; keep a bracket
    // lower < cut < upper of cuts known to be too short and too long, and bisect whenever the correction leaves
    // it, so a tokenizer that round-trips k ids to 2k tokens still converges instead of oscillating.
    int64_t lower = 0;
    int64_t upper = static_cast<int64_t>(ids.size()) + 1;
    int64_t cut = content;
    for (int step = 0; step < kSteps; ++step) {
      ++tokenizer_calls_;
      GLINT_ASSIGN_OR_RETURN(std::string text, tokenizer_.Decode(std::vector<int32_t>(ids.begin(), ids.begin() + cut)));
      GLINT_ASSIGN_OR_RETURN(int64_t length, EncodedLength(text, count_special_tokens));
      if (length == count) return text;
      if (closest < 0 || std::llabs(length - count) < std::llabs(closest - count)) closest = length;
      (length < count ? lower : upper) = cut;
      int64_t next = cut + (count - length);
      if (next <= lower || next >= upper) next = lower + (upper - lower) / 2;
      if (next <= lower || next >= upper) break;  // no cut left between a too-short and a too-long one
      cut = next;
    }
  }
  return FailedPrecondition("could not build a text prompt of exactly ", count, " tokens (closest: ", closest,
                            ") from ", kSequences, " random sequences: the server's tokenizer does not round-trip ",
                            "decoded text closely enough; use --prompt-format token-ids");
}

}  // namespace glint::bench
