// Image content parts through the server: parsing (markers, order, limits), loading (data: URLs, file:// under
// --allowed-local-media-path, remote URLs refused), the placeholder expansion to N image tokens, client text that
// spells <|image|> staying text, and the chat endpoint's refusal while the tower is not wired (a 400 naming the
// part, never a silently dropped image).
#include "server/image_input.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <png.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "image_test_util.h"
#include "server/chat_prompt.h"
#include "server_test_util.h"
#include "tokenizer/image_tokens.h"

namespace glint::server {
namespace {

using Parts = std::vector<ImagePart>;  // the helper ImagePart() below hides the type's name

std::string PngBytes(int width, int height) {
  std::vector<uint8_t> rgb(size_t{3} * width * height);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 37);
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = width;
  image.height = height;
  image.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  png_image_write_to_memory(&image, nullptr, &size, 0, rgb.data(), 0, nullptr);
  std::string out(size, '\0');
  png_image_write_to_memory(&image, out.data(), &size, 0, rgb.data(), 0, nullptr);
  out.resize(size);
  return out;
}

std::string Base64(const std::string& bytes) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = uint32_t{static_cast<uint8_t>(bytes[i])} << 16;
    if (i + 1 < bytes.size()) v |= uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    out += alphabet[v >> 18 & 63];
    out += alphabet[v >> 12 & 63];
    out += i + 1 < bytes.size() ? alphabet[v >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? alphabet[v & 63] : '=';
  }
  return out;
}

std::string DataUrl(const std::string& bytes, const std::string& type = "image/png") {
  return "data:" + type + ";base64," + Base64(bytes);
}

Json ImagePart(const std::string& url) { return {{"type", "image_url"}, {"image_url", {{"url", url}}}}; }
Json TextPart(const std::string& text) { return {{"type", "text"}, {"text", text}}; }

TEST(ImageParts, ParsedWithMarkersInOrder) {
  const Json body = {
      {"messages",
       {{{"role", "user"}, {"content", {TextPart("a"), TextPart("b"), ImagePart("data:x"), TextPart("c")}}},
        {{"role", "user"}, {"content", {ImagePart("data:y")}}}}}};
  auto parsed = ParseChatRequest(body.dump(), RequestPolicy{});
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const ChatRequest& chat = parsed.value();
  EXPECT_EQ(chat.messages[0]["content"], std::string("a\nb") + std::string(kImageMarker) + "c");
  ASSERT_EQ(chat.images.size(), 2u);
  EXPECT_EQ(chat.images[0].param, "messages[0].content[2]");
  EXPECT_EQ(chat.images[0].offset, 3u);
  EXPECT_EQ(chat.images[1].message, 1u);
  EXPECT_EQ(chat.images[1].url, "data:y");

  RequestPolicy policy;
  policy.max_images = 1;
  auto refused = ParseChatRequest(body.dump(), policy);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().param, "messages[1].content[0]");
  EXPECT_NE(refused.error().message.find("at most 1 images"), std::string::npos);
}

TEST(ImageParts, Base64IsStrict) {
  EXPECT_EQ(DecodeBase64("aGVsbG8="), "hello");
  EXPECT_EQ(DecodeBase64("aGVsbG8"), "hello");
  EXPECT_EQ(DecodeBase64(""), "");
  EXPECT_FALSE(DecodeBase64("aGVs bG8=").has_value());
  EXPECT_FALSE(DecodeBase64("a").has_value());
  EXPECT_FALSE(DecodeBase64("aGV$").has_value());
}

void ExpectPartError(const std::string& url, const ImageInputOptions& options, const std::string& substring) {
  auto result = LoadImageBytes(url, "messages[0].content[0]", options);
  ASSERT_FALSE(result.ok()) << url;
  EXPECT_EQ(result.error().status, 400);
  EXPECT_EQ(result.error().param, "messages[0].content[0]");
  EXPECT_NE(result.error().message.find(substring), std::string::npos) << result.error().message;
}

TEST(ImageParts, LoadingRefusesWhatItShould) {
  ImageInputOptions options;
  ExpectPartError("https://example.com/cat.png", options, "remote image URLs are not fetched");
  ExpectPartError("ftp://host/x.png", options, "must be a data: URL");
  ExpectPartError("data:text/plain;base64,aGk=", options, "media type 'text/plain' is not supported");
  ExpectPartError("data:image/png,rawbytes", options, "only base64 data: URLs");
  ExpectPartError("data:image/png;base64,@@@@", options, "base64 data is malformed");
  ExpectPartError(DataUrl(PngBytes(2, 2), "image/jpeg"), options, "says image/jpeg but the bytes are image/png");
  options.limits.max_bytes = 64;
  ExpectPartError(DataUrl(std::string(300, 'x')), options, "the limit is 64 bytes (--max-image-bytes)");
  ExpectPartError("file:///etc/passwd", ImageInputOptions{}, "without --allowed-local-media-path");
}

TEST(ImageParts, LocalFilesStayInsideTheAllowedDirectory) {
  const std::string root = glint::testing::MakeTempDir("image_input");
  const std::string allowed = root + "/allowed";
  std::filesystem::create_directories(allowed + "/sub");
  ASSERT_OK(WriteFileAtomic(allowed + "/sub/a.png", PngBytes(3, 3)));
  ASSERT_OK(WriteFileAtomic(root + "/secret.png", PngBytes(3, 3)));
  std::filesystem::create_symlink(root + "/secret.png", allowed + "/link.png");
  ImageInputOptions options;
  options.allowed_local_media_path = allowed;
  auto inside = LoadImageBytes("file://" + allowed + "/sub/../sub/a.png", "p", options);
  ASSERT_TRUE(inside.ok()) << inside.error().message;
  EXPECT_EQ(inside.value(), PngBytes(3, 3));
  // Outside, through a symlink, or missing: one message, so that a client cannot probe which files exist.
  const std::string refused = "no such file under --allowed-local-media-path";
  ExpectPartError("file://" + allowed + "/../secret.png", options, refused);
  ExpectPartError("file://" + allowed + "/link.png", options, refused);
  ExpectPartError("file://" + allowed + "/missing.png", options, refused);
  ExpectPartError("file://" + root + "/missing.png", options, refused);
  ExpectPartError("file://relative.png", options, "absolute path");
  ExpectPartError("file://" + allowed + "/sub", options, "not a regular file");
}

// Issue 37 item 7: swapping a directory inside the allowed path for a symlink between the check and the read let
// requests read files outside it. A swapper thread exchanges "allowed/real" (a directory) and a symlink to the
// outside directory atomically (renameat2 RENAME_EXCHANGE) while requests run: the old resolve-then-read code read
// the outside file now and then; the open from the directory's descriptor with O_NOFOLLOW never does.
TEST(ImageParts, ASymlinkSwapRaceNeverReadsOutside) {
  const std::string root = glint::testing::MakeTempDir("image_race");
  const std::string allowed = root + "/allowed", outside = root + "/outside";
  std::filesystem::create_directories(allowed + "/real");
  std::filesystem::create_directories(outside);
  ASSERT_OK(WriteFileAtomic(allowed + "/real/a.png", PngBytes(3, 3)));
  ASSERT_OK(WriteFileAtomic(outside + "/a.png", PngBytes(5, 5)));
  std::filesystem::create_directory_symlink(outside, allowed + "/swap");
  ImageInputOptions options;
  options.allowed_local_media_path = allowed;
  std::atomic<bool> stop{false};
  std::atomic<int> swaps{0};
  std::thread swapper([&] {
    const std::string a = allowed + "/real", b = allowed + "/swap";
    while (!stop.load()) {
      if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) ++swaps;
    }
  });
  int inside_reads = 0, outside_reads = 0;
  for (int i = 0; i < 5000; ++i) {
    auto bytes = LoadImageBytes("file://" + allowed + "/real/a.png", "p", options);
    if (bytes.ok()) ++(bytes.value() == PngBytes(5, 5) ? outside_reads : inside_reads);
  }
  stop = true;
  swapper.join();
  std::printf("%d swaps; %d reads inside, %d outside\n", swaps.load(), inside_reads, outside_reads);
  EXPECT_GT(swaps.load(), 100);
  EXPECT_EQ(outside_reads, 0);
}

TEST(ImageParts, ExpansionCountsMustMatch) {
  std::vector<LoadedImage> images(2);
  images[0].image.grid_t = 1, images[0].image.grid_h = 4, images[0].image.grid_w = 6;  // 6 tokens
  images[1].image.grid_t = 1, images[1].image.grid_h = 2, images[1].image.grid_w = 2;  // 1 token
  std::vector<size_t> starts;
  auto expanded = ExpandImageTokens({5, 9, 7, 9, 8}, 9, images, &starts);
  ASSERT_TRUE(expanded.ok());
  EXPECT_EQ(expanded.value(), (std::vector<int32_t>{5, 9, 9, 9, 9, 9, 9, 7, 9, 8}));
  EXPECT_EQ(starts, (std::vector<size_t>{1, 8}));
  auto mismatch = ExpandImageTokens({5, 9, 7}, 9, images, nullptr);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.error().message.find("1 image placeholders (token "), std::string::npos);
}

// The CPU time of the calling thread and the peak RSS since the last ResetPeakRss, for cost checks.
double ThreadCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}
int64_t StatusKb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with(field + ":")) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }  // VmHWM := VmRSS (Linux ≥ 4.0)

Parts SameImageParts(const std::string& url, int count) {
  Parts parts;
  for (int i = 0; i < count; ++i) parts.push_back({url, StrCat("messages[0].content[", i, "]")});
  return parts;
}

// Issue 37: sixteen 689-byte JPEGs whose headers claim 7000 x 7000 cost 22.5 s of CPU and +2.5 GB of RSS, every
// image decoded and preprocessed before a budget was checked. Now the headers refuse the request: under 1 s of CPU
// and 100 MB of peak RSS growth, with or without the engine's per-image budget (the per-request pixel cap).
TEST(ImageBombs, RefusedFromTheHeadersWithinOneSecondAndOneHundredMegabytes) {
  const std::vector<uint8_t> bomb = glint::testing::JpegBomb(7000, 7000);
  const std::string url = DataUrl(std::string(bomb.begin(), bomb.end()), "image/jpeg");
  for (const int64_t budget : {int64_t{512}, int64_t{0}}) {
    ImageInputOptions options;
    options.max_tokens_per_image = budget;
    ResetPeakRss();
    const int64_t rss_before = StatusKb("VmRSS");
    const double cpu_before = ThreadCpuSeconds();
    auto loaded = LoadImages(SameImageParts(url, 16), options);
    const double cpu = ThreadCpuSeconds() - cpu_before;
    const int64_t growth_kb = StatusKb("VmHWM") - rss_before;
    std::printf("16 x 7000^2 JPEG (%zu bytes each), budget %lld: %.3f s CPU, +%lld KB peak RSS\n", bomb.size(),
                static_cast<long long>(budget), cpu, static_cast<long long>(growth_kb));
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.error().status, 400);
    EXPECT_LT(cpu, 1.0);
    EXPECT_LT(growth_kb, 100 * 1024);
    if (budget > 0) {
      EXPECT_EQ(loaded.error().param, "messages[0].content[0]");
      EXPECT_NE(loaded.error().message.find("becomes 7921 image tokens, more than the 512 one image may take"),
                std::string::npos)
          << loaded.error().message;
    } else {  // 49 M pixels each: the second one passes the 100 M default
      EXPECT_EQ(loaded.error().param, "messages[0].content[2]");
      EXPECT_NE(loaded.error().message.find("limit is 100000000 (--max-image-pixels-per-request)"), std::string::npos)
          << loaded.error().message;
    }
  }
}

// Two small images under a 2-per-request pixel cap of their sum: the second is refused before either is decoded.
TEST(ImageBombs, PerRequestPixelCapAndPerImageBudgetAreFromHeaders) {
  ImageInputOptions options;
  options.max_request_pixels = 40 * 30 + 10;
  EXPECT_TRUE(LoadImages(SameImageParts(DataUrl(PngBytes(40, 30)), 1), options).ok());
  auto two = LoadImages(SameImageParts(DataUrl(PngBytes(40, 30)), 2), options);
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.error().param, "messages[0].content[1]");
  options = {};
  options.max_tokens_per_image = 32;  // a 40 x 30 image is scaled up to ~16 tokens, a 500 x 300 one is ~190
  EXPECT_TRUE(LoadImages(SameImageParts(DataUrl(PngBytes(40, 30)), 1), options).ok());
  EXPECT_FALSE(LoadImages(SameImageParts(DataUrl(PngBytes(500, 300)), 1), options).ok());
}

TEST(ImageBombs, TheDecodeGateHoldsDecodesBeyondItsSlots) {
  auto gate = std::make_shared<DecodeGate>(1);
  std::atomic<bool> decoded{false};
  std::thread waiter;
  {
    DecodeGate::Slot held(*gate);
    waiter = std::thread([&] {
      ImageInputOptions options;
      options.decode_gate = gate;
      decoded = LoadImages(SameImageParts(DataUrl(PngBytes(4, 4)), 1), options).ok();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(decoded.load());  // waiting for the slot held here
  }
  waiter.join();
  EXPECT_TRUE(decoded.load());
}

// The same tokens a PNG of `w` × `h` must expand to: the canvas rule of the release processor.
int64_t Tokens(int h, int w) { return media::ImageTokenCount(media::ProcessorConfig{}, h, w).value(); }

TEST(ImageServer, TokenizeExpandsAndChatRefusesWithoutATower) {
  TestServer server;
  const Tokenizer& tokenizer = TestTokenizer();
  const int32_t image = *tokenizer.TokenId("<|image|>");
  const int32_t begin = *tokenizer.TokenId("<|begin_of_image|>");
  const Json messages = {{{"role", "user"},
                          {"content",
                           {ImagePart(DataUrl(PngBytes(40, 30))), TextPart("what is <|image|> here?"),
                            ImagePart(DataUrl(PngBytes(500, 300)))}}}};
  const HttpReply tokenized = Post(server.port(), "/tokenize", {{"messages", messages}});
  ASSERT_EQ(tokenized.status, 200) << tokenized.body;
  const std::vector<int32_t> tokens = tokenized.json()["tokens"];
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), image), Tokens(30, 40) + Tokens(300, 500));
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), begin), 2);  // the client's "<|image|>" text stayed text
  const auto first = std::find(tokens.begin(), tokens.end(), image);
  ASSERT_NE(first, tokens.begin());
  EXPECT_EQ(*(first - 1), begin);

  const HttpReply chat = Post(server.port(), "/v1/chat/completions", {{"messages", messages}});
  EXPECT_EQ(chat.status, 400);
  EXPECT_EQ(chat.json()["error"]["param"], "messages[0].content[0]");
  EXPECT_EQ(chat.json()["error"]["code"], "image_input_not_supported");
  EXPECT_NE(chat.body.find("this server takes no images: this server has no vision tower"), std::string::npos);
  EXPECT_TRUE(server.backend().submitted().empty());  // nothing reached the engine

  std::string corrupt = PngBytes(8, 8);
  corrupt.resize(corrupt.size() / 2);
  const Json bad = {{"messages", {{{"role", "user"}, {"content", {TextPart("x"), ImagePart(DataUrl(corrupt))}}}}}};
  const HttpReply refused = Post(server.port(), "/v1/chat/completions", bad);
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.json()["error"]["param"], "messages[0].content[1]");
  EXPECT_NE(refused.body.find("PNG image could not be decoded"), std::string::npos) << refused.body;
}

// A checkpoint whose config names other tokens for images (here the test tokenizer's video tokens stand in for a
// tokenizer that spells them differently) gets each image part rendered as those tokens, with the client's text
// kept plain (a client's "<|video|>" stays text) and, with --allow-special-tokens-in-content, unmarked (the same
// respelling, the client's spelling then a special token as that flag promises). Issue 35, item 3.
TEST(ImageServer, ImagePartsAreRenderedAsTheCheckpointsOwnTokens) {
  const Tokenizer& tokenizer = TestTokenizer();
  const ImageTokens video{*tokenizer.TokenId("<|video|>"), *tokenizer.TokenId("<|begin_of_video|>"),
                          *tokenizer.TokenId("<|end_of_video|>")};
  const int32_t image = *tokenizer.TokenId("<|image|>");
  const auto chat = [](const std::string& text) {
    return Json{
        {"messages", {{{"role", "user"}, {"content", {ImagePart(DataUrl(PngBytes(40, 30))), TextPart(text)}}}}}};
  };
  for (const bool allow_special : {false, true}) {
    SCOPED_TRACE(allow_special ? "special tokens allowed in content" : "content kept plain");
    ServerOptions options;
    options.allow_special_tokens_in_content = allow_special;
    options.images.image_token_id = video.image;
    options.images.marker_text = ImageMarkerText(video, tokenizer).value();
    ASSERT_NE(options.images.marker_text, kImageMarker);
    TestServer server(options);
    // Kept plain, the client's "<|video|>" is text; allowed, it would be a second placeholder (refused below).
    const HttpReply tokenized =
        Post(server.port(), "/tokenize", chat(allow_special ? "what is this?" : "is <|video|> text?"));
    ASSERT_EQ(tokenized.status, 200) << tokenized.body;
    const std::vector<int32_t> tokens = tokenized.json()["tokens"];
    EXPECT_EQ(std::count(tokens.begin(), tokens.end(), video.image), Tokens(30, 40));
    EXPECT_EQ(std::count(tokens.begin(), tokens.end(), image), 0);  // nothing in the released spelling
    const auto first = std::find(tokens.begin(), tokens.end(), video.image);
    ASSERT_NE(first, tokens.begin());
    EXPECT_EQ(*(first - 1), video.start);
    ASSERT_LT(first + Tokens(30, 40), tokens.end());
    EXPECT_EQ(*(first + Tokens(30, 40)), video.end);
    if (allow_special) {
      const HttpReply spelled = Post(server.port(), "/tokenize", chat("is <|video|> text?"));
      EXPECT_EQ(spelled.status, 400);
      EXPECT_NE(spelled.body.find(StrCat("2 image placeholders (token ", video.image)), std::string::npos)
          << spelled.body;
    }
  }
}

TEST(ImageServer, AChatWithImagesHandsTheEngineTheirPatchesStartsAndHashes) {
  ServerOptions options;
  options.images.engine_takes_images = true;
  TestServer server(options);
  const int32_t image = *TestTokenizer().TokenId("<|image|>");
  const std::string a = PngBytes(40, 30), b = PngBytes(500, 300);
  const Json messages = {
      {{"role", "user"}, {"content", {ImagePart(DataUrl(a)), TextPart("and"), ImagePart(DataUrl(b))}}}};
  const HttpReply chat = Post(server.port(), "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 2}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  const std::vector<GenerationRequest> submitted = server.backend().submitted();
  ASSERT_EQ(submitted.size(), 1u);
  const GenerationRequest& request = submitted[0];
  ASSERT_EQ(request.images.size(), 2u);
  const int64_t counts[] = {Tokens(30, 40), Tokens(300, 500)};
  for (size_t k = 0; k < 2; ++k) {
    const GenerationImage& got = request.images[k];
    ASSERT_NE(got.input, nullptr);
    EXPECT_EQ(got.input->NumPatches() / 4, counts[k]);
    EXPECT_EQ(static_cast<int64_t>(got.input->patches.size()), got.input->NumPatches() * 1176);
    // The placeholders start there, all of them, and the token before is <|begin_of_image|>.
    ASSERT_LE(got.start + counts[k], static_cast<int64_t>(request.prompt.size()));
    EXPECT_EQ(std::count(request.prompt.begin() + got.start, request.prompt.begin() + got.start + counts[k], image),
              counts[k]);
    EXPECT_EQ(request.prompt[got.start - 1], *TestTokenizer().TokenId("<|begin_of_image|>"));
  }
  EXPECT_NE(request.images[0].key, request.images[1].key);  // the keys are the bytes' hashes
}

}  // namespace
}  // namespace glint::server
