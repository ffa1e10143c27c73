#include "server/transfer_wire.h"

#include <xxhash.h>

#include <cstring>

#include "vision/tower.h"

namespace glint::server {
namespace {

constexpr uint32_t kMagic = 0x44504c47;  // "GLPD" read little-endian

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

}  // namespace

std::string TransferLayout::Describe() const {
  return StrCat("fingerprint ", std::hex, fingerprint, std::dec, " (slot ", slot_bytes, " B, block ", block_bytes,
                " B of ", block_tokens, " tokens, vocabulary ", vocab, mtp ? ", the MTP layer's cache" : "", ")");
}

bool TransferLayout::SameBytes(const TransferLayout& o) const {
  return fingerprint == o.fingerprint && slot_bytes == o.slot_bytes && block_bytes == o.block_bytes &&
         block_tokens == o.block_tokens && vocab == o.vocab && mtp == o.mtp;
}

const char* FrameName(FrameType type) {
  switch (type) {
    case FrameType::kHello:
      return "HELLO";
    case FrameType::kPrompt:
      return "PROMPT";
    case FrameType::kState:
      return "STATE";
    case FrameType::kLogits:
      return "LOGITS";
    case FrameType::kEnd:
      return "END";
    case FrameType::kError:
      return "ERROR";
    case FrameType::kImage:
      return "IMAGE";
    case FrameType::kPatches:
      return "PATCHES";
    case FrameType::kLayer:
      return "LAYER";
    case FrameType::kAuth:
      return "AUTH";
    case FrameType::kMtp:
      return "MTP";
    case FrameType::kHidden:
      return "HIDDEN";
  }
  return "?";
}

std::array<std::byte, kFrameHeaderBytes> EncodeFrameHeader(FrameType type, std::span<const std::byte> body,
                                                           std::span<const std::byte> prefix) {
  std::vector<std::byte> out;
  Put<uint32_t>(out, kMagic);
  Put<uint32_t>(out, static_cast<uint32_t>(type));
  Put<uint64_t>(out, prefix.size() + body.size());
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, prefix.data(), prefix.size());
  XXH3_64bits_update(state, body.data(), body.size());
  Put<uint64_t>(out, XXH3_64bits_digest(state));
  XXH3_freeState(state);
  Put<uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  std::array<std::byte, kFrameHeaderBytes> header{};
  std::memcpy(header.data(), out.data(), header.size());
  return header;
}

Result<FrameHeader> DecodeFrameHeader(std::span<const std::byte, kFrameHeaderBytes> bytes) {
  if (Get<uint32_t>(bytes, 0) != kMagic) return FailedPrecondition("the peer does not speak the transfer protocol");
  if (Get<uint64_t>(bytes, 24) != XXH3_64bits(bytes.data(), 24)) {
    return DataLoss("a frame header failed its checksum");
  }
  const uint32_t type = Get<uint32_t>(bytes, 4);
  if (type < static_cast<uint32_t>(FrameType::kHello) || type > static_cast<uint32_t>(FrameType::kHidden) ||
      type == 4 || type == 5) {  // 4, 5: version 1's SLOT and BLOCKS
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

std::vector<std::byte> EncodeHello(const Hello& hello) {
  const TransferLayout& l = hello.layout;
  std::vector<std::byte> out;
  Put<uint32_t>(out, kStateTransferVersion);
  Put<uint32_t>(out, (l.takes_images ? 1u : 0u) | (hello.authenticates ? 2u : 0u) | (l.mtp ? 4u : 0u));
  Put<uint64_t>(out, l.fingerprint);
  for (int64_t v : {l.slot_bytes, l.block_bytes, l.block_tokens, l.vocab, l.max_tokens}) Put<int64_t>(out, v);
  out.insert(out.end(), hello.nonce.begin(), hello.nonce.end());
  return out;
}

Result<Hello> DecodeHello(std::span<const std::byte> body) {
  if (body.size() != kHelloBytes)
    return FailedPrecondition("a HELLO of ", body.size(), " bytes; expected ", kHelloBytes);
  if (Get<uint32_t>(body, 0) != kStateTransferVersion) {
    return FailedPrecondition("transfer protocol version ", Get<uint32_t>(body, 0), ", this server speaks ",
                              kStateTransferVersion);
  }
  const uint32_t flags = Get<uint32_t>(body, 4);
  if ((flags & ~7u) != 0) return FailedPrecondition("a HELLO with unknown flags ", flags);
  Hello hello;
  hello.authenticates = (flags & 2u) != 0;
  std::memcpy(hello.nonce.data(), body.data() + 56, hello.nonce.size());
  TransferLayout& l = hello.layout;
  l.takes_images = (flags & 1u) != 0;
  l.mtp = (flags & 4u) != 0;
  l.fingerprint = Get<uint64_t>(body, 8);
  l.slot_bytes = Get<int64_t>(body, 16);
  l.block_bytes = Get<int64_t>(body, 24);
  l.block_tokens = Get<int64_t>(body, 32);
  l.vocab = Get<int64_t>(body, 40);
  l.max_tokens = Get<int64_t>(body, 48);
  return hello;
}

std::vector<std::byte> EncodeState(const StateAnnouncement& s) {
  std::vector<std::byte> out;
  for (int64_t v : {s.tokens, s.slot_bytes, s.block_bytes, s.logits}) Put<int64_t>(out, v);
  return out;
}

Result<StateAnnouncement> DecodeState(std::span<const std::byte> body, int64_t prompt_tokens,
                                      const TransferLayout& layout) {
  if (body.size() != kStateBytes)
    return FailedPrecondition("a STATE of ", body.size(), " bytes; expected ", kStateBytes);
  if (layout.block_tokens <= 0 || prompt_tokens <= 0) return InvalidArgument("no layout or prompt to check against");
  const StateAnnouncement s{Get<int64_t>(body, 0), Get<int64_t>(body, 8), Get<int64_t>(body, 16),
                            Get<int64_t>(body, 24)};
  const int64_t blocks = (prompt_tokens + layout.block_tokens - 1) / layout.block_tokens * layout.block_bytes;
  if (s.tokens != prompt_tokens || s.slot_bytes != layout.slot_bytes || s.block_bytes != blocks ||
      s.logits != layout.vocab) {
    return FailedPrecondition("the state announced (", s.tokens, " tokens, ", s.slot_bytes, " slot bytes, ",
                              s.block_bytes, " block bytes, ", s.logits, " logits) is not that of this ", prompt_tokens,
                              "-token prompt (", layout.slot_bytes, ", ", blocks, ", ", layout.vocab, ")");
  }
  return s;
}

int64_t LayerFrameBytes(const TransferLayout& layout, int64_t layer, int64_t blocks) {
  return static_cast<int64_t>(kLayerPrefixBytes) + RegionStateBytes(layout.layers.at(layer), blocks);
}

namespace {

// Copies `body` (its size checked by the caller: RegionStateBytes of `regions`) into the slot ranges of `regions`,
// then each block's; false when a range lies outside the slot or a block.
bool CopyRegions(std::span<const std::byte> body, std::span<const CacheRegion> regions, int64_t block_bytes,
                 std::span<std::byte> slot, std::span<std::byte> blocks) {
  size_t at = 0;
  const auto copy = [&](std::span<std::byte> region, const CacheRegion& r) {
    if (r.offset < 0 || r.bytes < 0 || r.offset + r.bytes > static_cast<int64_t>(region.size())) return false;
    std::memcpy(region.data() + r.offset, body.data() + at, r.bytes);
    at += r.bytes;
    return true;
  };
  bool fits = true;
  for (const CacheRegion& r : regions) {
    if (r.in_slot) fits = fits && copy(slot, r);
  }
  const int64_t count = static_cast<int64_t>(blocks.size()) / block_bytes;
  for (int64_t b = 0; b < count && fits; ++b) {
    for (const CacheRegion& r : regions) {
      if (!r.in_slot) fits = fits && copy(blocks.subspan(b * block_bytes, block_bytes), r);
    }
  }
  return fits;
}

bool RoomFor(const TransferLayout& layout, std::span<std::byte> slot, std::span<std::byte> blocks) {
  return layout.block_bytes > 0 && static_cast<int64_t>(slot.size()) == layout.slot_bytes &&
         blocks.size() % layout.block_bytes == 0;
}

}  // namespace

std::array<std::byte, kLayerPrefixBytes> EncodeLayerPrefix(int64_t layer) {
  std::array<std::byte, kLayerPrefixBytes> prefix{};
  const auto index = static_cast<uint32_t>(layer);
  std::memcpy(prefix.data(), &index, sizeof(index));  // then 0 (reserved)
  return prefix;
}

Status UnpackLayer(std::span<const std::byte> body, const TransferLayout& layout, int64_t layer,
                   std::span<std::byte> slot, std::span<std::byte> blocks) {
  if (layer < 0 || layer >= static_cast<int64_t>(layout.layers.size()) || !RoomFor(layout, slot, blocks)) {
    return InvalidArgument("no layer ", layer, " or no room for it in this layout");
  }
  const int64_t count = static_cast<int64_t>(blocks.size()) / layout.block_bytes;
  if (static_cast<int64_t>(body.size()) != LayerFrameBytes(layout, layer, count)) {
    return FailedPrecondition("a LAYER of ", body.size(), " bytes; layer ", layer, " of this prompt has ",
                              LayerFrameBytes(layout, layer, count));
  }
  if (Get<uint32_t>(body, 0) != static_cast<uint32_t>(layer) || Get<uint32_t>(body, 4) != 0) {
    return FailedPrecondition("a LAYER frame of layer ", Get<uint32_t>(body, 0), " where layer ", layer,
                              " was expected (or its reserved field is not 0)");
  }
  const bool fits =
      CopyRegions(body.subspan(kLayerPrefixBytes), layout.layers[layer], layout.block_bytes, slot, blocks);
  return fits ? Status::Ok() : InvalidArgument("layer ", layer, "'s regions do not fit this layout's slot or block");
}

int64_t MtpFrameBytes(const TransferLayout& layout, int64_t blocks) {
  return layout.mtp ? RegionStateBytes(layout.mtp_regions, blocks) : 0;
}

Status UnpackMtp(std::span<const std::byte> body, const TransferLayout& layout, std::span<std::byte> slot,
                 std::span<std::byte> blocks) {
  if (!layout.mtp || layout.mtp_regions.empty() || !RoomFor(layout, slot, blocks)) {
    return InvalidArgument("no MTP layer or no room for its rows in this layout");
  }
  const int64_t count = static_cast<int64_t>(blocks.size()) / layout.block_bytes;
  if (static_cast<int64_t>(body.size()) != MtpFrameBytes(layout, count)) {
    return FailedPrecondition("an MTP frame of ", body.size(), " bytes; the MTP layer's rows of this prompt have ",
                              MtpFrameBytes(layout, count));
  }
  if (!CopyRegions(body, layout.mtp_regions, layout.block_bytes, slot, blocks)) {
    return InvalidArgument("the MTP layer's regions do not fit this layout's slot or block");
  }
  return Status::Ok();
}

int64_t HiddenFrameBytes(const TransferLayout& layout) {
  return layout.mtp ? layout.hidden_size * static_cast<int64_t>(sizeof(float)) : 0;
}

std::vector<std::byte> EncodeImage(const ImageAnnouncement& image) {
  std::vector<std::byte> out;
  Put<int64_t>(out, image.start);
  Put<uint64_t>(out, image.key);
  for (int32_t v : {image.grid_t, image.grid_h, image.grid_w, 0}) Put<int32_t>(out, v);
  return out;
}

Result<ImageAnnouncement> DecodeImage(std::span<const std::byte> body, const ImageShape& shape, int64_t prompt_tokens,
                                      int64_t first_free) {
  if (body.size() != kImageBytes)
    return FailedPrecondition("an IMAGE of ", body.size(), " bytes; expected ", kImageBytes);
  if (shape.merge <= 0 || shape.patch_values <= 0) return InvalidArgument("no vision tower to check the image against");
  ImageAnnouncement image{Get<int64_t>(body, 0), Get<uint64_t>(body, 8), Get<int32_t>(body, 16), Get<int32_t>(body, 20),
                          Get<int32_t>(body, 24)};
  if (Get<int32_t>(body, 28) != 0) return FailedPrecondition("an IMAGE whose reserved field is not 0");
  const auto side = [](int32_t v) { return v > 0 && v <= kMaxVisionPatches; };  // the product below cannot overflow
  if (!side(image.grid_t) || !side(image.grid_h) || !side(image.grid_w) || image.grid_h % shape.merge != 0 ||
      image.grid_w % shape.merge != 0 || image.Patches() > kMaxVisionPatches) {
    return FailedPrecondition("an image grid of ", image.grid_t, " × ", image.grid_h, " × ", image.grid_w,
                              " patches; expected positive sides, height and width multiples of the merge ",
                              shape.merge, ", at most ", kMaxVisionPatches, " patches");
  }
  const int64_t tokens = image.Patches() / (shape.merge * shape.merge);
  if (image.start < first_free || image.start > prompt_tokens - tokens) {
    return FailedPrecondition("an image of ", tokens, " tokens at prompt position ", image.start,
                              "; expected its placeholders from position ", first_free, " inside the prompt of ",
                              prompt_tokens, " tokens, images in order");
  }
  return image;
}

int64_t PatchBytes(const ImageAnnouncement& image, const ImageShape& shape) {
  return image.Patches() * shape.patch_values * static_cast<int64_t>(sizeof(float));
}

}  // namespace glint::server
