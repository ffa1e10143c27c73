#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/json_depth.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace glint {

using Json = nlohmann::json;

namespace {

// A JSON value or string quoted for an error message (never throws on odd bytes).
std::string QuoteJson(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}
std::string Quote(std::string_view text) { return QuoteJson(Json(std::string(text))); }

std::string_view TypeName(const Json& value) {
  if (value.is_null()) return "null";
  if (value.is_boolean()) return "a boolean";
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "a list";
  return "an object";
}

// Optional boolean field: absent or null gives `fallback`.
Result<bool> OptionalBool(const Json& object, const char* key, bool fallback, std::string_view where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return InvalidArgument(where, ".", key, " is ", TypeName(*it), "; expected true or false");
  return it->get<bool>();
}

}  // namespace

// Builds a Tokenizer from parsed JSON, checking every field it reads. Errors say "<source>: <json path>: ...".
class TokenizerLoader {
 public:
  TokenizerLoader(Tokenizer& out, std::string_view source) : out_(out), source_(source) {}

  Status Load(const Json& root) {
    if (!root.is_object()) return Error("the file is ", TypeName(root), "; expected a JSON object");
    GLINT_RETURN_IF_ERROR(CheckNormalizer(root));
    GLINT_RETURN_IF_ERROR(CheckDecoder(root));
    auto model = root.find("model");
    if (model == root.end() || !model->is_object()) return Error("'model' is missing or not an object");
    GLINT_RETURN_IF_ERROR(LoadVocab(*model));
    GLINT_RETURN_IF_ERROR(LoadAddedTokens(root));
    GLINT_RETURN_IF_ERROR(BuildIdTables());
    GLINT_RETURN_IF_ERROR(LoadMerges(*model));
    GLINT_RETURN_IF_ERROR(LoadPreTokenizer(root));
    return Status::Ok();
  }

 private:
  template <typename... Parts>
  Status Error(const Parts&... parts) const {
    return InvalidArgument(source_, ": ", parts...);
  }
  template <typename... Parts>
  Status Unsupported(const Parts&... parts) const {
    return Unimplemented(source_, ": ", parts...);
  }

  Status CheckNormalizer(const Json& root) const {
    auto it = root.find("normalizer");
    if (it == root.end() || it->is_null()) return Status::Ok();
    // An empty Sequence normalises nothing.
    if (it->is_object() && it->value("type", "") == "Sequence" && it->contains("normalizers") &&
        (*it)["normalizers"].is_array() && (*it)["normalizers"].empty()) {
      return Status::Ok();
    }
    return Unsupported("normalizer ", QuoteJson(*it), " is not implemented; glint supports byte-level BPE files ",
                       "without a normalizer (as GLM's)");
  }

  Status CheckDecoder(const Json& root) const {
    auto it = root.find("decoder");
    if (it == root.end() || it->is_null()) return Status::Ok();
    if (it->is_object() && it->value("type", "") == "ByteLevel") return Status::Ok();
    return Unsupported("decoder ", QuoteJson(*it), " is not implemented; expected a ByteLevel decoder or none");
  }

  Status LoadVocab(const Json& model) {
    auto type = model.find("type");
    if (type == model.end() || !type->is_string()) {
      return Error("model.type is missing; expected \"BPE\"");
    }
    if (*type != "BPE") {
      return Unsupported("model.type is ", QuoteJson(*type), "; glint implements only \"BPE\" (byte-level)");
    }
    if (auto dropout = model.find("dropout"); dropout != model.end() && !dropout->is_null()) {
      if (!dropout->is_number() || dropout->get<double>() != 0.0) {
        return Unsupported("model.dropout is ", QuoteJson(*dropout),
                           "; BPE dropout is not implemented (expected null)");
      }
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      auto it = model.find(key);
      if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
        return Unsupported("model.", key, " is ", QuoteJson(*it), "; not implemented (expected null)");
      }
    }
    GLINT_ASSIGN_OR_RETURN(bool byte_fallback, OptionalBool(model, "byte_fallback", false, "model"));
    if (byte_fallback) {
      return Unsupported("model.byte_fallback is true; that is SentencePiece-style BPE, not byte-level");
    }
    GLINT_ASSIGN_OR_RETURN(out_.ignore_merges_, OptionalBool(model, "ignore_merges", false, "model"));

    auto vocab = model.find("vocab");
    if (vocab == model.end() || !vocab->is_object()) {
      return Error("model.vocab is missing or not an object; expected {token: id}");
    }
    vocab_.reserve(vocab->size());
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
      const std::string& spelling = it.key();
      const Json& id = it.value();
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokenizerVocabSize) {
        return Error("model.vocab[", Quote(spelling), "] is ", QuoteJson(id), "; expected an id in [0, ",
                     kMaxTokenizerVocabSize, ")");
      }
      if (spelling.empty()) return Error("model.vocab has an empty token (id ", id.get<int64_t>(), ")");
      // Spellings outside the byte-level alphabet cannot come out of a merge; they keep their UTF-8 bytes (what
      // HF's ByteLevel decoder prints for them).
      std::string bytes = ByteLevelDecode(spelling).value_or(spelling);
      vocab_.push_back({static_cast<int32_t>(id.get<int64_t>()), std::move(bytes), spelling});
    }
    if (vocab_.empty()) return Error("model.vocab is empty");
    return Status::Ok();
  }

  Status LoadAddedTokens(const Json& root) {
    auto list = root.find("added_tokens");
    if (list == root.end() || list->is_null()) return Status::Ok();
    if (!list->is_array()) return Error("added_tokens is ", TypeName(*list), "; expected a list");
    for (size_t i = 0; i < list->size(); ++i) {
      const Json& entry = (*list)[i];
      const std::string where = StrCat("added_tokens[", i, "]");
      if (!entry.is_object()) return Error(where, " is ", TypeName(entry), "; expected an object");
      auto id = entry.find("id");
      auto content = entry.find("content");
      if (id == entry.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
          id->get<int64_t>() >= kMaxTokenizerVocabSize) {
        return Error(where, ".id is ", id == entry.end() ? "missing" : QuoteJson(*id), "; expected an id in [0, ",
                     kMaxTokenizerVocabSize, ")");
      }
      if (content == entry.end() || !content->is_string() || content->get<std::string>().empty()) {
        return Error(where, ".content is ", content == entry.end() ? "missing" : QuoteJson(*content),
                     "; expected a non-empty string");
      }
      for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
        GLINT_ASSIGN_OR_RETURN(bool set, OptionalBool(entry, flag, false, where));
        if (set) {
          return Unsupported(where, " (", QuoteJson(*content), ") has ", flag, ": true, which is not implemented");
        }
      }
      GLINT_ASSIGN_OR_RETURN(bool special, OptionalBool(entry, "special", false, where));
      out_.added_tokens_.push_back({static_cast<int32_t>(id->get<int64_t>()), content->get<std::string>(), special});
    }
    return Status::Ok();
  }

  Status BuildIdTables() {
    int64_t size = 0;
    for (const auto& token : vocab_) size = std::max<int64_t>(size, token.id + 1);
    for (const auto& token : out_.added_tokens_) size = std::max<int64_t>(size, token.id + 1);
    out_.id_bytes_.assign(size, std::string());
    out_.id_flags_.assign(size, 0);
    std::vector<const std::string*> spelling_of(size, nullptr);  // [size] for messages about duplicates
    for (auto& token : vocab_) {
      if (out_.id_flags_[token.id] & Tokenizer::kHasToken) {
        return Error("model.vocab maps both ", Quote(*spelling_of[token.id]), " and ", Quote(token.spelling), " to id ",
                     token.id, "; ids must be unique");
      }
      out_.id_flags_[token.id] = Tokenizer::kHasToken;
      spelling_of[token.id] = &token.spelling;
      // Two spellings cannot decode to the same bytes: the byte-level map is a bijection, and a spelling outside
      // the alphabet keeps its own UTF-8, which could collide with an in-alphabet one only by accident.
      if (!out_.vocab_ids_.emplace(token.bytes, token.id).second) {
        return Error("model.vocab entries ", Quote(*spelling_of[out_.vocab_ids_[token.bytes]]), " and ",
                     Quote(token.spelling), " stand for the same bytes");
      }
      out_.id_bytes_[token.id] = token.bytes;
    }
    for (size_t i = 0; i < out_.added_tokens_.size(); ++i) {
      const AddedToken& token = out_.added_tokens_[i];
      uint8_t& flags = out_.id_flags_[token.id];
      if (flags & Tokenizer::kAdded) {
        return Error("added_tokens[", i, "] ", Quote(token.content), " reuses id ", token.id, " of ",
                     Quote(out_.id_bytes_[token.id]));
      }
      // An added token may repeat a vocabulary entry (GPT-2 keeps "<|endoftext|>" in both) but not replace it.
      if ((flags & Tokenizer::kHasToken) && out_.id_bytes_[token.id] != token.content) {
        return Error("added_tokens[", i, "] ", Quote(token.content), " has id ", token.id,
                     ", which model.vocab gives to ", Quote(*spelling_of[token.id]));
      }
      if (!out_.added_ids_.emplace(token.content, token.id).second) {
        return Error("added_tokens[", i, "] ", Quote(token.content), " appears twice (ids ",
                     out_.added_ids_[token.content], " and ", token.id, ")");
      }
      flags |= Tokenizer::kHasToken | Tokenizer::kAdded | (token.special ? Tokenizer::kSpecial : 0);
      out_.id_bytes_[token.id] = token.content;
      out_.added_by_first_byte_[static_cast<uint8_t>(token.content[0])].push_back(static_cast<int32_t>(i));
    }
    for (const std::string& bytes : out_.id_bytes_)
      out_.max_token_bytes_ = std::max(out_.max_token_bytes_, bytes.size());
    for (auto& bucket : out_.added_by_first_byte_) {
      std::stable_sort(bucket.begin(), bucket.end(), [&](int32_t a, int32_t b) {
        return out_.added_tokens_[a].content.size() > out_.added_tokens_[b].content.size();
      });
    }
    return Status::Ok();
  }

  Status LoadMerges(const Json& model) {
    // Byte-level BPE starts from one token per byte: all 256 must exist, so every byte string is encodable.
    std::array<int32_t, 256> byte_tokens;
    for (int byte = 0; byte < 256; ++byte) {
      auto it = out_.vocab_ids_.find(std::string(1, static_cast<char>(byte)));
      if (it == out_.vocab_ids_.end()) {
        return Error("model.vocab lacks the token for byte 0x", "0123456789abcdef"[byte >> 4],
                     "0123456789abcdef"[byte & 15], " (", Quote(ByteLevelCharOf(static_cast<uint8_t>(byte))),
                     "); a byte-level BPE vocabulary has all 256 byte tokens");
      }
      byte_tokens[byte] = it->second;
    }
    out_.merger_ = BpeMerger(byte_tokens);

    auto merges = model.find("merges");
    if (merges == model.end() || merges->is_null()) return Status::Ok();  // a vocabulary of bytes only
    if (!merges->is_array()) return Error("model.merges is ", TypeName(*merges), "; expected a list");
    if (merges->size() >= static_cast<size_t>(kMaxTokenizerVocabSize)) {
      return Error("model.merges has ", merges->size(), " entries; at most ", kMaxTokenizerVocabSize, " are accepted");
    }
    std::unordered_map<std::string_view, int32_t> id_of_spelling;  // the file's spellings → id
    id_of_spelling.reserve(vocab_.size());
    for (const auto& token : vocab_) id_of_spelling.emplace(token.spelling, token.id);
    for (size_t rank = 0; rank < merges->size(); ++rank) {
      const Json& entry = (*merges)[rank];
      std::string left, right;
      if (entry.is_string()) {
        // Legacy form "left right": byte-level spellings never contain a space (0x20 is spelled 'Ġ').
        const std::string& text = entry.get_ref<const std::string&>();
        size_t space = text.find(' ');
        if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
          return Error("model.merges[", rank, "] is ", QuoteJson(entry), "; expected \"left right\" with one space");
        }
        left = text.substr(0, space);
        right = text.substr(space + 1);
      } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
        left = entry[0].get<std::string>();
        right = entry[1].get<std::string>();
      } else {
        return Error("model.merges[", rank, "] is ", QuoteJson(entry), "; expected \"left right\" or [left, right]");
      }
      auto left_id = id_of_spelling.find(left);
      auto right_id = id_of_spelling.find(right);
      for (auto [found, name] : {std::pair{left_id, &left}, std::pair{right_id, &right}}) {
        if (found == id_of_spelling.end()) {
          return Error("model.merges[", rank, "] ", QuoteJson(entry), " refers to ", Quote(*name),
                       ", which is not in model.vocab");
        }
      }
      auto merged = id_of_spelling.find(left + right);
      if (merged == id_of_spelling.end()) {
        return Error("model.merges[", rank, "] ", QuoteJson(entry), " makes ", Quote(left + right),
                     ", which is not in model.vocab");
      }
      // Spellings outside the byte-level alphabet keep their UTF-8 (see LoadVocab), so a merge mixing them with
      // alphabet spellings could make a token whose bytes differ from its parts'; refuse, so Decode(Encode(x)) == x.
      if (out_.id_bytes_[merged->second] != out_.id_bytes_[left_id->second] + out_.id_bytes_[right_id->second]) {
        return Error("model.merges[", rank, "] ", QuoteJson(entry), ": the bytes of ", Quote(left + right),
                     " are not the bytes of its two parts (a spelling outside the byte-level alphabet?)");
      }
      if (!out_.merger_.AddMerge(left_id->second, right_id->second, {static_cast<int32_t>(rank), merged->second})) {
        return Error("model.merges[", rank, "] ", QuoteJson(entry), " repeats an earlier merge");
      }
    }
    return Status::Ok();
  }

  // Flattens the pre_tokenizer (a step or a Sequence of steps) into regex splits. The two layouts met in practice:
  // - GLM (and Llama 3, Qwen 2): Sequence[Split(Regex = the model's own pattern, Isolated), ByteLevel(use_regex
  //   false)]: the Split does all the splitting and ByteLevel only maps bytes to its alphabet.
  // - GPT-2 style: ByteLevel(use_regex true) alone: HF splits with GPT-2's regex (kGpt2PreTokenizerRegex).
  //   glint's GLM regex (kGlm4PreTokenizerRegex) is used only when a file writes it in a Split, which is what
  //   GLM's tokenizer.json and glint's own trainer do; a ByteLevel-only file means GPT-2 splitting in HF, and
  //   glint follows the file rather than guess.
  Status LoadPreTokenizer(const Json& root) {
    auto it = root.find("pre_tokenizer");
    if (it == root.end() || it->is_null()) {
      return Unsupported("pre_tokenizer is missing; glint implements byte-level BPE, which needs a ByteLevel step");
    }
    std::vector<const Json*> steps;
    GLINT_RETURN_IF_ERROR(Flatten(*it, "pre_tokenizer", 0, steps));
    bool byte_level_seen = false;
    for (size_t i = 0; i < steps.size(); ++i) {
      const Json& step = *steps[i];
      const std::string type = step.value("type", "");
      const std::string where = StrCat("pre_tokenizer step ", i, " (", type, ")");
      if (byte_level_seen) {
        return Unsupported(where, " comes after ByteLevel; glint needs ByteLevel to be the last step");
      }
      if (type == "ByteLevel") {
        byte_level_seen = true;
        GLINT_ASSIGN_OR_RETURN(bool add_prefix_space, OptionalBool(step, "add_prefix_space", false, where));
        if (add_prefix_space) return Unsupported(where, " has add_prefix_space: true, which is not implemented");
        GLINT_ASSIGN_OR_RETURN(bool use_regex, OptionalBool(step, "use_regex", true, where));
        if (use_regex) {
          GLINT_ASSIGN_OR_RETURN(SplitRegex regex, SplitRegex::Compile(kGpt2PreTokenizerRegex));
          out_.pre_tokenizer_.push_back({std::move(regex), SplitBehavior::kIsolated});
        }
      } else if (type == "Split") {
        GLINT_RETURN_IF_ERROR(AddSplit(step, where));
      } else {
        return Unsupported(where, " is not implemented; expected Split, ByteLevel or a Sequence of them");
      }
    }
    if (!byte_level_seen) {
      return Unsupported("pre_tokenizer has no ByteLevel step; glint implements byte-level BPE only");
    }
    return Status::Ok();
  }

  Status Flatten(const Json& node, const std::string& where, int depth, std::vector<const Json*>& steps) const {
    if (depth > 8) return Error(where, " nests Sequences more than 8 deep");
    if (!node.is_object() || !node.contains("type") || !node["type"].is_string()) {
      return Error(where, " is ", QuoteJson(node), "; expected an object with a \"type\"");
    }
    if (node["type"] != "Sequence") {
      steps.push_back(&node);
      return Status::Ok();
    }
    auto list = node.find("pretokenizers");
    if (list == node.end() || !list->is_array()) return Error(where, ".pretokenizers is missing or not a list");
    for (size_t i = 0; i < list->size(); ++i) {
      GLINT_RETURN_IF_ERROR(Flatten((*list)[i], StrCat(where, ".pretokenizers[", i, "]"), depth + 1, steps));
    }
    return Status::Ok();
  }

  Status AddSplit(const Json& step, const std::string& where) {
    auto pattern = step.find("pattern");
    if (pattern == step.end() || !pattern->is_object() || pattern->size() != 1) {
      return Error(where, ".pattern is missing; expected {\"Regex\": ...} or {\"String\": ...}");
    }
    const bool literal = pattern->contains("String");
    const Json& text = literal ? (*pattern)["String"] : pattern->value("Regex", Json());
    if (!text.is_string()) return Error(where, ".pattern is ", QuoteJson(*pattern), "; expected {\"Regex\": string}");
    GLINT_ASSIGN_OR_RETURN(bool invert, OptionalBool(step, "invert", false, where));
    if (invert) return Unsupported(where, " has invert: true, which is not implemented");
    const std::string behavior = step.value("behavior", "");
    SplitBehavior split_behavior;
    if (behavior == "Isolated") {
      split_behavior = SplitBehavior::kIsolated;
    } else if (behavior == "Removed") {
      split_behavior = SplitBehavior::kRemoved;
    } else {
      return Unsupported(where, " has behavior ", QuoteJson(step.value("behavior", Json())),
                         "; implemented: \"Isolated\", \"Removed\"");
    }
    auto regex = SplitRegex::Compile(text.get<std::string>(), literal);
    if (!regex.ok()) return regex.status().WithContext(StrCat(source_, ": ", where));
    if (split_behavior == SplitBehavior::kRemoved) out_.lossless_ = false;
    out_.pre_tokenizer_.push_back({std::move(regex).value(), split_behavior});
    return Status::Ok();
  }

  struct VocabEntry {
    int32_t id;
    std::string bytes;     // raw bytes
    std::string spelling;  // as written in the file
  };

  Tokenizer& out_;
  std::string source_;
  std::vector<VocabEntry> vocab_;
};

Result<Tokenizer> Tokenizer::Load(const std::string& dir_or_file) {
  const std::string path = IsDirectory(dir_or_file) ? JoinPath(dir_or_file, "tokenizer.json") : dir_or_file;
  GLINT_ASSIGN_OR_RETURN(std::string text, ReadFile(path, size_t{512} << 20));
  return FromJson(text, path);
}

Result<Tokenizer> Tokenizer::FromJson(std::string_view json_text, std::string_view source) {
  Json root;
  if (!JsonDepthWithin(json_text, kMaxJsonFileDepth)) {
    return InvalidArgument(source, ": JSON nested more than ", kMaxJsonFileDepth, " levels deep");
  }
  try {
    root = Json::parse(json_text);
  } catch (const Json::exception& error) {
    return InvalidArgument(source, ": not valid JSON: ", error.what());
  }
  Tokenizer tokenizer;
  tokenizer.source_ = std::string(source);
  try {
    GLINT_RETURN_IF_ERROR(TokenizerLoader(tokenizer, source).Load(root));
  } catch (const Json::exception& error) {
    // The loader checks types before reading; this is a safety net that still names the file.
    return InvalidArgument(source, ": unexpected structure: ", error.what());
  }
  return tokenizer;
}

std::vector<std::string> Tokenizer::pre_tokenizer_patterns() const {
  std::vector<std::string> patterns;
  for (const auto& step : pre_tokenizer_) patterns.push_back(step.regex.pattern());
  return patterns;
}

Status Tokenizer::EncodePlain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return Status::Ok();
  std::vector<std::string_view> pieces{text};
  std::vector<std::string_view> next;
  for (const auto& step : pre_tokenizer_) {
    next.clear();
    for (std::string_view piece : pieces) GLINT_RETURN_IF_ERROR(step.regex.Split(piece, step.behavior, next));
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) {
    if (ignore_merges_) {
      if (auto it = vocab_ids_.find(std::string(piece)); it != vocab_ids_.end()) {
        out.push_back(it->second);
        continue;
      }
    }
    merger_.Encode(piece, out);
  }
  return Status::Ok();
}

const AddedToken* Tokenizer::AddedTokenAt(std::string_view text, size_t position) const {
  // Leftmost match wins; among matches at one position the longest (buckets are sorted longest first).
  for (int32_t index : added_by_first_byte_[static_cast<uint8_t>(text[position])]) {
    const AddedToken& candidate = added_tokens_[index];
    if (text.substr(position).starts_with(candidate.content)) return &candidate;
  }
  return nullptr;
}

size_t Tokenizer::AddedTokenLengthAt(std::string_view text, size_t position) const {
  if (position >= text.size()) return 0;
  const AddedToken* found = AddedTokenAt(text, position);
  return found == nullptr ? 0 : found->content.size();
}

Result<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, bool parse_special) const {
  if (!parse_special) {
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    GLINT_RETURN_IF_ERROR(EncodePlain(text, ids));
    return ids;
  }
  return EncodeWithLiterals(text, {});
}

Result<std::vector<int32_t>> Tokenizer::EncodeWithLiterals(std::string_view text,
                                                           std::span<const size_t> literal_positions) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  size_t plain_begin = 0;  // start of the text since the last added token
  size_t next_literal = 0;
  if (!added_tokens_.empty()) {
    size_t i = 0;
    while (i < text.size()) {
      while (next_literal < literal_positions.size() && literal_positions[next_literal] < i) ++next_literal;
      const bool literal = next_literal < literal_positions.size() && literal_positions[next_literal] == i;
      const AddedToken* found = literal ? nullptr : AddedTokenAt(text, i);
      if (found == nullptr) {
        // A literal token's text continues the plain run, so it tokenizes exactly as with parse_special off.
        i += literal ? std::max<size_t>(1, AddedTokenLengthAt(text, i)) : 1;
        continue;
      }
      GLINT_RETURN_IF_ERROR(EncodePlain(text.substr(plain_begin, i - plain_begin), ids));
      ids.push_back(found->id);
      i += found->content.size();
      plain_begin = i;
    }
  }
  GLINT_RETURN_IF_ERROR(EncodePlain(text.substr(plain_begin), ids));
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string text;
  for (int32_t id : ids) {
    if (skip_special && IsSpecial(id)) continue;
    text.append(TokenText(id));
  }
  return text;
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view token) const {
  const std::string key(token);
  if (auto it = added_ids_.find(key); it != added_ids_.end()) return it->second;
  if (auto it = vocab_ids_.find(key); it != vocab_ids_.end()) return it->second;
  return std::nullopt;
}

std::string_view Tokenizer::TokenText(int32_t id) const {
  if (!HasToken(id)) return {};
  return id_bytes_[id];
}

std::string StreamingDecoder::Push(int32_t id) {
  if (skip_special_ && tokenizer_->IsSpecial(id)) return {};
  pending_.append(tokenizer_->TokenText(id));
  std::string ready;
  size_t i = 0;
  while (i < pending_.size()) {
    Utf8Scan scan = ScanUtf8(std::string_view(pending_).substr(i));
    if (scan.kind == Utf8Scan::kIncomplete) break;  // may still complete with the next token
    if (scan.kind == Utf8Scan::kComplete) {
      ready.append(pending_, i, scan.length);
    } else {
      ready.append(kReplacementCharacter);
    }
    i += scan.length;
  }
  pending_.erase(0, i);
  return ready;
}

std::string StreamingDecoder::Flush() {
  std::string rest = SanitizeUtf8(pending_);
  pending_.clear();
  return rest;
}

}  // namespace glint
