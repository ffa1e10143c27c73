// The transfer plane of prefill/decode disaggregation (server/state_transfer.h) on loopback, with two engines on the
// golden tiny-dense model: the fetched state is byte for byte what the prefill engine exports; a fingerprint
// mismatch is refused with a message naming both; a peer that never answers ends the fetch at its deadline; a byte
// flipped in flight (through a relay) fails the region's checksum and a connection cut halfway fails the fetch —
// nothing is returned from either; the prefill engine holds no slot afterwards in every case; frame headers that are
// not the protocol's are refused; each transfer's phases are recorded on both sides and sum to its total; with a
// shared secret, peers that hold it transfer and any other (another secret, none, a hostile guesser) is refused on
// both sides, counted; the secret file is taken only when its owner alone may read it; with the MTP layer on both
// sides its rows and the last position's hidden row travel and the decode server drafts as a local run does, and a
// pair with it on one side only is refused naming the flag; the MTP and HIDDEN frames are sized by the layout.
#include "server/state_transfer.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
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

// The state of `prompt` (with `images`, run by `tower`) exported by an engine of its own (with `speculative`, one
// that runs the MTP layer).
SequenceSnapshot OwnExport(const Model& model, const std::vector<int32_t>& prompt,
                           const std::vector<RequestImage>& images = {}, ImageEncoder* tower = nullptr,
                           bool speculative = false) {
  auto own = EngineCore::Create(model, testing::SizedOptions(model, 2, 40, 8, speculative), nullptr, tower).value();
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
  EXPECT_TRUE(fetched.hidden == expected.hidden);
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
  // (The refusal closes the connection with the patches unread: a write after that fails, and the sender then reads
  // the ERROR that came first.)
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
  // What flows back: HELLO (32 + 88 bytes), STATE (32 + 32), layer 0's LAYER header (32), its bytes, layer 1's...
  constexpr int64_t kLayerStart = 120 + 64 + 32;
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

// A greedy generation of 8 tokens of `prompt` through `backend`, its state from the prefill server at `from` ("":
// none).
Result<std::vector<int32_t>> Generate(EngineBackend& backend, const std::vector<int32_t>& prompt,
                                      const std::string& from) {
  auto sink = std::make_shared<TokenSink>();
  GenerationRequest request;
  request.prompt = prompt;
  request.sampling.temperature = 0;
  request.max_tokens = 8;
  request.sink = sink;
  request.prefill_from = from;
  GLINT_RETURN_IF_ERROR(backend.Submit(std::move(request)).status());
  return sink->Wait();
}

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
  const int64_t cut = 120 + 64 + 32 + LayerFrameBytes(layout_, 0, 4) + 32 + 100;
  EngineBackend plain(*decode);
  ASSERT_OK_AND_ASSIGN(const std::vector<int32_t> expected, Generate(plain, prompt_, ""));
  ASSERT_EQ(expected.size(), 8u);
  for (const bool fail : {true, false}) {
    EngineBackend backend(*decode, DecodeRole{layout_, timeouts_, 0, fail, nullptr});
    int port = 0;
    const int listener = Listen(port);
    std::thread relay(Relay, listener, server_->port(), -1, cut);
    const Result<std::vector<int32_t>> got = Generate(backend, prompt_, Address(port));
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

// The engine's metrics once `finished` requests have finished (published at the end of its round: waited for).
EngineMetrics MetricsAfter(const Engine& engine, int64_t finished) {
  for (int i = 0; i < 500 && engine.Metrics().requests_finished < finished; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return engine.Metrics();
}

TEST_F(StateTransfer, WithTheMtpLayerItsRowsAndTheLastHiddenRowTravel) {
  // Both servers with --speculative mtp: the fetched state is an own export's byte for byte (the MTP layer's rows in
  // the slot and blocks, the last prompt position's hidden row), and the decode server's whole path gives the tokens
  // of a local run and verifies the same drafts (the first one right after the imported prompt).
  const EngineOptions spec = testing::SizedOptions(*model_, 2, 40, 8, /*speculative=*/true);
  auto prefill = Engine::Start(*model_, spec).value();
  const TransferLayout layout = LayoutOf(*prefill, 0x600d);
  ASSERT_TRUE(layout.mtp);
  EXPECT_FALSE(layout_.mtp);
  auto server = TransferServer::Start("127.0.0.1", 0, *prefill, layout, timeouts_).value();
  ASSERT_OK_AND_ASSIGN(SequenceSnapshot fetched, FetchState(Address(server->port()), prompt_, {}, layout, timeouts_));
  EXPECT_EQ(static_cast<int64_t>(fetched.hidden.size()), model_->config().hidden_size);
  ExpectSameState(fetched, OwnExport(*model_, prompt_, {}, nullptr, /*speculative=*/true));

  auto local = Engine::Start(*model_, spec).value(), decode = Engine::Start(*model_, spec).value();
  EngineBackend plain(*local);
  ASSERT_OK_AND_ASSIGN(const std::vector<int32_t> expected, Generate(plain, prompt_, ""));
  EngineBackend backend(*decode, DecodeRole{layout, timeouts_, 0, /*fail_without_prefill=*/true, nullptr});
  EXPECT_EQ(Generate(backend, prompt_, Address(server->port())).value(), expected);
  EXPECT_EQ(backend.Metrics().pd_transfers, 1);
  const EngineMetrics ours = MetricsAfter(*decode, 1), theirs = MetricsAfter(*local, 1);
  EXPECT_GT(ours.spec_drafts, 0);
  EXPECT_EQ(ours.spec_drafts, theirs.spec_drafts);
  EXPECT_EQ(ours.spec_draft_tokens, theirs.spec_draft_tokens);
  EXPECT_EQ(ours.spec_accepted_tokens, theirs.spec_accepted_tokens);
  EXPECT_EQ(ours.prompt_tokens_computed, 0);
  ExpectEngineFree(*decode);

  // The MTP layer on one side only: refused on both sides, naming the flag to set.
  EXPECT_ERROR_CONTAINS(FetchState(Address(server_->port()), prompt_, {}, layout, timeouts_),
                        "start both servers with --speculative mtp");
  EXPECT_ERROR_CONTAINS(FetchState(Address(server->port()), prompt_, {}, layout_, timeouts_),
                        "start both servers with --speculative mtp");
  EXPECT_EQ(server->transfers(), 2);  // the fetch and the decode server's
  EXPECT_EQ(server_->transfers(), 0);
}

// Each phase was observed `count` times, and the phases' sums add up to the total's (each transfer's phases are laps
// of one clock, so they sum to its total exactly; the sums here are of doubles).
void ExpectPhasesAddUp(const std::vector<std::pair<std::string, HistogramFigures>>& phases,
                       std::span<const char* const> names, int64_t count) {
  ASSERT_EQ(phases.size(), names.size() + 1);
  double sum = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(phases[i].first, names[i]);
    EXPECT_EQ(phases[i].second.count, count) << names[i];
    EXPECT_GE(phases[i].second.sum, 0) << names[i];
    sum += phases[i].second.sum;
  }
  EXPECT_EQ(phases.back().first, "total");
  EXPECT_EQ(phases.back().second.count, count);
  EXPECT_EQ(phases.back().second.sum > 0, count > 0);
  EXPECT_LE(sum, phases.back().second.sum * (1 + 1e-9));
  EXPECT_GE(sum, phases.back().second.sum * (1 - 1e-9));
}

TEST_F(StateTransfer, EachTransfersPhasesAreRecordedOnBothSidesAndAddUpToItsTotal) {
  auto decode = Engine::Start(*model_, testing::SizedOptions(*model_, 2, 40, 8)).value();
  EngineBackend backend(*decode, DecodeRole{layout_, timeouts_, 0, true, nullptr});
  ExpectPhasesAddUp(backend.Metrics().pd_decode_phases, kDecodePhaseNames, 0);
  for (int i = 0; i < 2; ++i) ASSERT_OK(Generate(backend, prompt_, Address(server_->port())).status());
  EXPECT_EQ(backend.Metrics().pd_transfers, 2);
  // Observed as each first token went out, before the request finished.
  ExpectPhasesAddUp(backend.Metrics().pd_decode_phases, kDecodePhaseNames, 2);
  // The prefill server observes its phases once END is written: the decode side may have finished before.
  for (int i = 0; i < 500 && server_->phases().back().second.count < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ExpectPhasesAddUp(server_->phases(), kPrefillPhaseNames, 2);
  // A local prefill (no transfer) observes nothing; nor does a role without transfers.
  ASSERT_OK(Generate(backend, prompt_, "").status());
  EXPECT_EQ(backend.Metrics().pd_decode_phases.back().second.count, 2);
  EXPECT_TRUE(EngineBackend(*decode).Metrics().pd_decode_phases.empty());
  ExpectEngineFree(*decode);
}

TransferSecret Secret(std::string_view text) {
  return TransferSecret::FromBytes(std::as_bytes(std::span(text))).value();
}

// Waits (at most 5 s) until the prefill server counted `count` authentication failures: it counts after it answered.
void ExpectAuthenticationFailures(const TransferServer& server, int64_t count) {
  for (int i = 0; i < 500 && server.authentication_failures() < count; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server.authentication_failures(), count);
}

TEST_F(StateTransfer, PeersWithTheSameSecretTransferAndAnyOtherIsRefusedOnBothSides) {
  auto secret = std::make_shared<const TransferSecret>(Secret("the shared secret of this test"));
  const TransferSecret other = Secret("another secret, just as long");
  auto server = TransferServer::Start("127.0.0.1", 0, *prefill_, layout_, timeouts_, nullptr, secret).value();
  const std::string address = Address(server->port());
  ASSERT_OK_AND_ASSIGN(SequenceSnapshot fetched, FetchState(address, prompt_, {}, layout_, timeouts_, secret.get()));
  ExpectSameState(fetched, OwnExport(*model_, prompt_));
  // Another secret: the decode side refuses the prefill server's proof, and tells it, which counts it too.
  TransferTrace trace;
  EXPECT_ERROR_CONTAINS(FetchState(address, prompt_, {}, layout_, timeouts_, &other, &trace),
                        "authentication failed: the prefill server's proof does not match");
  EXPECT_TRUE(trace.authentication_failed);
  ExpectAuthenticationFailures(*server, 1);
  // No secret: the prefill server refuses from the HELLO.
  EXPECT_ERROR_CONTAINS(FetchState(address, prompt_, {}, layout_, timeouts_), "requires the shared secret");
  ExpectAuthenticationFailures(*server, 2);
  // A secret, and a prefill server without one: refused too (this decode server takes states from provers only).
  EXPECT_ERROR_CONTAINS(FetchState(Address(server_->port()), prompt_, {}, layout_, timeouts_, secret.get()),
                        "has no --transfer-secret-file");
  ExpectAuthenticationFailures(*server_, 1);
  // Through a decode server's whole path: counted, and with --pd-fallback fail the request fails saying why.
  auto decode = Engine::Start(*model_, testing::SizedOptions(*model_, 2, 40, 8)).value();
  EngineBackend backend(*decode, DecodeRole{layout_, timeouts_, 0, true,
                                            std::make_shared<const TransferSecret>(Secret("yet another secret here"))});
  EXPECT_ERROR_CONTAINS(Generate(backend, prompt_, address), "authentication failed");
  EXPECT_EQ(backend.Metrics().pd_authentication_failures, 1);
  ExpectAuthenticationFailures(*server, 3);
  EXPECT_EQ(server->transfers(), 1);
  ExpectEngineFree(*decode);
  ExpectPrefillFree();
}

// Writes one frame on a raw socket.
void WriteFrame(int fd, FrameType type, std::span<const std::byte> body) {
  const std::array<std::byte, kFrameHeaderBytes> header = EncodeFrameHeader(type, body);
  ASSERT_EQ(::write(fd, header.data(), header.size()), static_cast<ssize_t>(header.size()));
  ASSERT_EQ(::write(fd, body.data(), body.size()), static_cast<ssize_t>(body.size()));
}

// Reads one frame from a raw socket (at most 64 KiB of body); its type and body.
std::pair<FrameType, std::string> ReadFrame(int fd) {
  const auto read_exactly = [fd](void* out, size_t size) {
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::read(fd, static_cast<char*>(out) + done, size - done);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  };
  std::array<std::byte, kFrameHeaderBytes> bytes{};
  if (!read_exactly(bytes.data(), bytes.size())) return {FrameType::kError, "(closed)"};
  const Result<FrameHeader> header = DecodeFrameHeader(bytes);
  if (!header.ok() || header->length > (64u << 10)) return {FrameType::kError, "(bad header)"};
  std::string body(header->length, '\0');
  if (!read_exactly(body.data(), body.size())) return {FrameType::kError, "(closed)"};
  return {header->type, body};
}

TEST_F(StateTransfer, AHostilePeerWithoutTheSecretGetsNothingComputed) {
  // A client that says it authenticates, takes the prefill server's proof and answers with bytes of its own.
  auto secret = std::make_shared<const TransferSecret>(Secret("the shared secret of this test"));
  auto server = TransferServer::Start("127.0.0.1", 0, *prefill_, layout_, timeouts_, nullptr, secret).value();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(server->port()));
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  WriteFrame(fd, FrameType::kHello, EncodeHello({layout_, true, {}}));
  EXPECT_EQ(ReadFrame(fd).first, FrameType::kHello);
  EXPECT_EQ(ReadFrame(fd).first, FrameType::kAuth);
  const std::array<std::byte, kTransferProofBytes> guess{};
  WriteFrame(fd, FrameType::kAuth, guess);
  const auto [type, message] = ReadFrame(fd);
  EXPECT_EQ(type, FrameType::kError);
  EXPECT_NE(message.find("the decode server's proof does not match"), std::string::npos) << message;
  ::close(fd);
  ExpectAuthenticationFailures(*server, 1);
  EXPECT_EQ(prefill_->Metrics().computed_tokens, 0);  // no prompt was computed
}

TEST(TransferSecretFile, OnlyAFileItsOwnerAloneMayReadIsTaken) {
  const std::string dir = testing::MakeTempDir("transfer_secret");
  const std::string path = dir + "/secret";
  {
    std::ofstream file(path);
    file << "a secret of enough bytes\n";
  }
  ::chmod(path.c_str(), 0644);
  EXPECT_ERROR_CONTAINS(TransferSecret::Load(path), "chmod 600");
  ::chmod(path.c_str(), 0600);
  ASSERT_OK_AND_ASSIGN(TransferSecret loaded, TransferSecret::Load(path));
  // The final newline is not part of the secret: the same proofs as the bytes without it.
  const std::vector<std::byte> hello(88, std::byte{5});
  const TransferProof proof = loaded.Prove(TransferSide::kDecode, hello, hello);
  EXPECT_TRUE(Secret("a secret of enough bytes").Verify(TransferSide::kDecode, hello, hello, proof));
  // Not reflectable: a decode server's proof is not a prefill server's.
  EXPECT_FALSE(loaded.Verify(TransferSide::kPrefill, hello, hello, proof));
  {
    std::ofstream file(path);
    file << "short\n";
  }
  EXPECT_ERROR_CONTAINS(TransferSecret::Load(path), "a transfer secret of 5 bytes");
  EXPECT_ERROR_CONTAINS(TransferSecret::Load(dir), "not a regular file");
  EXPECT_ERROR_CONTAINS(TransferSecret::Load(dir + "/none"), "cannot open");
}

TEST(TransferPhases, LapsSumToTheTotalExactly) {
  PhaseLaps laps(3);
  const PhaseLaps::Clock::time_point start = PhaseLaps::Clock::now();
  laps.LapAt(0, start + std::chrono::microseconds(300));
  laps.LapAt(2, start + std::chrono::microseconds(1000));
  laps.LapAt(1, start + std::chrono::microseconds(900));  // stamped before the previous lap: empty
  laps.Split(2, 1, 200'000);
  laps.Split(0, 1, 1'000'000'000);  // at most what the phase holds
  EXPECT_EQ(laps.nanoseconds(0), 0);
  EXPECT_EQ(laps.nanoseconds(0) + laps.nanoseconds(1) + laps.nanoseconds(2), laps.total_nanoseconds());
  EXPECT_EQ(laps.nanoseconds(2), laps.total_nanoseconds() - laps.nanoseconds(1));
  EXPECT_NE(laps.Describe(std::array<const char*, 3>{"a", "b", "c"}).find("total"), std::string::npos);
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

TEST(StateTransferFrames, MtpAndHiddenFramesAreSizedByTheLayout) {
  // A layout of one DSA layer and the MTP layer (its filling pool at the slot's end, its latents and pooled keys
  // after the layer's in each block), 4 blocks.
  TransferLayout layout;
  layout.fingerprint = 7;
  layout.slot_bytes = 1024;
  layout.block_bytes = 512;
  layout.block_tokens = 8;
  layout.vocab = 100;
  layout.max_tokens = 63;
  layout.layers = {{{true, 0, 256}, {false, 0, 128}, {false, 128, 64}}};
  EXPECT_EQ(MtpFrameBytes(layout, 4), 0);
  EXPECT_EQ(HiddenFrameBytes(layout), 0);
  layout.mtp = true;
  layout.mtp_regions = {{true, 256, 256}, {false, 192, 128}, {false, 320, 64}};
  layout.hidden_size = 16;
  EXPECT_EQ(MtpFrameBytes(layout, 4), 256 + 4 * (128 + 64));
  EXPECT_EQ(HiddenFrameBytes(layout), 64);
  std::vector<std::byte> slot(1024), blocks(4 * 512), body(static_cast<size_t>(MtpFrameBytes(layout, 4)));
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<std::byte>(i % 251 + 1);
  ASSERT_OK(UnpackMtp(body, layout, slot, blocks));
  EXPECT_EQ(slot[256], body[0]);                  // the filling pool first
  EXPECT_EQ(blocks[512 + 192], body[256 + 192]);  // block 1's latents after block 0's regions
  EXPECT_EQ(blocks[3 * 512 + 320 + 63], body.back());
  EXPECT_EQ(slot[0], std::byte{0});  // the layer's own ranges untouched
  EXPECT_ERROR_CONTAINS(UnpackMtp(std::span(body).first(body.size() - 1), layout, slot, blocks),
                        "the MTP layer's rows of this prompt have");
  std::vector<std::byte> longer = body;
  longer.push_back(std::byte{0});
  EXPECT_ERROR_CONTAINS(UnpackMtp(longer, layout, slot, blocks), "an MTP frame of");
  EXPECT_ERROR_CONTAINS(UnpackMtp(body, layout, std::span(slot).first(512), blocks), "no room");
  TransferLayout plain = layout;
  plain.mtp = false;
  EXPECT_ERROR_CONTAINS(UnpackMtp(body, plain, slot, blocks), "no MTP layer");
  // HELLO: bit 2 says the sender lays out the MTP layer's cache; version 3 (before the MTP frames) is refused.
  ASSERT_OK_AND_ASSIGN(Hello hello, DecodeHello(EncodeHello({layout, false, {}})));
  EXPECT_TRUE(hello.layout.mtp);
  ASSERT_OK_AND_ASSIGN(hello, DecodeHello(EncodeHello({plain, false, {}})));
  EXPECT_FALSE(hello.layout.mtp);
  std::vector<std::byte> version3 = EncodeHello({plain, false, {}});
  version3[0] = std::byte{3};
  EXPECT_ERROR_CONTAINS(DecodeHello(version3), "transfer protocol version 3, this server speaks 4");
  EXPECT_EQ(std::string(FrameName(FrameType::kMtp)), "MTP");
  ASSERT_OK_AND_ASSIGN(FrameHeader header, DecodeFrameHeader(EncodeFrameHeader(FrameType::kHidden, body)));
  EXPECT_EQ(header.type, FrameType::kHidden);
  EXPECT_ERROR_CONTAINS(DecodeFrameHeader(EncodeFrameHeader(static_cast<FrameType>(15), body)),
                        "unknown frame type 15");
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
