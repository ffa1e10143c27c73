// Authentication of the prefill/decode transfer plane (docs/disaggregation.md "Authentication"): both servers hold
// the same secret (--transfer-secret-file) and prove it to each other in the handshake, without sending it.
//
//   decode → prefill   HELLO  … nonce Nd (32 random bytes), flag "authenticates"
//   prefill → decode   HELLO  … nonce Np, flag "authenticates";  AUTH  HMAC-SHA256(secret, "prefill" ‖ Hd ‖ Hp)
//   decode → prefill   AUTH   HMAC-SHA256(secret, "decode" ‖ Hd ‖ Hp)
//
// Hd and Hp are the two HELLO bodies as sent: each proof covers both fresh nonces (a recorded proof is worth nothing
// on another connection), both sides' layouts and flags (a relay cannot alter them unseen), and the role of its
// sender (a proof cannot be reflected back to the side that made it). Each side checks the other's proof (in
// constant time) before it sends or takes anything of a prompt. This authenticates the peers and the handshake; it
// does not encrypt: the prompts and states still cross the wire in clear (TLS would, at the cost of a second
// dependency in the handshake and a copy of every byte through it: see the docs).
//
// HMAC-SHA256 and the nonces' randomness come from OpenSSL's libcrypto (Debian libssl-dev): a hand-written hash
// or random source is exactly what such code must not be.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace glint::server {

inline constexpr size_t kTransferNonceBytes = 32;
inline constexpr size_t kTransferProofBytes = 32;  // HMAC-SHA256
using TransferNonce = std::array<std::byte, kTransferNonceBytes>;
using TransferProof = std::array<std::byte, kTransferProofBytes>;

// 32 bytes from the operating system's random source (via libcrypto); an error if it has none.
Result<TransferNonce> FreshNonce();

// Which side makes a proof: the label that keeps a proof from being reflected to the other side.
enum class TransferSide { kPrefill, kDecode };

// The shared secret, read from a file that only its owner may read. Never logged, never on the command line.
class TransferSecret {
 public:
  inline static constexpr size_t kMinBytes = 16, kMaxBytes = 4096;
  // The file's bytes, trailing whitespace (a final newline) removed: refused when group or others have any
  // permission on it (whoever reads it can have prompts prefilled and read their states), when it is not a regular
  // file, or when it holds fewer than kMinBytes or more than kMaxBytes.
  static Result<TransferSecret> Load(const std::string& path);
  // A secret from bytes (tests).
  static Result<TransferSecret> FromBytes(std::span<const std::byte> bytes);
  ~TransferSecret();
  TransferSecret(TransferSecret&& other) noexcept = default;
  TransferSecret& operator=(TransferSecret&& other) noexcept = default;
  TransferSecret(const TransferSecret&) = delete;
  TransferSecret& operator=(const TransferSecret&) = delete;

  // `side`'s proof over the two HELLO bodies as sent (the decode server's first).
  TransferProof Prove(TransferSide side, std::span<const std::byte> decode_hello,
                      std::span<const std::byte> prefill_hello) const;
  // Whether `proof` is `side`'s (compared in constant time).
  bool Verify(TransferSide side, std::span<const std::byte> decode_hello, std::span<const std::byte> prefill_hello,
              std::span<const std::byte> proof) const;

 private:
  TransferSecret() = default;
  std::vector<unsigned char> key_;  // wiped on destruction
};

}  // namespace glint::server
