// The chat page's server side (src/server/webui.{h,cc}): the table from path to embedded asset, that the assets only
// reference each other (nothing outside the server), and the HTTP server serving them at / unless webui is off
// (--no-webui), without the API key and with the Content-Security-Policy. The page itself is tested in a browser
// by tests/node/webui.test.mjs.
#include "server/webui.h"

#include <httplib.h>

#include <regex>
#include <set>
#include <thread>

#include "fake_backend.h"
#include "modelgen/tokenizer_files.h"
#include "server/http_server.h"
#include "server_test_util.h"
#include "test_util.h"

namespace glint::server {
namespace {

TEST(WebUi, FindsEveryAssetByItsPathAndNothingElse) {
  ASSERT_GE(WebAssets().size(), 2u);
  EXPECT_EQ(WebAssets()[0].path, "/");
  std::set<std::string_view> paths;
  for (const WebAsset& asset : WebAssets()) {
    EXPECT_TRUE(paths.insert(asset.path).second) << "two assets at " << asset.path;
    EXPECT_EQ(FindWebAsset(asset.path), &asset);
    EXPECT_FALSE(asset.body.empty()) << asset.path;
    EXPECT_FALSE(asset.content_type.empty()) << asset.path;
  }
  EXPECT_EQ(FindWebAsset("/")->content_type, "text/html; charset=utf-8");
  EXPECT_EQ(FindWebAsset("/webui/app.js")->content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(FindWebAsset("/webui/style.css")->content_type, "text/css; charset=utf-8");
  for (const char* path : {"", "/index.html", "/webui", "/webui/", "/webui/../webui/app.js", "//webui/app.js",
                           "/WEBUI/app.js", "/webui/app.js/", "/webui/app", "/v1/models", "/webui/app.js?v=1"}) {
    EXPECT_EQ(FindWebAsset(path), nullptr) << path;
  }
}

// Every src/href in the page and every import in a script names an embedded asset, and no asset holds an absolute
// URL (the SVG namespace is a name, not something loaded), so the page loads nothing from anywhere else.
TEST(WebUi, AssetsReferenceOnlyEachOther) {
  const std::regex html_reference(R"re((?:src|href)="([^"]*)")re");
  const std::regex js_import(R"re(\bfrom\s+'([^']*)')re");
  int references = 0;
  for (const WebAsset& asset : WebAssets()) {
    const std::string body(asset.body);
    const bool html = asset.content_type.starts_with("text/html");
    const std::regex& pattern = html ? html_reference : js_import;
    for (auto it = std::sregex_iterator(body.begin(), body.end(), pattern); it != std::sregex_iterator(); ++it) {
      std::string target = (*it)[1];
      if (!html && target.starts_with("./")) target = "/webui/" + target.substr(2);
      EXPECT_NE(FindWebAsset(target), nullptr) << asset.path << " references " << (*it)[1] << ", which is not embedded";
      ++references;
    }
    std::string rest = body;
    for (size_t at = rest.find("://"); at != std::string::npos; at = rest.find("://", at + 3)) {
      const std::string url = rest.substr(at >= 5 ? at - 5 : 0, 40);
      EXPECT_NE(url.find("http://www.w3.org/2000/svg"), std::string::npos) << asset.path << " holds a URL: " << url;
    }
  }
  EXPECT_GE(references, 7);  // the page: icon, stylesheet, script; app.js: 3 imports; markdown.js: 1
}

TEST(WebUi, HeadersAllowOnlyTheServersOwnOrigin) {
  bool csp = false;
  for (const auto& [name, value] : WebAssetHeaders()) {
    if (name != "Content-Security-Policy") continue;
    csp = true;
    EXPECT_NE(value.find("default-src 'none'"), std::string_view::npos);
    EXPECT_NE(value.find("connect-src 'self'"), std::string_view::npos);
    EXPECT_EQ(value.find("unsafe-inline"), std::string_view::npos);
    EXPECT_EQ(value.find("http"), std::string_view::npos);
  }
  EXPECT_TRUE(csp);
}

// An HttpServer on a free loopback port over a scripted backend, stopped on destruction.
class PageServer {
 public:
  explicit PageServer(ServerOptions options) {
    options.port = 0;
    options.log_requests = false;
    options.shutdown_grace_seconds = 1;
    server_ = std::make_unique<HttpServer>(options, TestTokenizer(), nullptr, backend_);
    GLINT_CHECK(server_->Bind().ok());
    thread_ = std::thread([this] { GLINT_CHECK(server_->Run().ok()); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
  }
  ~PageServer() {
    server_->Shutdown();
    thread_.join();
  }
  httplib::Client& client() { return *client_; }

 private:
  testing::FakeBackend backend_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
};

TEST(WebUi, ServedAtTheRootWithoutTheApiKey) {
  ServerOptions options;
  options.api_key = "sk-page";
  PageServer server(options);
  for (const WebAsset& asset : WebAssets()) {
    auto reply = server.client().Get(std::string(asset.path));
    ASSERT_TRUE(reply) << asset.path;
    EXPECT_EQ(reply->status, 200) << asset.path;
    EXPECT_EQ(reply->body, asset.body) << asset.path;
    EXPECT_EQ(reply->get_header_value("Content-Type"), asset.content_type) << asset.path;
    EXPECT_NE(reply->get_header_value("Content-Security-Policy").find("default-src 'none'"), std::string::npos);
    EXPECT_EQ(reply->get_header_value("X-Content-Type-Options"), "nosniff");
  }
  auto query = server.client().Get("/?conversation=1");  // the query string is not part of the path
  ASSERT_TRUE(query);
  EXPECT_EQ(query->status, 200);
  auto head = server.client().Head("/");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  // The API still needs the key; a path that is no asset is still a 404 (after the key check).
  auto models = server.client().Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  auto missing = server.client().Get("/webui/missing.js", {{"Authorization", "Bearer sk-page"}});
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto post = server.client().Post("/", "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 401);  // not an asset request: the API rules apply
}

TEST(WebUi, NoWebUiServesNothingAtTheRoot) {
  ServerOptions options;
  options.webui = false;
  PageServer server(options);
  for (const WebAsset& asset : WebAssets()) {
    auto reply = server.client().Get(std::string(asset.path));
    ASSERT_TRUE(reply) << asset.path;
    EXPECT_EQ(reply->status, 404) << asset.path;
    EXPECT_EQ(reply->get_header_value("Content-Security-Policy"), "");
  }
  auto health = server.client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

}  // namespace
}  // namespace glint::server
