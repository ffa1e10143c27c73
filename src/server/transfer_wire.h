// The bytes of the prefill/decode transfer plane (docs/disaggregation.md "Protocol"), apart from any socket or
// engine, so that a fuzzer can drive every parser: frame headers, HELLO and STATE bodies. server/state_transfer.h
// moves them over TCP.
//
// Every frame: a 32-byte header (magic "GLPD", type, body length, XXH3-64 of the body, XXH3-64 of the header's
// first 24 bytes), then the body, little-endian.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace glint::server {

inline constexpr uint32_t kStateTransferVersion = 1;

// What the bytes of a snapshot mean: both sides must agree on every field.
struct TransferLayout {
  uint64_t fingerprint = 0;  // PrefixDiskFingerprint: the model directory and every field of the cache layout
  int64_t slot_bytes = 0, block_bytes = 0, block_tokens = 0, vocab = 0;
  int64_t max_tokens = 0;  // the longest prompt the prefill side takes (its max_model_len − 1)
  std::string Describe() const;
  bool SameBytes(const TransferLayout& other) const;  // all but max_tokens
};

enum class FrameType : uint32_t {
  kHello = 1,
  kPrompt = 2,
  kState = 3,
  kSlot = 4,
  kBlocks = 5,
  kLogits = 6,
  kEnd = 7,
  kError = 8,
};
const char* FrameName(FrameType type);

inline constexpr size_t kFrameHeaderBytes = 32;
inline constexpr size_t kHelloBytes = 56;
inline constexpr size_t kStateBytes = 32;
inline constexpr int64_t kMaxErrorBytes = 4096;

struct FrameHeader {
  FrameType type = FrameType::kError;
  uint64_t length = 0;
  uint64_t checksum = 0;  // XXH3-64 of the body
};

// A frame's header bytes; and the checks a reader makes of received ones (magic, header checksum, a known type).
std::array<std::byte, kFrameHeaderBytes> EncodeFrameHeader(FrameType type, std::span<const std::byte> body);
Result<FrameHeader> DecodeFrameHeader(std::span<const std::byte, kFrameHeaderBytes> bytes);
// DataLoss naming the region when `body` does not match the header's checksum.
Status CheckFrameBody(const FrameHeader& header, std::span<const std::byte> body);

// HELLO: version, fingerprint and sizes. Decoding refuses another size or version.
std::vector<std::byte> EncodeHello(const TransferLayout& layout);
Result<TransferLayout> DecodeHello(std::span<const std::byte> body);

// STATE: what the regions that follow hold. Decoding checks it against what this prompt and layout must give, so
// no region is read (or allocated) at a size the layout does not fix.
struct StateAnnouncement {
  int64_t tokens = 0, slot_bytes = 0, block_bytes = 0, logits = 0;
};
std::vector<std::byte> EncodeState(const StateAnnouncement& state);
Result<StateAnnouncement> DecodeState(std::span<const std::byte> body, int64_t prompt_tokens,
                                      const TransferLayout& layout);

}  // namespace glint::server
