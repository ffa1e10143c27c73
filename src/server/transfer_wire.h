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
#include "model/cache_layout.h"
#include "server/transfer_auth.h"

namespace glint::server {

// 2: a prompt's images travel after PROMPT (IMAGE + PATCHES each, then END); the state goes one LAYER frame per
// layer, each sent as soon as the prompt's last chunk has passed that layer (SLOT and BLOCKS are gone).
// 3: HELLO carries a fresh nonce and an "authenticates" flag; with a shared secret both sides send an AUTH proof
// after the HELLOs (server/transfer_auth.h).
// 4: HELLO's flag bit 2 says the layout has the MTP layer's cache (--speculative mtp); with it, MTP (that cache's
// rows) and HIDDEN (the last prompt position's hidden state) follow the last LAYER.
inline constexpr uint32_t kStateTransferVersion = 4;

// What the bytes of a snapshot mean: both sides must agree on every field.
struct TransferLayout {
  uint64_t fingerprint = 0;  // PrefixDiskFingerprint: the model directory and every field of the cache layout
  int64_t slot_bytes = 0, block_bytes = 0, block_tokens = 0, vocab = 0;
  int64_t max_tokens = 0;     // the longest prompt the prefill side takes (its max_model_len − 1)
  bool takes_images = false;  // the prefill side has a vision tower (bit 0 of HELLO's flags)
  // [layers] where each layer's state lies (LayerRegions of the cache layout the fingerprint covers): what a LAYER
  // frame of that layer holds, in that order, slot ranges first and then each block's.
  std::vector<std::vector<CacheRegion>> layers;
  bool mtp = false;  // the layout has the MTP layer's cache: --speculative mtp (bit 2 of HELLO's flags)
  // Our own side only (not in HELLO: the fingerprint covers them). With `mtp`: what the MTP frame holds (MtpRegions,
  // in the same order as a LAYER's), and the HIDDEN frame's fp32 values (the model's hidden size).
  std::vector<CacheRegion> mtp_regions;
  int64_t hidden_size = 0;
  std::string Describe() const;
  bool SameBytes(const TransferLayout& other) const;  // all but max_tokens and takes_images
};

enum class FrameType : uint32_t {
  kHello = 1,
  kPrompt = 2,
  kState = 3,
  // 4 and 5 were SLOT and BLOCKS (version 1): refused as unknown.
  kLogits = 6,
  kEnd = 7,
  kError = 8,
  kImage = 9,     // decode → prefill: where one image of the prompt sits, its grid and its prefix-cache key
  kPatches = 10,  // decode → prefill: that image's preprocessed patches (fp32), as the tower takes them
  kLayer = 11,    // prefill → decode: one layer's state (LayerFrameBytes), layers in order
  kAuth = 12,     // both, after the HELLOs when they authenticate: HMAC-SHA256 proof of the shared secret
  kMtp = 13,      // prefill → decode, with the MTP layer: its cache rows (MtpFrameBytes), after the last LAYER
  kHidden = 14,   // prefill → decode, with the MTP layer: the last prompt position's hidden state (fp32), after MTP
};
const char* FrameName(FrameType type);

inline constexpr size_t kFrameHeaderBytes = 32;
inline constexpr size_t kHelloBytes = 88;
inline constexpr size_t kStateBytes = 32;
inline constexpr size_t kImageBytes = 32;
inline constexpr int64_t kMaxErrorBytes = 4096;

struct FrameHeader {
  FrameType type = FrameType::kError;
  uint64_t length = 0;
  uint64_t checksum = 0;  // XXH3-64 of the body
};

// A frame's header bytes; and the checks a reader makes of received ones (magic, header checksum, a known type).
// The body may come in two pieces (`prefix` then `body`: a LAYER's index before the engine's bytes, uncopied).
std::array<std::byte, kFrameHeaderBytes> EncodeFrameHeader(FrameType type, std::span<const std::byte> body,
                                                           std::span<const std::byte> prefix = {});
Result<FrameHeader> DecodeFrameHeader(std::span<const std::byte, kFrameHeaderBytes> bytes);
// DataLoss naming the region when `body` does not match the header's checksum.
Status CheckFrameBody(const FrameHeader& header, std::span<const std::byte> body);

// HELLO: version, flags (bit 0: takes images, bit 1: authenticates, bit 2: the MTP layer's cache), fingerprint,
// sizes, then the sender's fresh nonce. Decoding refuses another size or version, or an unknown flag.
struct Hello {
  TransferLayout layout;
  bool authenticates = false;  // the sender holds a --transfer-secret-file: AUTH frames follow the HELLOs
  TransferNonce nonce{};
};
std::vector<std::byte> EncodeHello(const Hello& hello);
Result<Hello> DecodeHello(std::span<const std::byte> body);

// STATE: what the regions that follow hold. Decoding checks it against what this prompt and layout must give, so
// no region is read (or allocated) at a size the layout does not fix.
struct StateAnnouncement {
  int64_t tokens = 0, slot_bytes = 0, block_bytes = 0, logits = 0;
};
std::vector<std::byte> EncodeState(const StateAnnouncement& state);
Result<StateAnnouncement> DecodeState(std::span<const std::byte> body, int64_t prompt_tokens,
                                      const TransferLayout& layout);

// LAYER: layer index (u32), 0 (u32), then the layer's bytes. Its length for a prompt whose positions lie in `blocks`
// blocks (known before the body is read); its 8-byte prefix; and the body checked (length, index, reserved) and
// copied into `slot` (slot_bytes) and `blocks` (blocks × block_bytes) at the layout's places.
inline constexpr size_t kLayerPrefixBytes = 8;
int64_t LayerFrameBytes(const TransferLayout& layout, int64_t layer, int64_t blocks);
std::array<std::byte, kLayerPrefixBytes> EncodeLayerPrefix(int64_t layer);
Status UnpackLayer(std::span<const std::byte> body, const TransferLayout& layout, int64_t layer,
                   std::span<std::byte> slot, std::span<std::byte> blocks);

// MTP: the MTP layer's cache rows of the prompt's pairs (h_p, x_{p+1}), p < tokens − 1 — its slot ranges, then each
// block's, as a LAYER's without the prefix. Its length for a prompt in `blocks` blocks (0 without the MTP layer),
// and the body checked and copied into `slot` and `blocks` at the layout's places.
int64_t MtpFrameBytes(const TransferLayout& layout, int64_t blocks);
Status UnpackMtp(std::span<const std::byte> body, const TransferLayout& layout, std::span<std::byte> slot,
                 std::span<std::byte> blocks);
// HIDDEN: hidden_size fp32 values, the trunk's final normed hidden state at the last prompt position (0 bytes
// without the MTP layer).
int64_t HiddenFrameBytes(const TransferLayout& layout);

// IMAGE: one image of the prompt, as the decode server's HTTP layer preprocessed it (docs/disaggregation.md
// "Images"). Its patches follow in a PATCHES frame of exactly PatchBytes() bytes.
struct ImageAnnouncement {
  int64_t start = 0;  // its first placeholder position in the prompt
  uint64_t key = 0;   // prefix-cache key: XXH3-64 of the image's encoded bytes
  int32_t grid_t = 0, grid_h = 0, grid_w = 0;
  int64_t Patches() const { return int64_t{grid_t} * grid_h * grid_w; }
};
// What the prefill server's vision tower takes: spatial_merge_size and values per patch row (C · T · P · P).
struct ImageShape {
  int64_t merge = 0, patch_values = 0;
};
std::vector<std::byte> EncodeImage(const ImageAnnouncement& image);
// Checks the grid against `shape` (positive, divisible by the merge, at most kMaxVisionPatches) and the image's
// placeholders against the prompt: they start at or after `first_free` (images in order, not overlapping) and end
// inside the prompt of `prompt_tokens`. So the patches that follow are bounded by the prompt itself: at most
// prompt_tokens · merge² rows, the same order as the state that comes back for it.
Result<ImageAnnouncement> DecodeImage(std::span<const std::byte> body, const ImageShape& shape, int64_t prompt_tokens,
                                      int64_t first_free);
// The PATCHES body of `image` under `shape`: Patches() · patch_values fp32 values.
int64_t PatchBytes(const ImageAnnouncement& image, const ImageShape& shape);

}  // namespace glint::server
