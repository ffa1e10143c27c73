// `oneOf` needs exactly one branch to match. A grammar can only say "some branch matches" (the union), so glint
// compiles `oneOf` as that union only when no value can match two branches, which it proves pairwise with three
// sufficient tests: the branches allow disjoint JSON types (integer counted as a number), or both are const/enum
// with no common value, or both are objects requiring a property whose const/enum values are disjoint (a
// discriminator, as pydantic and zod write tagged unions). Anything else is refused: it names the two branches.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace glint::server {

// `branches` is the oneOf array at `path`; `root` is the document "#" references resolve in.
Status CheckOneOfDisjoint(const nlohmann::ordered_json& branches, const nlohmann::ordered_json& root,
                          const std::string& path);

}  // namespace glint::server
