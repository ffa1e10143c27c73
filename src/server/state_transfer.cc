#include "server/state_transfer.h"

#include <poll.h>
#include <xxhash.h>

#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <cstring>
#include <list>

#include "base/log.h"
#include "engine/prefix_disk.h"

namespace glint::server {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

constexpr uint32_t kMagic = 0x44504c47;  // "GLPD" read little-endian
constexpr size_t kHelloBytes = 56;
constexpr size_t kStateBytes = 32;

template <typename T>
void Put(std::vector<std::byte>& out, T value) {
  const auto* bytes = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof(T));
}
template <typename T>
T Get(std::span<const std::byte> bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

const char* FrameName(FrameType type) {
  switch (type) {
    case FrameType::kHello:
      return "HELLO";
    case FrameType::kPrompt:
      return "PROMPT";
    case FrameType::kState:
      return "STATE";
    case FrameType::kSlot:
      return "SLOT";
    case FrameType::kBlocks:
      return "BLOCKS";
    case FrameType::kLogits:
      return "LOGITS";
    case FrameType::kEnd:
      return "END";
    case FrameType::kError:
      return "ERROR";
  }
  return "?";
}

// One TCP connection whose every operation has a deadline: an asynchronous operation run on the connection's own
// io_context for at most that long; past it the socket is closed and the operation ends with an error.
class Connection {
 public:
  Connection() : socket_(io_) {}
  tcp::socket& socket() { return socket_; }

  Status Connect(const std::string& host, const std::string& port, double seconds) {
    tcp::resolver resolver(io_);
    boost::system::error_code result = asio::error::would_block;
    resolver.async_resolve(
        host, port, [&](const boost::system::error_code& ec, const tcp::resolver::results_type& found) {
          if (ec) {
            result = ec;
            return;
          }
          asio::async_connect(socket_, found,
                              [&](const boost::system::error_code& e, const tcp::endpoint&) { result = e; });
        });
    return Run(seconds, result, "connect");
  }
  Status Write(FrameType type, std::span<const std::byte> body, double seconds) {
    const std::array<std::byte, kFrameHeaderBytes> header = EncodeFrameHeader(type, body);
    boost::system::error_code result = asio::error::would_block;
    const std::array<asio::const_buffer, 2> buffers = {asio::buffer(header), asio::buffer(body.data(), body.size())};
    asio::async_write(socket_, buffers, [&](const boost::system::error_code& ec, size_t) { result = ec; });
    return Run(seconds, result, StrCat("send ", FrameName(type)));
  }
  Result<FrameHeader> ReadHeader(double seconds) {
    std::array<std::byte, kFrameHeaderBytes> bytes{};
    GLINT_RETURN_IF_ERROR(ReadBytes(bytes, seconds, "receive a frame header"));
    return DecodeFrameHeader(bytes);
  }
  // The body of `header` into `out` (its exact size), checked against the header's checksum.
  Status ReadBody(const FrameHeader& header, std::span<std::byte> out, double seconds) {
    GLINT_RETURN_IF_ERROR(ReadBytes(out, seconds, StrCat("receive ", FrameName(header.type))));
    return CheckFrameBody(header, out);
  }
  // An ERROR frame's message (bounded), or a description of the unexpected frame.
  std::string Unexpected(const FrameHeader& header, FrameType wanted, double seconds) {
    if (header.type != FrameType::kError || header.length > static_cast<uint64_t>(kMaxErrorBytes)) {
      return StrCat("expected ", FrameName(wanted), ", got ", FrameName(header.type), " of ", header.length, " bytes");
    }
    std::string text(header.length, '\0');
    const Status read = ReadBody(header, std::as_writable_bytes(std::span<char>(text)), seconds);
    return read.ok() ? text : read.message();
  }

 private:
  Status ReadBytes(std::span<std::byte> out, double seconds, const std::string& what) {
    boost::system::error_code result = asio::error::would_block;
    asio::async_read(socket_, asio::buffer(out.data(), out.size()),
                     [&](const boost::system::error_code& ec, size_t) { result = ec; });
    return Run(seconds, result, what);
  }
  Status Run(double seconds, boost::system::error_code& result, const std::string& what) {
    io_.restart();
    io_.run_for(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(seconds)));
    if (result == asio::error::would_block) {
      boost::system::error_code ignored;
      socket_.close(ignored);
      io_.restart();
      io_.run();  // the cancelled handlers complete (they reference this frame)
      return Unavailable("could not ", what, " within ", seconds, " s");
    }
    if (result) return Unavailable("could not ", what, ": ", result.message());
    return Status::Ok();
  }

  asio::io_context io_;
  tcp::socket socket_;
};

std::vector<std::byte> EncodeHello(const TransferLayout& l) {
  std::vector<std::byte> out;
  Put<uint32_t>(out, kStateTransferVersion);
  Put<uint32_t>(out, 0);
  Put<uint64_t>(out, l.fingerprint);
  for (int64_t v : {l.slot_bytes, l.block_bytes, l.block_tokens, l.vocab, l.max_tokens}) Put<int64_t>(out, v);
  return out;
}

Result<TransferLayout> DecodeHello(std::span<const std::byte> body) {
  if (Get<uint32_t>(body, 0) != kStateTransferVersion) {
    return FailedPrecondition("transfer protocol version ", Get<uint32_t>(body, 0), ", this server speaks ",
                              kStateTransferVersion);
  }
  TransferLayout l;
  l.fingerprint = Get<uint64_t>(body, 8);
  l.slot_bytes = Get<int64_t>(body, 16);
  l.block_bytes = Get<int64_t>(body, 24);
  l.block_tokens = Get<int64_t>(body, 32);
  l.vocab = Get<int64_t>(body, 40);
  l.max_tokens = Get<int64_t>(body, 48);
  return l;
}

// The other side's HELLO, checked against ours: a mismatch names both.
Result<TransferLayout> ReceiveHello(Connection& c, const TransferLayout& ours, double seconds) {
  GLINT_ASSIGN_OR_RETURN(FrameHeader header, c.ReadHeader(seconds));
  if (header.type != FrameType::kHello || header.length != kHelloBytes) {
    return FailedPrecondition(c.Unexpected(header, FrameType::kHello, seconds));
  }
  std::array<std::byte, kHelloBytes> body{};
  GLINT_RETURN_IF_ERROR(c.ReadBody(header, body, seconds));
  GLINT_ASSIGN_OR_RETURN(TransferLayout theirs, DecodeHello(body));
  if (!theirs.SameBytes(ours)) {
    return FailedPrecondition("the model or cache layout differs: this server has ", ours.Describe(),
                              ", the other has ", theirs.Describe());
  }
  return theirs;
}

std::pair<std::string, std::string> SplitAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return {address, ""};
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, address.substr(colon + 1)};
}

}  // namespace

std::string TransferLayout::Describe() const {
  return StrCat("fingerprint ", std::hex, fingerprint, std::dec, " (slot ", slot_bytes, " B, block ", block_bytes,
                " B of ", block_tokens, " tokens, vocabulary ", vocab, ")");
}

bool TransferLayout::SameBytes(const TransferLayout& o) const {
  return fingerprint == o.fingerprint && slot_bytes == o.slot_bytes && block_bytes == o.block_bytes &&
         block_tokens == o.block_tokens && vocab == o.vocab;
}

TransferLayout LayoutOf(const Engine& engine, uint64_t model_fingerprint) {
  const CapacityReport& c = engine.capacity();
  return {PrefixDiskFingerprint(model_fingerprint, engine.layout()),
          c.slot_bytes,
          c.block_bytes,
          c.block_tokens,
          engine.vocab_size(),
          c.max_model_len - 1};
}

std::array<std::byte, kFrameHeaderBytes> EncodeFrameHeader(FrameType type, std::span<const std::byte> body) {
  std::array<std::byte, kFrameHeaderBytes> header{};
  std::vector<std::byte> out;
  Put<uint32_t>(out, kMagic);
  Put<uint32_t>(out, static_cast<uint32_t>(type));
  Put<uint64_t>(out, body.size());
  Put<uint64_t>(out, XXH3_64bits(body.data(), body.size()));
  Put<uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  std::memcpy(header.data(), out.data(), header.size());
  return header;
}

Result<FrameHeader> DecodeFrameHeader(std::span<const std::byte, kFrameHeaderBytes> bytes) {
  if (Get<uint32_t>(bytes, 0) != kMagic) return FailedPrecondition("the peer does not speak the transfer protocol");
  if (Get<uint64_t>(bytes, 24) != XXH3_64bits(bytes.data(), 24)) {
    return DataLoss("a frame header failed its checksum");
  }
  const uint32_t type = Get<uint32_t>(bytes, 4);
  if (type < static_cast<uint32_t>(FrameType::kHello) || type > static_cast<uint32_t>(FrameType::kError)) {
    return FailedPrecondition("unknown frame type ", type);
  }
  return FrameHeader{static_cast<FrameType>(type), Get<uint64_t>(bytes, 8), Get<uint64_t>(bytes, 16)};
}

Status CheckFrameBody(const FrameHeader& header, std::span<const std::byte> body) {
  if (body.size() != header.length || XXH3_64bits(body.data(), body.size()) != header.checksum) {
    return DataLoss("the ", FrameName(header.type), " region (", body.size(), " bytes) failed its checksum");
  }
  return Status::Ok();
}

namespace {

// Reads a region frame of exactly `out.size()` bytes (checked before the body is read).
Status ReceiveRegion(Connection& c, FrameType type, std::span<std::byte> out, double seconds) {
  GLINT_ASSIGN_OR_RETURN(FrameHeader header, c.ReadHeader(seconds));
  if (header.type != type || header.length != out.size()) {
    return FailedPrecondition(c.Unexpected(header, type, seconds), " (expected ", out.size(), " bytes)");
  }
  return c.ReadBody(header, out, seconds);
}

Result<SequenceSnapshot> ReceiveState(Connection& c, std::span<const int32_t> prompt, const TransferLayout& layout,
                                      const TransferTimeouts& t) {
  GLINT_ASSIGN_OR_RETURN(FrameHeader header, c.ReadHeader(t.prefill_seconds));
  if (header.type != FrameType::kState || header.length != kStateBytes) {
    return Unavailable(c.Unexpected(header, FrameType::kState, t.io_seconds));
  }
  std::array<std::byte, kStateBytes> body{};
  GLINT_RETURN_IF_ERROR(c.ReadBody(header, body, t.io_seconds));
  SequenceSnapshot s;
  s.tokens = Get<int64_t>(body, 0);
  const int64_t slot = Get<int64_t>(body, 8), blocks = Get<int64_t>(body, 16), logits = Get<int64_t>(body, 24);
  const int64_t length = static_cast<int64_t>(prompt.size());
  const int64_t expected_blocks = (length + layout.block_tokens - 1) / layout.block_tokens * layout.block_bytes;
  if (s.tokens != length || slot != layout.slot_bytes || blocks != expected_blocks || logits != layout.vocab) {
    return FailedPrecondition("the state announced (", s.tokens, " tokens, ", slot, " slot bytes, ", blocks,
                              " block bytes, ", logits, " logits) is not that of this ", length, "-token prompt (",
                              layout.slot_bytes, ", ", expected_blocks, ", ", layout.vocab, ")");
  }
  s.slot.resize(slot);
  s.blocks.resize(blocks);
  s.logits.resize(logits);
  GLINT_RETURN_IF_ERROR(ReceiveRegion(c, FrameType::kSlot, s.slot, t.io_seconds));
  GLINT_RETURN_IF_ERROR(ReceiveRegion(c, FrameType::kBlocks, s.blocks, t.io_seconds));
  GLINT_RETURN_IF_ERROR(
      ReceiveRegion(c, FrameType::kLogits, std::as_writable_bytes(std::span(s.logits)), t.io_seconds));
  GLINT_RETURN_IF_ERROR(ReceiveRegion(c, FrameType::kEnd, {}, t.io_seconds));
  return s;
}

}  // namespace

Result<SequenceSnapshot> FetchState(const std::string& address, std::span<const int32_t> prompt,
                                    const TransferLayout& layout, const TransferTimeouts& t) {
  const auto [host, port] = SplitAddress(address);
  if (host.empty() || port.empty()) return InvalidArgument("the prefill address '", address, "' is not host:port");
  Connection c;
  const auto fail = [&](const Status& status) {
    return Status(status.code(), StrCat("prefill server ", address, ": ", status.message()));
  };
  Status step = c.Connect(host, port, t.connect_seconds);
  if (step.ok()) step = c.Write(FrameType::kHello, EncodeHello(layout), t.io_seconds);
  Result<TransferLayout> theirs = step.ok() ? ReceiveHello(c, layout, t.io_seconds) : Result<TransferLayout>(step);
  if (!theirs.ok()) return fail(theirs.status());
  if (static_cast<int64_t>(prompt.size()) > theirs->max_tokens) {
    return fail(OutOfRange("takes prompts of at most ", theirs->max_tokens, " tokens; this one has ", prompt.size()));
  }
  step = c.Write(FrameType::kPrompt, std::as_bytes(prompt), t.io_seconds);
  if (!step.ok()) return fail(step);
  Result<SequenceSnapshot> state = ReceiveState(c, prompt, layout, t);
  if (!state.ok()) return fail(state.status());
  return state;
}

struct TransferServer::Impl {
  Engine* engine = nullptr;
  TransferLayout layout;
  TransferTimeouts timeouts;
  int max_connections = 8;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::atomic<bool> stopping{false};
  std::atomic<int> active{0};
  std::thread accept_thread;
  std::mutex mutex;
  struct Handler {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<Handler> handlers;  // guarded by mutex; joined when done (AcceptLoop) or at the end
  std::atomic<int64_t>* transfers = nullptr;

  void AcceptLoop();
  void Serve(Connection& c);
  Result<std::shared_ptr<const SequenceSnapshot>> Export(std::vector<int32_t> prompt);
  Status SendState(Connection& c, const SequenceSnapshot& s);
};

Result<std::unique_ptr<TransferServer>> TransferServer::Start(const std::string& host, int port, Engine& engine,
                                                              const TransferLayout& layout,
                                                              const TransferTimeouts& timeouts, int max_connections) {
  std::unique_ptr<TransferServer> server(new TransferServer());
  server->impl_ = std::make_unique<Impl>();
  Impl& impl = *server->impl_;
  impl.engine = &engine;
  impl.layout = layout;
  impl.timeouts = timeouts;
  impl.max_connections = max_connections;
  impl.transfers = &server->transfers_;
  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) return InvalidArgument("the transfer plane's address '", host, "' is not an IP address");
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
  impl.acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl.acceptor.bind(endpoint, ec);
  if (!ec) impl.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("cannot listen on ", host, ":", port, " for the transfer plane: ", ec.message());
  server->port_ = impl.acceptor.local_endpoint().port();
  impl.accept_thread = std::thread([&impl] { impl.AcceptLoop(); });
  return server;
}

TransferServer::~TransferServer() {
  if (impl_ == nullptr) return;
  impl_->stopping = true;
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (Impl::Handler& handler : impl_->handlers) handler.thread.join();
}

void TransferServer::Impl::AcceptLoop() {
  // Polls so that the destructor's flag is seen within 200 ms (closing an acceptor another thread blocks in is not
  // safe with Asio).
  while (!stopping) {
    pollfd fd{acceptor.native_handle(), POLLIN, 0};
    if (::poll(&fd, 1, 200) <= 0) continue;
    auto connection = std::make_shared<Connection>();
    boost::system::error_code ec;
    acceptor.accept(connection->socket(), ec);
    if (ec) continue;
    if (active.load() >= max_connections) {
      const std::string busy = StrCat("busy: ", max_connections, " transfers in flight");
      (void)connection->Write(FrameType::kError, std::as_bytes(std::span(busy)), 1.0);
      continue;
    }
    ++active;
    std::lock_guard<std::mutex> lock(mutex);
    for (auto it = handlers.begin(); it != handlers.end();) {  // reap the finished ones
      if (!it->done->load()) {
        ++it;
        continue;
      }
      it->thread.join();
      it = handlers.erase(it);
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    handlers.push_back({std::thread([this, connection, done] {
                          Serve(*connection);
                          --active;
                          *done = true;
                        }),
                        done});
  }
}

Result<std::shared_ptr<const SequenceSnapshot>> TransferServer::Impl::Export(std::vector<int32_t> prompt) {
  auto queue = std::make_shared<OutputQueue>();
  Request request;
  request.prompt = std::move(prompt);
  request.sampling.temperature = 0;
  request.stop.max_tokens = 1;
  request.export_state = true;
  request.sink = queue;
  GLINT_ASSIGN_OR_RETURN(RequestId id, engine->Submit(std::move(request)));
  const auto limit =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(timeouts.prefill_seconds));
  std::optional<RequestOutput> out = queue->Pop(limit);
  if (!out) {
    engine->Cancel(id);
    return Unavailable("the prefill took longer than ", timeouts.prefill_seconds, " s");
  }
  if (out->snapshot == nullptr) return Unavailable("the prefill failed: ", out->error);
  return out->snapshot;
}

Status TransferServer::Impl::SendState(Connection& c, const SequenceSnapshot& s) {
  const double io = timeouts.io_seconds;
  std::vector<std::byte> state;
  for (int64_t v : {s.tokens, static_cast<int64_t>(s.slot.size()), static_cast<int64_t>(s.blocks.size()),
                    static_cast<int64_t>(s.logits.size())}) {
    Put<int64_t>(state, v);
  }
  GLINT_RETURN_IF_ERROR(c.Write(FrameType::kState, state, io));
  GLINT_RETURN_IF_ERROR(c.Write(FrameType::kSlot, s.slot, io));
  GLINT_RETURN_IF_ERROR(c.Write(FrameType::kBlocks, s.blocks, io));
  GLINT_RETURN_IF_ERROR(c.Write(FrameType::kLogits, std::as_bytes(std::span(s.logits)), io));
  return c.Write(FrameType::kEnd, {}, io);
}

void TransferServer::Impl::Serve(Connection& c) {
  const double io = timeouts.io_seconds;
  const auto refuse = [&](const Status& why) {
    LogWarning("transfer plane: ", why.message());
    const std::string text = why.message().substr(0, kMaxErrorBytes);
    (void)c.Write(FrameType::kError, std::as_bytes(std::span(text)), io);
  };
  Result<TransferLayout> theirs = ReceiveHello(c, layout, io);
  if (!theirs.ok()) return refuse(theirs.status());
  if (Status hello = c.Write(FrameType::kHello, EncodeHello(layout), io); !hello.ok()) return;
  Result<FrameHeader> header = c.ReadHeader(io);
  if (!header.ok()) return refuse(header.status());
  const uint64_t tokens = header->length / sizeof(int32_t);
  if (header->type != FrameType::kPrompt || header->length % sizeof(int32_t) != 0 || tokens == 0 ||
      tokens > static_cast<uint64_t>(layout.max_tokens)) {
    return refuse(FailedPrecondition("expected a PROMPT of 1 .. ", layout.max_tokens, " tokens, got ",
                                     FrameName(header->type), " of ", header->length, " bytes"));
  }
  std::vector<int32_t> prompt(tokens);
  if (Status read = c.ReadBody(*header, std::as_writable_bytes(std::span(prompt)), io); !read.ok()) {
    return refuse(read);
  }
  // The prompt stays in this engine's prefix cache; its slot is already free when the bytes go out.
  Result<std::shared_ptr<const SequenceSnapshot>> state = Export(std::move(prompt));
  if (!state.ok()) return refuse(state.status());
  const Status sent = SendState(c, **state);
  if (sent.ok()) {
    ++*transfers;
  } else {
    LogWarning("transfer plane: the decode server did not take the state: ", sent.message());
  }
}

}  // namespace glint::server
