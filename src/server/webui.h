// The browser chat page served at `/` (docs/webui.md): a table from request path to a file compiled into the binary
// (src/server/webui/, embedded by cmake/EmbedText.cmake), so the page works offline with nothing loaded from
// anywhere but this server. This file knows nothing of HTTP libraries: the server's router asks FindWebAsset for a
// GET's path and, on a hit, answers 200 with the asset's body, content type and WebAssetHeaders().
#pragma once

#include <span>
#include <string_view>
#include <utility>

namespace glint::server {

struct WebAsset {
  std::string_view path;          // as requested: "/" for the page, "/webui/<file>" for what it loads
  std::string_view content_type;  // with charset for text
  std::string_view body;
};

// Every embedded asset, the page first.
std::span<const WebAsset> WebAssets();

// The asset served at `path` (the request path without its query), or nullptr: exact matches only, so no path can
// reach anything but the table (no directory traversal, no file system).
const WebAsset* FindWebAsset(std::string_view path);

// Headers every asset is sent with. The Content-Security-Policy lets the page load scripts, styles, images and
// fetches from its own origin only, so model output that slipped past the Markdown renderer's escaping still could
// not run a script or reach another host; `no-cache` makes a rebuilt server's page replace the old one at once.
std::span<const std::pair<std::string_view, std::string_view>> WebAssetHeaders();

}  // namespace glint::server
