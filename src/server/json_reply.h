// A JSON response body: the content type and the serialisation every route uses.
#pragma once

#include "server/http_message.h"
#include "server/json_body.h"

namespace glint::server {

inline constexpr const char* kJsonContentType = "application/json";

// `body` serialised compactly as the response's content; a string that is not valid UTF-8 is written with U+FFFD
// in place of the bad bytes rather than failing the reply.
inline void ReplyJson(HttpResponse& res, int status, const Json& body) {
  res.status = status;
  res.SetContent(body.dump(-1, ' ', false, Json::error_handler_t::replace), kJsonContentType);
}

}  // namespace glint::server
