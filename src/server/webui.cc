#include "server/webui.h"

#include <array>

namespace glint::server {

// Defined by the sources cmake/EmbedText.cmake generates from src/server/webui/ (src/server/CMakeLists.txt).
std::string_view WebUiIndexHtml();
std::string_view WebUiStyleCss();
std::string_view WebUiAppJs();
std::string_view WebUiMarkdownJs();
std::string_view WebUiHighlightJs();
std::string_view WebUiChatJs();
std::string_view WebUiStoreJs();
std::string_view WebUiIconSvg();

namespace {

constexpr std::string_view kHtml = "text/html; charset=utf-8";
constexpr std::string_view kCss = "text/css; charset=utf-8";
constexpr std::string_view kJavaScript = "text/javascript; charset=utf-8";
constexpr std::string_view kSvg = "image/svg+xml";

}  // namespace

std::span<const WebAsset> WebAssets() {
  static const std::array<WebAsset, 8> assets = {{
      {"/", kHtml, WebUiIndexHtml()},
      {"/webui/style.css", kCss, WebUiStyleCss()},
      {"/webui/app.js", kJavaScript, WebUiAppJs()},
      {"/webui/markdown.js", kJavaScript, WebUiMarkdownJs()},
      {"/webui/highlight.js", kJavaScript, WebUiHighlightJs()},
      {"/webui/chat.js", kJavaScript, WebUiChatJs()},
      {"/webui/store.js", kJavaScript, WebUiStoreJs()},
      {"/webui/icon.svg", kSvg, WebUiIconSvg()},
  }};
  return assets;
}

const WebAsset* FindWebAsset(std::string_view path) {
  for (const WebAsset& asset : WebAssets()) {
    if (asset.path == path) return &asset;
  }
  return nullptr;
}

std::span<const std::pair<std::string_view, std::string_view>> WebAssetHeaders() {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 5> headers = {{
      {"Content-Security-Policy",
       "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
      {"X-Content-Type-Options", "nosniff"},
      {"Referrer-Policy", "no-referrer"},
      {"Cache-Control", "no-cache"},
      {"X-Frame-Options", "DENY"},
  }};
  return headers;
}

}  // namespace glint::server
