// The transfer plane of prefill/decode disaggregation (server/state_transfer.h) on loopback, with two engines on the
// golden tiny-dense model: the fetched state is byte for byte what the prefill engine exports; a fingerprint
// mismatch is refused with a message naming both; a peer that never answers ends the fetch at its deadline; a byte
// flipped in flight (through a relay) fails the region's checksum and a connection cut halfway fails the fetch —
// nothing is returned from either; the prefill engine holds no slot afterwards in every case; frame headers that are
// not the protocol's are refused.
#include "server/state_transfer.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "engine_checks.h"
#include "model/model.h"
#include "server/engine_backend.h"
#include "test_util.h"
#include "vision_test_util.h"

namespace glint::server {
namespace {

// A loopback listener on a free port.
int Listen(int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_EQ(::listen(fd, 4), 0);
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  port = ntohs(address.sin_port);
  return fd;
}

// Relays one connection to the transfer server at `target`, flipping the byte at `flip_at` of what flows back
// (−1: none) or cutting the connection once `cut_at` bytes went back (−1: never).
void Relay(int listener, int target, int64_t flip_at, int64_t cut_at) {
  const int client = ::accept(listener, nullptr, nullptr);
  const int server = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(target));
  ASSERT_EQ(::connect(server, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  std::vector<char> buffer(1 << 16);
  int64_t back = 0;
  pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
  while (::poll(fds, 2, 5000) > 0) {
    if (fds[0].revents != 0) {
      const ssize_t n = ::read(client, buffer.data(), buffer.size());
      if (n <= 0 || ::write(server, buffer.data(), n) != n) break;
    }
    if (fds[1].revents != 0) {
      ssize_t n = ::read(server, buffer.data(), buffer.size());
      if (n <= 0) break;
      if (flip_at >= back && flip_at < back + n) buffer[flip_at - back] ^= 1;
      const bool cut = cut_at >= 0 && back + n >= cut_at;
      if (cut) n = cut_at - back;
      if (::write(client, buffer.data(), n) != n || cut) break;
      back += n;
    }
  }
  ::close(client);
  ::close(server);
}

class StateTransfer : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = ReferenceModel::Load(testing::ModelDir("tiny-dense")).value();
    const EngineOptions options = testing::SizedOptions(*model_, 2, 40, 8);
    prefill_ = Engine::Start(*model_, options).value();
    layout_ = LayoutOf(*prefill_, 0x600d);
    server_ = TransferServer::Start("127.0.0.1", 0, *prefill_, layout_, timeouts_).value();
    for (int64_t i = 0; i < 29; ++i) prompt_.push_back(static_cast<int32_t>((i * 131 + 3) % 200));
  }
  std::string Address(int port) const { return "127.0.0.1:" + std::to_string(port); }
  // The prefill engine holds no slot and no block (its exports freed them at once).
  void ExpectPrefillFree() const {
    const EngineMetrics m = prefill_->Metrics();
    EXPECT_EQ(m.cache.slots_used, 0);
    EXPECT_EQ(m.cache.blocks_used, 0);
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Engine> prefill_;
  TransferLayout layout_;
  TransferTimeouts timeouts_{.connect_seconds = 2, .io_seconds = 2, .prefill_seconds = 30};
  std::unique_ptr<TransferServer> server_;
  std::vector<int32_t> prompt_;
};

// The state of `prompt` (with `images`, run by `tower`) exported by an engine of its own.
SequenceSnapshot OwnExport(const Model& model, const std::vector<int32_t>& prompt,
                           const std::vector<RequestImage>& images = {}, ImageEncoder* tower = nullptr) {
  auto own = EngineCore::Create(model, testing::SizedOptions(model, 2, 40, 8), nullptr, tower).value();
  auto sink = std::make_shared<testing::Collector>();
  Request request = testing::Greedy(prompt, 1, sink);
  request.images = images;
  request.export_state = true;
  EXPECT_OK(own->Add(1, std::move(request)));
  testing::RunToCompletion(*own);
  EXPECT_EQ(sink->outputs.size(), 1u);
  EXPECT_NE(sink->outputs.back().snapshot, nullptr);
  return *sink->outputs.back().snapshot;
}

void ExpectSameState(const SequenceSnapshot& fetched, const SequenceSnapshot& expected) {
  EXPECT_EQ(fetched.tokens, expected.tokens);
  EXPECT_TRUE(fetched.slot == expected.slot);
  EXPECT_TRUE(fetched.blocks == expected.blocks);
  EXPECT_TRUE(fetched.logits == expected.logits);
}

TEST_F(StateTransfer, TheFetchedStateIsTheExport) {
  ASSERT_OK_AND_ASSIGN(SequenceSnapshot fetched, FetchState(Address(server_->port()), prompt_, {}, layout_, timeouts_));
  ExpectSameState(fetched, OwnExport(*model_, prompt_));
  EXPECT_EQ(server_->transfers(), 1);
  ExpectPrefillFree();
}

TEST_F(StateTransfer, AnImageTravelsAsPatchesAndTheTowerRunsOnThePrefillSide) {
  const VisionConfig vision = testing::TinyVisionConfig();
  std::unique_ptr<ImageEncoder> tower = MakeReferenceImageEncoder(testing::TinyVisionWeights(vision), vision);
  auto engine = Engine::Start(*model_, testing::SizedOptions(*model_, 2, 40, 8), nullptr, tower.get()).value();
  auto server = TransferServer::Start("127.0.0.1", 0, *engine, layout_, timeouts_, &vision).value();
  std::vector<int32_t> prompt = {1, 2, 3};
  const auto image = testing::Image(vision, 8, 8, 5);
  prompt.insert(prompt.end(), VisionTokenCount(vision, *image), 7);
  prompt.insert(prompt.end(), {9, 10, 11});
  const std::vector<RequestImage> images = {{3, image, 77}};
  ASSERT_OK_AND_ASSIGN(SequenceSnapshot fetched,
                       FetchState(Address(server->port()), prompt, images, layout_, timeouts_));
  ExpectSameState(fetched, OwnExport(*model_, prompt, images, tower.get()));
  EXPECT_FALSE(fetched.logits == OwnExport(*model_, prompt).logits);  // the tower's rows were used
  EXPECT_EQ(engine->Metrics().images_encoded, 1);
  // A prefill server without a tower says so in its HELLO: refused before a patch is sent.
  EXPECT_ERROR_CONTAINS(FetchState(Address(server_->port()), prompt, images, layout_, timeouts_), "no vision tower");
  // Placeholders past the prompt (a hostile peer: a decode engine refuses that request itself): refused from IMAGE.
  // (A small image: its patches fit the socket's buffers, so the sender reads the ERROR rather than failing to send
  // patches nobody reads.)
  const std::vector<RequestImage> past = {{static_cast<int64_t>(prompt.size()), testing::Image(vision, 2, 2, 6), 77}};
  EXPECT_ERROR_CONTAINS(FetchState(Address(server->port()), prompt, past, layout_, timeouts_), "inside the prompt");
  EXPECT_EQ(server->transfers(), 1);
  EXPECT_EQ(engine->Metrics().cache.slots_used, 0);
  EXPECT_EQ(engine->Metrics().cache.blocks_used, 0);
}

TEST_F(StateTransfer, AnotherModelOrLayoutIsRefusedNamingBoth) {
  TransferLayout other = layout_;
  other.fingerprint ^= 0xff;
  const auto fetched = FetchState(Address(server_->port()), prompt_, {}, other, timeouts_);
  EXPECT_ERROR_CONTAINS(fetched, "the model or cache layout differs");
  EXPECT_ERROR_CONTAINS(fetched, other.Describe());
  EXPECT_ERROR_CONTAINS(fetched, layout_.Describe());
  other = layout_;
  other.slot_bytes += 64;
  EXPECT_ERROR_CONTAINS(FetchState(Address(server_->port()), prompt_, {}, other, timeouts_), "slot");
  EXPECT_EQ(server_->transfers(), 0);
  ExpectPrefillFree();
}

TEST_F(StateTransfer, APeerThatNeverAnswersEndsAtTheDeadline) {
  int port = 0;
  const int silent = Listen(port);  // accepts (the kernel does), never reads or writes
  const auto started = std::chrono::steady_clock::now();
  TransferTimeouts quick = timeouts_;
  quick.io_seconds = 0.3;
  EXPECT_ERROR_CONTAINS(FetchState(Address(port), prompt_, {}, layout_, quick), "within 0.3 s");
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(3));
  ::close(silent);
  // Nobody listening: refused at once.
  EXPECT_ERROR_CONTAINS(FetchState(Address(port), prompt_, {}, layout_, quick), "could not connect");
  EXPECT_ERROR_CONTAINS(FetchState("nowhere", prompt_, {}, layout_, quick), "not host:port");
}

TEST_F(StateTransfer, AFlippedByteOrACutConnectionReturnsNothing) {
  // What flows back: HELLO (32 + 56 bytes), STATE (32 + 32), layer 0's LAYER header (32), its bytes, layer 1's...
  constexpr int64_t kLayerStart = 88 + 64 + 32;
  const int64_t second = kLayerStart + LayerFrameBytes(layout_, 0, 4) + 32;  // 29 tokens: 4 blocks of 8
  for (const auto& [flip, cut, message] :
       {std::tuple<int64_t, int64_t, std::string>{kLayerStart + 100, -1, "layer 0: the LAYER region"},
        {-1, kLayerStart + 1000, "layer 0: could not receive LAYER"},
        {second + 40, -1, "layer 1: the LAYER region"}}) {
    int port = 0;
    const int listener = Listen(port);
    std::thread relay(Relay, listener, server_->port(), flip, cut);
    EXPECT_ERROR_CONTAINS(FetchState(Address(port), prompt_, {}, layout_, timeouts_), message);
    relay.join();
    ::close(listener);
  }
  ExpectPrefillFree();
}

// A generation's tokens, for a wait on the calling thread.
class TokenSink final : public GenerationSink {
 public:
  void OnOutput(GenerationOutput output) override {
    std::lock_guard<std::mutex> lock(mutex_);
    tokens_.insert(tokens_.end(), output.tokens.begin(), output.tokens.end());
    done_ = done_ || output.request_finished;
    finished_.notify_all();
  }
  std::vector<int32_t> Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait_for(lock, std::chrono::seconds(30), [&] { return done_; });
    return tokens_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable finished_;
  std::vector<int32_t> tokens_;
  bool done_ = false;
};

// The engine's slot and block gauges back at zero (published at the end of its round: waited for, at most 5 s).
void ExpectEngineFree(const Engine& engine) {
  for (int i = 0; i < 500 && (engine.Metrics().cache.slots_used != 0 || engine.Metrics().cache.blocks_used != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(engine.Metrics().cache.slots_used, 0);
  EXPECT_EQ(engine.Metrics().cache.blocks_used, 0);
}

TEST_F(StateTransfer, ACutMidStreamDecodesNothingAndFreesTheLease) {
  // A decode server's whole path (EngineBackend: lease, fetch, import) with the connection cut inside layer 1's
  // frame, layer 0 already checked: with --pd-fallback fail the request fails naming the layer; with local the
  // prompt is prefilled here and gives the tokens a local run gives. The lease is freed either way.
  auto decode = Engine::Start(*model_, testing::SizedOptions(*model_, 2, 40, 8)).value();
  const int64_t cut = 88 + 64 + 32 + LayerFrameBytes(layout_, 0, 4) + 32 + 100;
  const auto generate = [&](EngineBackend& backend, const std::string& from) -> Result<std::vector<int32_t>> {
    auto sink = std::make_shared<TokenSink>();
    GenerationRequest request;
    request.prompt = prompt_;
    request.sampling.temperature = 0;
    request.max_tokens = 8;
    request.sink = sink;
    request.prefill_from = from;
    GLINT_RETURN_IF_ERROR(backend.Submit(std::move(request)).status());
    return sink->Wait();
  };
  EngineBackend plain(*decode);
  ASSERT_OK_AND_ASSIGN(const std::vector<int32_t> expected, generate(plain, ""));
  ASSERT_EQ(expected.size(), 8u);
  for (const bool fail : {true, false}) {
    EngineBackend backend(*decode, DecodeRole{layout_, timeouts_, 0, fail});
    int port = 0;
    const int listener = Listen(port);
    std::thread relay(Relay, listener, server_->port(), -1, cut);
    const Result<std::vector<int32_t>> got = generate(backend, Address(port));
    relay.join();
    ::close(listener);
    if (fail) {
      EXPECT_ERROR_CONTAINS(got, "layer 1: could not receive LAYER");
    } else {
      ASSERT_OK(got.status());
      EXPECT_EQ(*got, expected);
      EXPECT_EQ(backend.Metrics().pd_local_prefills, 1);
    }
    EXPECT_EQ(backend.Metrics().pd_transfer_failures, 1);
    EXPECT_EQ(backend.Metrics().pd_transfers, 0);
    ExpectEngineFree(*decode);
  }
  ExpectPrefillFree();
}

TEST(StateTransferFrames, HeadersThatAreNotTheProtocolsAreRefused) {
  const std::vector<std::byte> body(10, std::byte{7});
  std::array<std::byte, kFrameHeaderBytes> header = EncodeFrameHeader(FrameType::kLayer, body);
  ASSERT_OK_AND_ASSIGN(FrameHeader decoded, DecodeFrameHeader(header));
  EXPECT_EQ(decoded.type, FrameType::kLayer);
  EXPECT_EQ(decoded.length, 10u);
  EXPECT_OK(CheckFrameBody(decoded, body));
  std::vector<std::byte> damaged = body;
  damaged[3] ^= std::byte{1};
  EXPECT_ERROR_CONTAINS(CheckFrameBody(decoded, damaged), "failed its checksum");
  std::array<std::byte, kFrameHeaderBytes> flipped = header;
  flipped[9] ^= std::byte{1};  // the length: the header's own checksum catches it
  EXPECT_ERROR_CONTAINS(DecodeFrameHeader(flipped), "header failed its checksum");
  std::array<std::byte, kFrameHeaderBytes> http{};
  std::memcpy(http.data(), "GET / HTTP/1.1\r\n", 16);
  EXPECT_ERROR_CONTAINS(DecodeFrameHeader(http), "does not speak the transfer protocol");
  // Version 1's SLOT and BLOCKS are gone: unknown types.
  EXPECT_ERROR_CONTAINS(DecodeFrameHeader(EncodeFrameHeader(static_cast<FrameType>(4), body)), "unknown frame type 4");
  // A body in two pieces has the checksum of the joined bytes.
  const std::vector<std::byte> head(body.begin(), body.begin() + 3), tail(body.begin() + 3, body.end());
  EXPECT_EQ(EncodeFrameHeader(FrameType::kLayer, tail, head), header);
}

TEST(StateTransferFrames, AnImageIsCheckedBeforeItsPatchesAreRead) {
  const ImageShape shape{2, 1176};
  const auto decode = [&](ImageAnnouncement image, int64_t prompt, int64_t first_free) {
    return DecodeImage(EncodeImage(image), shape, prompt, first_free);
  };
  ASSERT_OK_AND_ASSIGN(ImageAnnouncement image, decode({3, 77, 1, 8, 8}, 30, 0));
  EXPECT_EQ(image.key, 77u);
  EXPECT_EQ(PatchBytes(image, shape), 64 * 1176 * 4);
  EXPECT_ERROR_CONTAINS(decode({3, 77, 1, 8, 7}, 30, 0), "multiples of the merge");
  EXPECT_ERROR_CONTAINS(decode({3, 77, 1, 0, 8}, 30, 0), "positive sides");
  // Sides whose product overflows int64: refused on each side's bound first.
  EXPECT_ERROR_CONTAINS(decode({3, 77, 2147483646, 2147483646, 2147483646}, 30, 0), "at most");
  EXPECT_ERROR_CONTAINS(decode({15, 77, 1, 8, 8}, 30, 0), "inside the prompt");  // 16 tokens from 15 > 30
  EXPECT_ERROR_CONTAINS(decode({3, 77, 1, 8, 8}, 30, 4), "images in order");
  std::vector<std::byte> reserved = EncodeImage({3, 77, 1, 8, 8});
  reserved[28] = std::byte{1};
  EXPECT_ERROR_CONTAINS(DecodeImage(reserved, shape, 30, 0), "reserved");
  EXPECT_ERROR_CONTAINS(DecodeImage(std::span(reserved).first(20), shape, 30, 0), "an IMAGE of 20 bytes");
}

}  // namespace
}  // namespace glint::server
