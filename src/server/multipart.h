// multipart/form-data (RFC 7578 over RFC 2046's multipart syntax) for POST /v1/files: the boundary from the
// Content-Type header, then the parts of a body that has already arrived whole (its size was bounded by the
// transport before it was read). The parts are views into the body: parsing copies no part data, so an upload
// costs its body and nothing more. Every limit is checked while parsing; the delimiter search is linear in the
// body (Boyer-Moore), so a hostile body cannot make it quadratic.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace glint::server {

struct MultipartPart {
  std::string name;                     // Content-Disposition's name parameter
  std::optional<std::string> filename;  // its filename parameter, when the part is a file
  std::string content_type;             // "" when the part has none (text/plain by the RFC)
  std::string_view data;                // the part's bytes, a view into the body
};

struct MultipartLimits {
  size_t max_parts = 16;                // a file upload has two or three (purpose, file, expires_after)
  size_t max_part_header_bytes = 8192;  // one part's header lines together
};

// The boundary parameter of a `multipart/form-data; boundary=...` Content-Type (quoted or not, 1 to 70
// characters). An error names what is wrong: another media type, no boundary, a boundary too long.
Result<std::string> MultipartBoundary(std::string_view content_type);

// The parts of `body`, in order. Errors: no opening delimiter, a part without the blank line after its headers,
// a part header over the limit or without a Content-Disposition of form-data with a name, more parts than the
// limit, a body that ends before the closing delimiter.
Result<std::vector<MultipartPart>> ParseMultipart(std::string_view body, std::string_view boundary,
                                                  const MultipartLimits& limits = {});

}  // namespace glint::server
