#include "router/request_keys.h"

#include <nlohmann/json.hpp>

#include "base/json_depth.h"
#include "base/status.h"

namespace glint::router {
namespace {

using Json = nlohmann::json;

// Request bodies nest a few levels (messages → content parts → image_url); anything deeper is left to the backend,
// which refuses it, and the router just does not key it.
constexpr int kMaxRequestDepth = 64;
constexpr size_t kCompletionPrefixBytes = 2048;
constexpr size_t kMaxIdBytes = 256;

std::optional<Json> ParseObject(std::string_view body) {
  if (!JsonDepthWithin(body, kMaxRequestDepth)) return std::nullopt;
  Json json = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::nullopt;
  return json;
}

// One field into the key, with its name and a separator so that ("ab","c") and ("a","bc") differ.
void Mix(uint64_t& hash, std::string_view name, const Json& value) {
  hash = Fnv1a(name, hash);
  hash = Fnv1a(value.is_null() ? std::string_view("\x01") : std::string_view(value.dump()), hash);
  hash = Fnv1a(std::string_view("\x00", 1), hash);
}

const Json& Field(const Json& object, const char* name) {
  static const Json kNull;
  auto found = object.find(name);
  return found == object.end() ? kNull : *found;
}

bool IsSystemMessage(const Json& message) {
  if (!message.is_object()) return false;
  const Json& role = Field(message, "role");
  return role == "system" || role == "developer";
}

std::optional<uint64_t> ChatKey(const Json& body, uint64_t hash) {
  const Json& messages = Field(body, "messages");
  if (!messages.is_array()) return std::nullopt;
  for (const Json& message : messages) {
    Mix(hash, "message", message);
    if (!IsSystemMessage(message)) return hash;  // the first message that is not a system one ends the key
  }
  return std::nullopt;  // only system messages: nothing that names a conversation
}

std::optional<uint64_t> MessagesKey(const Json& body, uint64_t hash) {
  const Json& messages = Field(body, "messages");
  if (!messages.is_array() || messages.empty()) return std::nullopt;
  Mix(hash, "system", Field(body, "system"));
  Mix(hash, "message", messages.front());
  return hash;
}

std::optional<uint64_t> ResponsesKey(const Json& body, uint64_t hash) {
  const Json& input = Field(body, "input");
  Mix(hash, "instructions", Field(body, "instructions"));
  if (input.is_string()) {
    Mix(hash, "input", input);
  } else if (input.is_array() && !input.empty()) {
    Mix(hash, "input", input.front());
  } else {
    return std::nullopt;
  }
  return hash;
}

std::optional<uint64_t> CompletionsKey(const Json& body, uint64_t hash) {
  const Json* prompt = &Field(body, "prompt");
  if (prompt->is_array() && !prompt->empty() && !prompt->front().is_number()) prompt = &prompt->front();
  if (prompt->is_string()) {
    const std::string& text = prompt->get_ref<const std::string&>();
    return Fnv1a(std::string_view(text).substr(0, kCompletionPrefixBytes), Fnv1a("prompt", hash));
  }
  if (prompt->is_array() && !prompt->empty()) {  // token ids: the first 512 of them
    const size_t count = std::min<size_t>(prompt->size(), kCompletionPrefixBytes / 4);
    Mix(hash, "tokens", Json(std::vector<Json>(prompt->begin(), prompt->begin() + static_cast<ptrdiff_t>(count))));
    return hash;
  }
  return std::nullopt;
}

bool PlausibleId(const Json& value) { return value.is_string() && IsRoutableId(value.get_ref<const std::string&>()); }

// "/v1/files/ID/content" → "ID" for prefix "/v1/files/" and suffix "/content"; "" when the path is not one.
std::string IdAfter(std::string_view path, std::string_view prefix, std::string_view suffix) {
  if (!path.starts_with(prefix)) return "";
  std::string_view rest = path.substr(prefix.size());
  if (!suffix.empty() && rest.ends_with(suffix)) rest.remove_suffix(suffix.size());
  return IsRoutableId(rest) ? std::string(rest) : "";
}

void CollectIds(const Json& object, std::vector<std::string>& ids) {
  if (!object.is_object()) return;
  for (const char* name : {"id", "output_file_id", "error_file_id", "input_file_id"}) {
    const Json& value = Field(object, name);
    if (PlausibleId(value)) ids.push_back(value.get<std::string>());
  }
}

}  // namespace

bool IsRoutableId(std::string_view id) {
  return !id.empty() && id.size() <= kMaxIdBytes && id.find_first_of("/?# ") == std::string_view::npos;
}

uint64_t Fnv1a(std::string_view bytes, uint64_t hash) {
  for (unsigned char byte : bytes) {
    hash ^= byte;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::optional<uint64_t> ConversationPrefixKey(std::string_view path, std::string_view body) {
  using KeyFunction = std::optional<uint64_t> (*)(const Json&, uint64_t);
  KeyFunction key = nullptr;
  if (path == "/v1/chat/completions") key = ChatKey;
  if (path == "/v1/messages") key = MessagesKey;
  if (path == "/v1/responses") key = ResponsesKey;
  if (path == "/v1/completions") key = CompletionsKey;
  if (key == nullptr) return std::nullopt;
  const std::optional<Json> json = ParseObject(body);
  if (!json) return std::nullopt;
  uint64_t hash = Fnv1a(path);
  Mix(hash, "model", Field(*json, "model"));
  return key(*json, hash);
}

std::optional<StatefulId> RequestStatefulId(std::string_view method, std::string_view path, std::string_view body) {
  struct Collection {
    std::string_view prefix, suffix;
  };
  for (const Collection& collection : {Collection{"/v1/responses/", ""}, Collection{"/v1/files/", "/content"},
                                       Collection{"/v1/batches/", "/cancel"}}) {
    std::string id = IdAfter(path, collection.prefix, collection.suffix);
    if (!id.empty()) return StatefulId{id, StrCat(collection.prefix, id), true};
  }
  const bool responses = path == "/v1/responses";
  if (method != "POST" || (!responses && path != "/v1/batches")) return std::nullopt;
  const std::optional<Json> json = ParseObject(body);
  if (!json) return std::nullopt;
  const Json& reference = Field(*json, responses ? "previous_response_id" : "input_file_id");
  if (!PlausibleId(reference)) return std::nullopt;
  const std::string id = reference.get<std::string>();
  return StatefulId{id, StrCat(responses ? "/v1/responses/" : "/v1/files/", id), false};
}

std::vector<std::string> ResponseIds(std::string_view body) {
  std::vector<std::string> ids;
  const std::optional<Json> json = ParseObject(body);
  if (!json) return ids;
  CollectIds(*json, ids);
  const Json& data = Field(*json, "data");
  if (data.is_array()) {
    for (const Json& item : data) CollectIds(item, ids);
  }
  return ids;
}

std::optional<std::string> StreamedResponseId(std::string_view stream_start) {
  size_t line_start = 0;
  while (line_start < stream_start.size()) {
    const size_t line_end = stream_start.find('\n', line_start);
    if (line_end == std::string_view::npos) return std::nullopt;  // the line is not complete yet
    std::string_view line = stream_start.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    if (!line.starts_with("data:")) continue;
    const std::optional<Json> event = ParseObject(line.substr(5));
    if (!event) continue;
    const Json& response = Field(*event, "response");
    if (response.is_object() && PlausibleId(Field(response, "id"))) return Field(response, "id").get<std::string>();
  }
  return std::nullopt;
}

}  // namespace glint::router
