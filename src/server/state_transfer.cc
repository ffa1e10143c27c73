#include "server/state_transfer.h"

#include <poll.h>

#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <cstring>
#include <list>
#include <optional>

#include "base/log.h"
#include "engine/prefix_disk.h"

namespace glint::server {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// One TCP connection whose every operation has a deadline: an asynchronous operation run on the connection's own
// io_context for at most that long; past it the socket is closed and the operation ends with an error.
class TransferConnection {
 public:
  TransferConnection() : socket_(io_) {}
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
    GLINT_RETURN_IF_ERROR(Run(seconds, result, "connect"));
    NoDelay();
    return Status::Ok();
  }
  // Frames go out as soon as they are written. With Nagle's algorithm on, a small frame written while the one
  // before is unacknowledged waits for that ACK, which the peer delays by up to 40 ms (Linux): measured, 0.04–0.08 s
  // of each transfer on the tiny model (docs/disaggregation.md "When it pays").
  void NoDelay() {
    boost::system::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
  }
  // A frame whose body is `prefix` then `body` (written without joining them).
  Status Write(FrameType type, std::span<const std::byte> body, double seconds,
               std::span<const std::byte> prefix = {}) {
    const std::array<std::byte, kFrameHeaderBytes> header = EncodeFrameHeader(type, body, prefix);
    boost::system::error_code result = asio::error::would_block;
    const std::array<asio::const_buffer, 3> buffers = {asio::buffer(header), asio::buffer(prefix.data(), prefix.size()),
                                                       asio::buffer(body.data(), body.size())};
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

// A HELLO as received: its fields, and its bytes (what the proofs cover).
struct ReceivedHello {
  Hello hello;
  std::array<std::byte, kHelloBytes> bytes{};
};

Result<ReceivedHello> ReceiveHello(TransferConnection& c, double seconds) {
  GLINT_ASSIGN_OR_RETURN(FrameHeader header, c.ReadHeader(seconds));
  if (header.type != FrameType::kHello || header.length != kHelloBytes) {
    return FailedPrecondition(c.Unexpected(header, FrameType::kHello, seconds));
  }
  ReceivedHello received;
  GLINT_RETURN_IF_ERROR(c.ReadBody(header, received.bytes, seconds));
  GLINT_ASSIGN_OR_RETURN(received.hello, DecodeHello(received.bytes));
  return received;
}

// Ours against theirs, checked once the peer is authenticated (if it must be): a mismatch names both.
Status SameLayout(const TransferLayout& ours, const TransferLayout& theirs) {
  if (theirs.SameBytes(ours)) return Status::Ok();
  if (theirs.mtp != ours.mtp) {  // the MTP layer's cache is in the layout of one side only
    return FailedPrecondition("this server ", ours.mtp ? "runs" : "does not run", " --speculative mtp and the other ",
                              theirs.mtp ? "does" : "does not",
                              ": start both servers with --speculative mtp, or neither (the MTP layer's cache is part "
                              "of the transferred state; this server has ",
                              ours.Describe(), ", the other has ", theirs.Describe(), ")");
  }
  return FailedPrecondition("the model or cache layout differs: this server has ", ours.Describe(), ", the other has ",
                            theirs.Describe());
}

// The peer's AUTH (an ERROR in its place: it refused ours), checked against `side`'s proof over the two HELLOs.
Status ReceiveProof(TransferConnection& c, const TransferSecret& secret, TransferSide side,
                    std::span<const std::byte> decode_hello, std::span<const std::byte> prefill_hello, double seconds) {
  GLINT_ASSIGN_OR_RETURN(FrameHeader header, c.ReadHeader(seconds));
  if (header.type != FrameType::kAuth || header.length != kTransferProofBytes) {
    return FailedPrecondition(c.Unexpected(header, FrameType::kAuth, seconds));
  }
  TransferProof proof{};
  GLINT_RETURN_IF_ERROR(c.ReadBody(header, proof, seconds));
  if (!secret.Verify(side, decode_hello, prefill_hello, proof)) {
    return FailedPrecondition("authentication failed: the ", side == TransferSide::kPrefill ? "prefill" : "decode",
                              " server's proof does not match this server's --transfer-secret-file (the two servers "
                              "hold different secrets)");
  }
  return Status::Ok();
}

// The decode side's handshake: HELLO both ways; with a secret, the prefill server's proof checked and ours sent; the
// layouts compared last. `authentication_failed`: set when the peer could not prove the secret or has none.
Result<TransferLayout> DecodeHandshake(TransferConnection& c, const TransferLayout& layout,
                                       const TransferSecret* secret, double seconds, bool& authentication_failed) {
  GLINT_ASSIGN_OR_RETURN(TransferNonce nonce, FreshNonce());
  const std::vector<std::byte> ours = EncodeHello({layout, secret != nullptr, nonce});
  GLINT_RETURN_IF_ERROR(c.Write(FrameType::kHello, ours, seconds));
  GLINT_ASSIGN_OR_RETURN(ReceivedHello theirs, ReceiveHello(c, seconds));
  if (secret != nullptr && !theirs.hello.authenticates) {
    authentication_failed = true;
    return FailedPrecondition("has no --transfer-secret-file: this decode server takes states only from a prefill ",
                              "server that proves the shared secret");
  }
  if (secret == nullptr && theirs.hello.authenticates) {  // a prefill server with a secret answers ERROR instead
    authentication_failed = true;
    return FailedPrecondition("authenticates with a shared secret; this decode server has no --transfer-secret-file");
  }
  if (secret != nullptr) {
    const Status proven = ReceiveProof(c, *secret, TransferSide::kPrefill, ours, theirs.bytes, seconds);
    if (!proven.ok()) {
      authentication_failed = true;
      const std::string refusal = "the decode server refused this prefill server's proof (different secrets?)";
      (void)c.Write(FrameType::kError, std::as_bytes(std::span(refusal)), seconds);
      return proven;
    }
    GLINT_RETURN_IF_ERROR(c.Write(FrameType::kAuth, secret->Prove(TransferSide::kDecode, ours, theirs.bytes), seconds));
  }
  GLINT_RETURN_IF_ERROR(SameLayout(layout, theirs.hello.layout));
  return theirs.hello.layout;
}

std::pair<std::string, std::string> SplitAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return {address, ""};
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, address.substr(colon + 1)};
}

// Reads a region frame of exactly `out.size()` bytes (checked before the body is read).
Status ReceiveRegion(TransferConnection& c, FrameType type, std::span<std::byte> out, double seconds) {
  GLINT_ASSIGN_OR_RETURN(FrameHeader header, c.ReadHeader(seconds));
  if (header.type != type || header.length != out.size()) {
    return FailedPrecondition(c.Unexpected(header, type, seconds), " (expected ", out.size(), " bytes)");
  }
  return c.ReadBody(header, out, seconds);
}

Result<SequenceSnapshot> ReceiveState(TransferConnection& c, std::span<const int32_t> prompt,
                                      const TransferLayout& layout, const TransferTimeouts& t, PhaseLaps& laps) {
  GLINT_ASSIGN_OR_RETURN(FrameHeader header, c.ReadHeader(t.prefill_seconds));
  laps.Lap(DecodePhase::kPrefill);
  if (header.type != FrameType::kState || header.length != kStateBytes) {
    return Unavailable(c.Unexpected(header, FrameType::kState, t.io_seconds));
  }
  std::array<std::byte, kStateBytes> body{};
  GLINT_RETURN_IF_ERROR(c.ReadBody(header, body, t.io_seconds));
  GLINT_ASSIGN_OR_RETURN(StateAnnouncement announced, DecodeState(body, static_cast<int64_t>(prompt.size()), layout));
  SequenceSnapshot s;
  s.tokens = announced.tokens;
  s.slot.resize(announced.slot_bytes);
  s.blocks.resize(announced.block_bytes);
  s.logits.resize(announced.logits);
  // One LAYER per layer, in order, each checked (size before its body, then its checksum) as it arrives; between
  // two of them the prefill server computes one layer of the prompt's last chunk. Nothing reaches the engine
  // before END.
  const int64_t blocks = announced.block_bytes / layout.block_bytes;
  std::vector<std::byte> layer;
  for (int64_t l = 0; l < static_cast<int64_t>(layout.layers.size()); ++l) {
    layer.resize(static_cast<size_t>(LayerFrameBytes(layout, l, blocks)));
    GLINT_RETURN_IF_ERROR(ReceiveRegion(c, FrameType::kLayer, layer, t.io_seconds).WithContext(StrCat("layer ", l)));
    GLINT_RETURN_IF_ERROR(UnpackLayer(layer, layout, l, s.slot, s.blocks));
  }
  if (layout.mtp) {  // the MTP layer's rows, then the hidden row of its last pair (this server runs that pair)
    layer.resize(static_cast<size_t>(MtpFrameBytes(layout, blocks)));
    GLINT_RETURN_IF_ERROR(ReceiveRegion(c, FrameType::kMtp, layer, t.io_seconds));
    GLINT_RETURN_IF_ERROR(UnpackMtp(layer, layout, s.slot, s.blocks));
    s.hidden.resize(static_cast<size_t>(layout.hidden_size));
    GLINT_RETURN_IF_ERROR(
        ReceiveRegion(c, FrameType::kHidden, std::as_writable_bytes(std::span(s.hidden)), t.io_seconds));
  }
  GLINT_RETURN_IF_ERROR(
      ReceiveRegion(c, FrameType::kLogits, std::as_writable_bytes(std::span(s.logits)), t.io_seconds));
  GLINT_RETURN_IF_ERROR(ReceiveRegion(c, FrameType::kEnd, {}, t.io_seconds));
  laps.Lap(DecodePhase::kStream);
  return s;
}

// A write that failed because the peer refused what it read and closed (with bytes of ours unread, so that our next
// write met its reset): the ERROR it sent first is still in our receive queue, and says why.
Status WithPeerError(TransferConnection& c, const Status& failed, double seconds) {
  Result<FrameHeader> header = c.ReadHeader(std::min(seconds, 1.0));
  if (!header.ok() || header->type != FrameType::kError) return failed;
  return FailedPrecondition(c.Unexpected(*header, FrameType::kError, seconds));
}

// The prompt's images after PROMPT: IMAGE and PATCHES each, then END. The patches travel rather than the encoded
// bytes: the prefill server's tower then takes exactly what this server's would (no second decoder, whose version
// could differ across hosts, and no image decoding on a plane without authentication).
Status SendImages(TransferConnection& c, std::span<const RequestImage> images, double seconds) {
  for (const RequestImage& image : images) {
    const VisionInput& input = *image.input;
    const ImageAnnouncement announced{image.start, image.key, input.grid_t, input.grid_h, input.grid_w};
    GLINT_RETURN_IF_ERROR(c.Write(FrameType::kImage, EncodeImage(announced), seconds));
    GLINT_RETURN_IF_ERROR(c.Write(FrameType::kPatches, std::as_bytes(std::span(input.patches)), seconds));
  }
  return c.Write(FrameType::kEnd, {}, seconds);
}

// What a decode server asks for: the prompt and its images.
struct PromptRequest {
  std::vector<int32_t> prompt;
  std::vector<RequestImage> images;
};

// One image after PROMPT: its IMAGE checked against the prompt and the tower before its PATCHES are read, so their
// size is bounded by the prompt's own placeholders. `first_free`: where the next image may start.
Result<RequestImage> ReceiveImage(TransferConnection& c, const FrameHeader& header, const VisionConfig* vision,
                                  int64_t prompt_tokens, int64_t first_free, double seconds) {
  if (vision == nullptr) return FailedPrecondition("the prompt has images but this prefill server has no vision tower");
  if (header.length != kImageBytes) return FailedPrecondition("an IMAGE of ", header.length, " bytes");
  std::array<std::byte, kImageBytes> body{};
  GLINT_RETURN_IF_ERROR(c.ReadBody(header, body, seconds));
  const ImageShape shape{vision->spatial_merge_size, vision->PatchValues()};
  GLINT_ASSIGN_OR_RETURN(ImageAnnouncement image, DecodeImage(body, shape, prompt_tokens, first_free));
  auto input = std::make_shared<VisionInput>();
  input->grid_t = image.grid_t;
  input->grid_h = image.grid_h;
  input->grid_w = image.grid_w;
  input->patches.resize(static_cast<size_t>(image.Patches() * shape.patch_values));
  GLINT_RETURN_IF_ERROR(
      ReceiveRegion(c, FrameType::kPatches, std::as_writable_bytes(std::span(input->patches)), seconds));
  return RequestImage{image.start, std::move(input), image.key};
}

// PROMPT (1 .. max_tokens tokens), then IMAGE + PATCHES per image up to END.
Result<PromptRequest> ReceivePrompt(TransferConnection& c, const TransferLayout& layout, const VisionConfig* vision,
                                    double seconds) {
  GLINT_ASSIGN_OR_RETURN(FrameHeader header, c.ReadHeader(seconds));
  const uint64_t tokens = header.length / sizeof(int32_t);
  if (header.type != FrameType::kPrompt || header.length % sizeof(int32_t) != 0 || tokens == 0 ||
      tokens > static_cast<uint64_t>(layout.max_tokens)) {
    return FailedPrecondition("expected a PROMPT of 1 .. ", layout.max_tokens, " tokens, got ", FrameName(header.type),
                              " of ", header.length, " bytes");
  }
  PromptRequest request;
  request.prompt.resize(tokens);
  GLINT_RETURN_IF_ERROR(c.ReadBody(header, std::as_writable_bytes(std::span(request.prompt)), seconds));
  const int64_t length = static_cast<int64_t>(tokens);
  int64_t first_free = 0;
  for (;;) {  // each image takes at least one prompt position past the last: at most `length` of them
    GLINT_ASSIGN_OR_RETURN(header, c.ReadHeader(seconds));
    if (header.type == FrameType::kEnd && header.length == 0) return request;
    if (header.type != FrameType::kImage) {
      return FailedPrecondition("expected IMAGE or END after PROMPT, got ", FrameName(header.type));
    }
    GLINT_ASSIGN_OR_RETURN(RequestImage image, ReceiveImage(c, header, vision, length, first_free, seconds));
    first_free = image.start + VisionTokenCount(*vision, *image.input);
    request.images.push_back(std::move(image));
  }
}

}  // namespace

TransferLayout LayoutOf(const Engine& engine, uint64_t model_fingerprint) {
  // The whole model's cache layout, whatever the ranks of this server hold of it (--tp > 1: their KDA heads): the
  // bytes on the wire, and so the fingerprint, are those of one rank (docs/disaggregation.md "Several ranks").
  const CacheLayout& whole = engine.transfer_layout();
  const CapacityReport& c = engine.capacity();
  TransferLayout layout;
  layout.fingerprint = PrefixDiskFingerprint(model_fingerprint, whole);
  layout.slot_bytes = whole.slot_bytes;
  layout.block_bytes = whole.block_bytes;
  layout.block_tokens = c.block_tokens;
  layout.vocab = engine.vocab_size();
  layout.max_tokens = c.max_model_len - 1;
  for (int64_t l = 0; l < static_cast<int64_t>(whole.layers.size()); ++l) {
    layout.layers.push_back(LayerRegions(whole, l));
  }
  layout.mtp = whole.has_mtp();
  layout.mtp_regions = MtpRegions(whole);
  layout.hidden_size = engine.hidden_size();
  return layout;
}

Result<SequenceSnapshot> FetchState(const std::string& address, std::span<const int32_t> prompt,
                                    std::span<const RequestImage> images, const TransferLayout& layout,
                                    const TransferTimeouts& t, const TransferSecret* secret, TransferTrace* trace) {
  TransferTrace own;
  TransferTrace& traced = trace != nullptr ? *trace : own;
  PhaseLaps& lap = traced.laps;
  const auto [host, port] = SplitAddress(address);
  if (host.empty() || port.empty()) return InvalidArgument("the prefill address '", address, "' is not host:port");
  TransferConnection c;
  const auto fail = [&](const Status& status) {
    return Status(status.code(), StrCat("prefill server ", address, ": ", status.message()));
  };
  Status step = c.Connect(host, port, t.connect_seconds);
  lap.Lap(DecodePhase::kConnect);
  Result<TransferLayout> theirs = step.ok()
                                      ? DecodeHandshake(c, layout, secret, t.io_seconds, traced.authentication_failed)
                                      : Result<TransferLayout>(step);
  if (!theirs.ok()) return fail(theirs.status());
  if (!images.empty() && !theirs->takes_images) {
    return fail(FailedPrecondition("has no vision tower: a prompt with images cannot be prefilled there"));
  }
  if (static_cast<int64_t>(prompt.size()) > theirs->max_tokens) {
    return fail(OutOfRange("takes prompts of at most ", theirs->max_tokens, " tokens; this one has ", prompt.size()));
  }
  lap.Lap(DecodePhase::kHandshake);
  step = c.Write(FrameType::kPrompt, std::as_bytes(prompt), t.io_seconds);
  if (step.ok()) step = SendImages(c, images, t.io_seconds);
  if (!step.ok()) return fail(WithPeerError(c, step, t.io_seconds));
  lap.Lap(DecodePhase::kSend);
  Result<SequenceSnapshot> state = ReceiveState(c, prompt, layout, t, lap);
  if (!state.ok()) return fail(state.status());
  return state;
}

struct TransferServer::Impl {
  Engine* engine = nullptr;
  TransferLayout layout;
  TransferTimeouts timeouts;
  std::optional<VisionConfig> vision;  // the engine's tower, if it has one
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
  std::atomic<int64_t> bytes_sent{0}, bytes_sent_before_end{0}, tail_nanoseconds{0};
  PhaseHistograms phases{kPrefillPhaseNames};    // of each state sent whole
  std::shared_ptr<const TransferSecret> secret;  // null: the plane does not authenticate
  std::atomic<int64_t> authentication_failures{0};

  void AcceptLoop();
  void Serve(TransferConnection& c);
  // HELLO both ways; with a secret, our proof sent and the decode server's checked; the layouts compared last.
  // `authentication_failed`: set when the peer could not prove the secret, or has none where we have one (or the
  // reverse).
  Status Handshake(TransferConnection& c, bool& authentication_failed);
  // Runs the prompt's prefill as an export that streams, and sends STATE, each LAYER as the engine hands it out,
  // LOGITS and END; laps the queue, compute and tail phases. An error with `peer_failed` set: a write failed (the
  // decode server); else the prefill failed.
  Status StreamState(TransferConnection& c, PromptRequest asked, bool& peer_failed, PhaseLaps& laps);
};

Result<std::unique_ptr<TransferServer>> TransferServer::Start(
    const std::string& host, int port, Engine& engine, const TransferLayout& layout, const TransferTimeouts& timeouts,
    const VisionConfig* vision, std::shared_ptr<const TransferSecret> secret, int max_connections) {
  std::unique_ptr<TransferServer> server(new TransferServer());
  server->impl_ = std::make_unique<Impl>();
  Impl& impl = *server->impl_;
  impl.engine = &engine;
  impl.layout = layout;
  impl.timeouts = timeouts;
  if (vision != nullptr) impl.vision = *vision;
  impl.layout.takes_images = vision != nullptr;  // said in HELLO: a decode server sends no image we cannot take
  impl.max_connections = max_connections;
  impl.secret = std::move(secret);
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

TransferOverlap TransferServer::overlap() const {
  return {impl_->bytes_sent.load(), impl_->bytes_sent_before_end.load(),
          static_cast<double>(impl_->tail_nanoseconds.load()) * 1e-9};
}

std::vector<std::pair<std::string, HistogramFigures>> TransferServer::phases() const { return impl_->phases.Figures(); }

int64_t TransferServer::authentication_failures() const { return impl_->authentication_failures.load(); }

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
    auto connection = std::make_shared<TransferConnection>();
    boost::system::error_code ec;
    acceptor.accept(connection->socket(), ec);
    if (ec) continue;
    connection->NoDelay();
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

namespace {

int64_t SteadyNanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The export's sink: notes when the prefill ended (its last output, on the engine thread) before queueing, so that
// the overlap of sending with computing can be told (what was sent before, how long the rest took after).
class StampingSink final : public RequestSink {
 public:
  void OnOutput(RequestOutput output) override {
    if (output.finish_reason != FinishReason::kNone) ended_ns_ = SteadyNanoseconds();
    queue_.OnOutput(std::move(output));
  }
  std::optional<RequestOutput> Pop(std::chrono::milliseconds timeout) { return queue_.Pop(timeout); }
  int64_t ended_ns() const { return ended_ns_.load(); }  // 0 while the prefill runs

 private:
  OutputQueue queue_;
  std::atomic<int64_t> ended_ns_{0};
};

// The prefill's laps: submitted → ended (stamped on the engine thread) is the queue and the compute, split by the
// engine's own clock (its first step to its end); then the tail, up to now (the last byte written).
void LapPrefill(PhaseLaps& laps, int64_t ended_ns, const std::optional<SequenceTimings>& timings) {
  laps.LapAt(static_cast<size_t>(PrefillPhase::kQueue),
             PhaseLaps::Clock::time_point(
                 std::chrono::duration_cast<PhaseLaps::Clock::duration>(std::chrono::nanoseconds(ended_ns))));
  if (timings && timings->first_scheduled > 0) {
    const double compute = timings->finished - timings->first_scheduled;
    laps.Split(static_cast<size_t>(PrefillPhase::kQueue), static_cast<size_t>(PrefillPhase::kCompute),
               static_cast<int64_t>(compute * 1e9));
  }
  laps.Lap(PrefillPhase::kTail);
}

}  // namespace

Status TransferServer::Impl::StreamState(TransferConnection& c, PromptRequest asked, bool& peer_failed,
                                         PhaseLaps& laps) {
  const double io = timeouts.io_seconds;
  const int64_t tokens = static_cast<int64_t>(asked.prompt.size());
  const int64_t layers = static_cast<int64_t>(layout.layers.size());
  const int64_t blocks = (tokens + layout.block_tokens - 1) / layout.block_tokens;
  auto sink = std::make_shared<StampingSink>();
  Request request;
  request.prompt = std::move(asked.prompt);
  request.images = std::move(asked.images);
  request.sampling.temperature = 0;
  request.stop.max_tokens = 1;
  request.export_state = true;
  request.stream_layers = true;
  request.sink = sink;
  GLINT_ASSIGN_OR_RETURN(RequestId id, engine->Submit(std::move(request)));
  laps.Lap(PrefillPhase::kHandshake);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeouts.prefill_seconds);
  int64_t sent = 0, sent_before_end = 0, layers_sent = 0;
  // A write that fails is the decode server's doing: the prefill is cancelled, nothing more is sent.
  const auto write = [&](FrameType type, std::span<const std::byte> body, std::span<const std::byte> prefix = {}) {
    Status status = c.Write(type, body, io, prefix);
    if (!status.ok()) {
      peer_failed = true;
      engine->Cancel(id);
      return status;
    }
    sent += static_cast<int64_t>(kFrameHeaderBytes + prefix.size() + body.size());
    if (sink->ended_ns() == 0) sent_before_end = sent;
    return status;
  };
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    std::optional<RequestOutput> out = sink->Pop(std::max(left, std::chrono::milliseconds(0)));
    if (!out) {
      engine->Cancel(id);
      return Unavailable("the prefill took longer than ", timeouts.prefill_seconds, " s");
    }
    if (out->layer != nullptr) {  // sent while the later layers compute
      const LayerState& state = *out->layer;
      if (state.layer != layers_sent || static_cast<int64_t>(state.bytes.size() + kLayerPrefixBytes) !=
                                            LayerFrameBytes(layout, state.layer, blocks)) {
        engine->Cancel(id);
        return InternalError("the engine streamed layer ", state.layer, " (", state.bytes.size(),
                             " bytes) where layer ", layers_sent, " was due");
      }
      if (layers_sent == 0) {
        const StateAnnouncement announced{tokens, layout.slot_bytes, blocks * layout.block_bytes, layout.vocab};
        GLINT_RETURN_IF_ERROR(write(FrameType::kState, EncodeState(announced)));
      }
      GLINT_RETURN_IF_ERROR(write(FrameType::kLayer, state.bytes, EncodeLayerPrefix(state.layer)));
      ++layers_sent;
      continue;
    }
    if (out->finish_reason == FinishReason::kNone) continue;
    if (out->snapshot == nullptr) return Unavailable("the prefill failed: ", out->error);
    if (layers_sent != layers) return InternalError("the engine streamed ", layers_sent, " of ", layers, " layers");
    const SequenceSnapshot& snapshot = *out->snapshot;
    if (static_cast<int64_t>(snapshot.mtp.size()) != MtpFrameBytes(layout, blocks) ||
        static_cast<int64_t>(snapshot.hidden.size() * sizeof(float)) != HiddenFrameBytes(layout)) {
      return InternalError("the engine exported ", snapshot.mtp.size(), " bytes of the MTP layer's rows and ",
                           snapshot.hidden.size(), " hidden values; this layout has ", MtpFrameBytes(layout, blocks),
                           " bytes and ", HiddenFrameBytes(layout) / 4, " values");
    }
    if (layout.mtp) {
      GLINT_RETURN_IF_ERROR(write(FrameType::kMtp, snapshot.mtp));
      GLINT_RETURN_IF_ERROR(write(FrameType::kHidden, std::as_bytes(std::span(snapshot.hidden))));
    }
    GLINT_RETURN_IF_ERROR(write(FrameType::kLogits, std::as_bytes(std::span(snapshot.logits))));
    GLINT_RETURN_IF_ERROR(write(FrameType::kEnd, {}));
    const double tail = static_cast<double>(SteadyNanoseconds() - sink->ended_ns()) * 1e-9;
    LapPrefill(laps, sink->ended_ns(), out->timings);
    ++*transfers;
    bytes_sent += sent;
    bytes_sent_before_end += sent_before_end;
    tail_nanoseconds += static_cast<int64_t>(tail * 1e9);
    phases.Observe(laps);
    LogInfo("transfer plane: the state of a ", tokens, "-token prompt, ", sent, " bytes in ", layers,
            " layer frames: ", sent_before_end, " sent before its prefill ended, the last byte ", tail, " s after it (",
            laps.Describe(kPrefillPhaseNames), ")");
    return Status::Ok();
  }
}

Status TransferServer::Impl::Handshake(TransferConnection& c, bool& authentication_failed) {
  const double io = timeouts.io_seconds;
  GLINT_ASSIGN_OR_RETURN(ReceivedHello theirs, ReceiveHello(c, io));
  if (secret != nullptr && !theirs.hello.authenticates) {
    authentication_failed = true;
    return FailedPrecondition("this prefill server requires the shared secret (--transfer-secret-file); the decode ",
                              "server has none");
  }
  if (secret == nullptr && theirs.hello.authenticates) {
    authentication_failed = true;
    return FailedPrecondition("this prefill server has no --transfer-secret-file; the decode server requires one");
  }
  GLINT_ASSIGN_OR_RETURN(TransferNonce nonce, FreshNonce());
  const std::vector<std::byte> ours = EncodeHello({layout, secret != nullptr, nonce});
  GLINT_RETURN_IF_ERROR(c.Write(FrameType::kHello, ours, io));
  if (secret != nullptr) {
    GLINT_RETURN_IF_ERROR(c.Write(FrameType::kAuth, secret->Prove(TransferSide::kPrefill, theirs.bytes, ours), io));
    const Status proven = ReceiveProof(c, *secret, TransferSide::kDecode, theirs.bytes, ours, io);
    authentication_failed = !proven.ok();
    GLINT_RETURN_IF_ERROR(proven);
  }
  return SameLayout(layout, theirs.hello.layout);
}

void TransferServer::Impl::Serve(TransferConnection& c) {
  PhaseLaps laps(kPrefillPhaseNames.size());
  const double io = timeouts.io_seconds;
  const auto refuse = [&](const Status& why) {
    LogWarning("transfer plane: ", why.message());
    const std::string text = why.message().substr(0, kMaxErrorBytes);
    (void)c.Write(FrameType::kError, std::as_bytes(std::span(text)), io);
  };
  bool authentication_failed = false;
  if (Status shaken = Handshake(c, authentication_failed); !shaken.ok()) {
    if (authentication_failed) ++authentication_failures;
    return refuse(shaken);
  }
  Result<PromptRequest> asked = ReceivePrompt(c, layout, vision ? &*vision : nullptr, io);
  if (!asked.ok()) return refuse(asked.status());
  // The prompt stays in this engine's prefix cache; its slot is free once its last layer went out.
  bool peer_failed = false;
  const Status streamed = StreamState(c, std::move(asked).value(), peer_failed, laps);
  if (streamed.ok()) return;
  if (peer_failed) {
    LogWarning("transfer plane: the decode server did not take the state: ", streamed.message());
  } else {
    refuse(streamed);
  }
}

}  // namespace glint::server
