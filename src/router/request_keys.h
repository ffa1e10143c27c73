// What the router reads from a request to place it, and from a response to remember what it created
// (docs/router.md "Placement"). It reads the request's routing fields only; it never interprets model output.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace glint::router {

// The conversation-prefix key of a generation request: a hash of what stays the same across a session's turns
// and is where its cached prefix begins.
//   /v1/chat/completions  model, the leading system/developer messages, the first other message
//   /v1/messages          model, `system`, the first message
//   /v1/responses         model, `instructions`, `input` when a string, else its first item
//   /v1/completions       model, the first 2,048 bytes of the prompt (its first element when a list)
// Why the start and not "everything before the last user turn": the router never sees the assistant's replies
// (it does not parse model output), so a key that included them could not be computed at the first turn; the
// start of a conversation is the same at every turn, and is exactly the prefix every turn's cache hit begins with.
// nullopt for other paths, bodies that are not a JSON object, or a conversation with nothing to key on.
std::optional<uint64_t> ConversationPrefixKey(std::string_view path, std::string_view body);

// An id the request names that only one backend knows: `previous_response_id` (POST /v1/responses),
// `input_file_id` (POST /v1/batches), or the id in /v1/responses/{id}, /v1/files/{id}[/content],
// /v1/batches/{id}[/cancel]. The item path to GET to ask a backend whether it holds the id is `probe_path`.
struct StatefulId {
  std::string id;
  std::string probe_path;  // "/v1/responses/ID", "/v1/files/ID" or "/v1/batches/ID"
  bool in_path = false;    // the id is the request's own target (unknown id → 404), not a reference in its body
};
std::optional<StatefulId> RequestStatefulId(std::string_view method, std::string_view path, std::string_view body);

// An id the router may look up and put into a path: 1 to 256 bytes, none of them '/', '?', '#' or a space.
bool IsRoutableId(std::string_view id);

// The ids a JSON response of /v1/responses, /v1/files or /v1/batches makes known: its `id`, `output_file_id`,
// `error_file_id`, `input_file_id`, and those of each element of a list's `data`. Empty for anything else.
std::vector<std::string> ResponseIds(std::string_view body);

// The response id in an SSE stream of /v1/responses: the `response.id` of the first `data:` event whose JSON has
// one (response.created). nullopt while `stream_start` holds no complete event with an id.
std::optional<std::string> StreamedResponseId(std::string_view stream_start);

// 64-bit FNV-1a (stable across runs and machines, so keys in logs and tests mean the same thing everywhere).
uint64_t Fnv1a(std::string_view bytes, uint64_t hash = 0xcbf29ce484222325ULL);

}  // namespace glint::router
