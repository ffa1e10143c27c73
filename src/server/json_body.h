// Request bodies → JSON, in time linear in the body and with bounded nesting.
//
// Why not Json::parse: requests are nlohmann::ordered_json (member order reaches the chat template, e.g. a tool's
// properties), whose parser inserts each member after a linear search of the object's earlier members, so one
// object of 50,000 members costs seconds (measured 3.3 s for 0.5 MB) and a 16 MiB body hours. Here nlohmann's SAX
// parser feeds a builder that indexes each open object's keys in a hash table. A key given twice keeps its last
// value (as Json::parse does) at its first position.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "base/status.h"
#include "server/api_error.h"

namespace glint::server {

using Json = nlohmann::ordered_json;

// Nesting allowed in request bodies (objects and arrays; a chat request with tools' schemas nests ~10 deep).
inline constexpr int kMaxRequestJsonDepth = 64;

// The body as a JSON object: 400 for malformed JSON, invalid UTF-8, nesting deeper than `max_depth`, or a
// non-object.
ApiOr<Json> ParseJsonObject(std::string_view body, int max_depth = kMaxRequestJsonDepth);

}  // namespace glint::server
