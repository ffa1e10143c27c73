// The transfer plane of prefill/decode disaggregation (docs/disaggregation.md "Protocol"): a decode server asks a
// prefill server, over its own TCP connection, for the state of a sequence after its prompt.
//
//   decode → prefill   HELLO    version, fingerprint, slot/block/logit sizes of the decode engine, a fresh nonce
//   prefill → decode   HELLO    the same of the prefill engine (or ERROR, and close)
//   (with a shared secret: prefill → decode AUTH, decode → prefill AUTH: server/transfer_auth.h)
//                      either side refuses a layout that is not its own with ERROR naming both fingerprints
//   decode → prefill   PROMPT   the prompt's token ids
//                      IMAGE, PATCHES   per image of the prompt: where it sits, its grid and key; its patches
//                      END
//   prefill → decode   STATE    tokens, slot bytes, block bytes, logit count (checked before any body is read)
//                      LAYER × layers   each layer's state, sent as soon as the prompt's last chunk has passed it
//                      LOGITS, END      (every frame with its own XXH3-64)
//   or at any point    ERROR    a message (the prefill failed, the prompt was refused)
//
// Every frame: a 32-byte header (magic "GLPD", type, body length, XXH3-64 of the body, XXH3-64 of the header's
// first 24 bytes), then the body. A header is checked (magic, checksum, type, and a length within what that type
// may carry for this layout) before its body is read, so a hostile or confused peer cannot make the other side
// allocate more than the layout's own sizes; a body that fails its checksum ends the transfer. Every read and
// write has a deadline: a peer that stops answering ends the transfer with an error, never a hang.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "server/transfer_phases.h"
#include "server/transfer_wire.h"

namespace glint::server {

// The layout of `engine` with the model directory's fingerprint.
TransferLayout LayoutOf(const Engine& engine, uint64_t model_fingerprint);

struct TransferTimeouts {
  double connect_seconds = 5;
  double io_seconds = 60;        // each frame's read or write (a stalled peer)
  double prefill_seconds = 600;  // the prefill itself: from PROMPT to STATE
};

// Decode side: the state of `prompt` with its `images` (validated by the engine) computed by the prefill server at
// `address` ("host:port"). Errors name the server and what failed; nothing is returned unless every size, checksum
// and the fingerprint matched. `secret` (optional): the prefill server must prove it (and is given our proof);
// without one, a prefill server that authenticates is refused too.
// What a fetch tells besides its result (optional): the phases connect, handshake, send, prefill and stream lapped
// on `laps` (DecodePhase), and whether the peer failed authentication (or the two sides disagree on having a secret).
struct TransferTrace {
  PhaseLaps laps{kDecodePhaseNames.size()};
  bool authentication_failed = false;
};
Result<SequenceSnapshot> FetchState(const std::string& address, std::span<const int32_t> prompt,
                                    std::span<const RequestImage> images, const TransferLayout& layout,
                                    const TransferTimeouts& timeouts, const TransferSecret* secret = nullptr,
                                    TransferTrace* trace = nullptr);

struct TransferOverlap {
  int64_t bytes = 0, bytes_before_end = 0;
  double tail_seconds = 0;
};

// Prefill side: listens on `host`:`port` and answers each connection with an export from `engine`.
class TransferServer {
 public:
  // `vision`: the engine's vision tower config (null: it has none, and prompts with images are refused).
  // `secret`: every decode server must prove it (null: the plane does not authenticate, and refuses a decode server
  // that asks it to).
  static Result<std::unique_ptr<TransferServer>> Start(const std::string& host, int port, Engine& engine,
                                                       const TransferLayout& layout, const TransferTimeouts& timeouts,
                                                       const VisionConfig* vision = nullptr,
                                                       std::shared_ptr<const TransferSecret> secret = nullptr,
                                                       int max_connections = 8);
  ~TransferServer();  // stops accepting, waits for the transfers in flight (each bounded by its deadlines)
  TransferServer(const TransferServer&) = delete;
  TransferServer& operator=(const TransferServer&) = delete;
  int port() const { return port_; }
  int64_t transfers() const { return transfers_.load(); }  // states sent whole
  // The overlap of sending with computing, over those transfers: bytes sent, of which before the prefill ended, and
  // the seconds from each prefill's end to its last byte sent (also logged per transfer).
  TransferOverlap overlap() const;
  // Handshakes refused because the decode server could not prove the secret (or the two disagree on having one).
  int64_t authentication_failures() const;
  // Where the time of those transfers went (server/transfer_phases.h PrefillPhase), per phase and the total.
  std::vector<std::pair<std::string, HistogramFigures>> phases() const;

 private:
  struct Impl;
  TransferServer() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::atomic<int64_t> transfers_{0};
};

}  // namespace glint::server
