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
#include <thread>

#include "engine/engine.h"
#include "engine_checks.h"
#include "model/model.h"
#include "test_util.h"

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

TEST_F(StateTransfer, TheFetchedStateIsTheExport) {
  ASSERT_OK_AND_ASSIGN(SequenceSnapshot fetched, FetchState(Address(server_->port()), prompt_, layout_, timeouts_));
  // The same prompt exported by an engine of its own.
  auto own = EngineCore::Create(*model_, testing::SizedOptions(*model_, 2, 40, 8)).value();
  auto sink = std::make_shared<testing::Collector>();
  Request request = testing::Greedy(prompt_, 1, sink);
  request.export_state = true;
  ASSERT_OK(own->Add(1, std::move(request)));
  testing::RunToCompletion(*own);
  ASSERT_EQ(sink->outputs.size(), 1u);
  const SequenceSnapshot& expected = *sink->outputs[0].snapshot;
  EXPECT_EQ(fetched.tokens, expected.tokens);
  EXPECT_TRUE(fetched.slot == expected.slot);
  EXPECT_TRUE(fetched.blocks == expected.blocks);
  EXPECT_TRUE(fetched.logits == expected.logits);
  EXPECT_EQ(server_->transfers(), 1);
  ExpectPrefillFree();
}

TEST_F(StateTransfer, AnotherModelOrLayoutIsRefusedNamingBoth) {
  TransferLayout other = layout_;
  other.fingerprint ^= 0xff;
  const auto fetched = FetchState(Address(server_->port()), prompt_, other, timeouts_);
  EXPECT_ERROR_CONTAINS(fetched, "the model or cache layout differs");
  EXPECT_ERROR_CONTAINS(fetched, other.Describe());
  EXPECT_ERROR_CONTAINS(fetched, layout_.Describe());
  other = layout_;
  other.slot_bytes += 64;
  EXPECT_ERROR_CONTAINS(FetchState(Address(server_->port()), prompt_, other, timeouts_), "slot");
  EXPECT_EQ(server_->transfers(), 0);
  ExpectPrefillFree();
}

TEST_F(StateTransfer, APeerThatNeverAnswersEndsAtTheDeadline) {
  int port = 0;
  const int silent = Listen(port);  // accepts (the kernel does), never reads or writes
  const auto started = std::chrono::steady_clock::now();
  TransferTimeouts quick = timeouts_;
  quick.io_seconds = 0.3;
  EXPECT_ERROR_CONTAINS(FetchState(Address(port), prompt_, layout_, quick), "within 0.3 s");
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(3));
  ::close(silent);
  // Nobody listening: refused at once.
  EXPECT_ERROR_CONTAINS(FetchState(Address(port), prompt_, layout_, quick), "could not connect");
  EXPECT_ERROR_CONTAINS(FetchState("nowhere", prompt_, layout_, quick), "not host:port");
}

TEST_F(StateTransfer, AFlippedByteOrACutConnectionReturnsNothing) {
  // What flows back: HELLO (32 + 56 bytes), STATE (32 + 32), SLOT's header (32), then the slot's bytes.
  constexpr int64_t kSlotStart = 88 + 64 + 32;
  for (const auto& [flip, cut, message] :
       {std::tuple<int64_t, int64_t, const char*>{kSlotStart + 100, -1, "SLOT region"},
        {-1, kSlotStart + 1000, "could not receive SLOT"},
        {kSlotStart + layout_.slot_bytes + 40, -1, "BLOCKS region"}}) {
    int port = 0;
    const int listener = Listen(port);
    std::thread relay(Relay, listener, server_->port(), flip, cut);
    EXPECT_ERROR_CONTAINS(FetchState(Address(port), prompt_, layout_, timeouts_), message);
    relay.join();
    ::close(listener);
  }
  ExpectPrefillFree();
}

TEST(StateTransferFrames, HeadersThatAreNotTheProtocolsAreRefused) {
  const std::vector<std::byte> body(10, std::byte{7});
  std::array<std::byte, kFrameHeaderBytes> header = EncodeFrameHeader(FrameType::kSlot, body);
  ASSERT_OK_AND_ASSIGN(FrameHeader decoded, DecodeFrameHeader(header));
  EXPECT_EQ(decoded.type, FrameType::kSlot);
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
}

}  // namespace
}  // namespace glint::server
