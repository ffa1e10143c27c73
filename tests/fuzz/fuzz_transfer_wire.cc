// libFuzzer target: the parsers of the prefill/decode transfer plane (server/transfer_wire.h) over any bytes. An input
// whose first byte is even is read as a stream of frames the way a decode or prefill server reads its peer: a
// header, then a body of the length it claims (at most what is left); an odd one is a type byte and a body framed
// here with a valid header (a fuzzer cannot guess XXH3 checksums, so the body parsers are reached this way). A header
// that decodes must carry a known type; a body that passes its checksum is parsed as what its type says; a HELLO that
// decodes re-encodes to the same bytes; a STATE that decodes holds the sizes of the layout; an IMAGE that decodes
// lies inside the prompt, so its patches are bounded by it; a LAYER unpacks only at its layer's exact size, an MTP
// frame only at the MTP layer's (and only into a layout that has it); an AUTH
// body is checked as a proof of a fixed secret over two fixed HELLOs, and passes only if it is that proof. Crashes,
// sanitizer reports or hangs are failures.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "server/transfer_auth.h"
#include "server/transfer_wire.h"

using glint::server::FrameType;

namespace {

// Two layers: a KDA one (conv window and S in the slot) and a DSA one (filling pool in the slot, latents and pooled
// keys in each block); and the same with the MTP layer's cache after them (--speculative mtp).
const glint::server::TransferLayout kLayout{
    0x600d, 32256,
    1280,   8,
    256,    511,
    false,  {{{true, 0, 1024}, {true, 1024, 4096}}, {{true, 5120, 512}, {false, 0, 1024}, {false, 1024, 256}}}};
const glint::server::TransferLayout kMtpLayout = [] {
  glint::server::TransferLayout layout = kLayout;
  layout.slot_bytes += 512;
  layout.block_bytes += 1280;
  layout.mtp = true;
  layout.mtp_regions = {{true, 32256, 512}, {false, 1280, 1024}, {false, 2304, 256}};
  layout.hidden_size = 64;
  return layout;
}();

// An AUTH body against the proof a decode server would expect from a prefill server holding this secret.
void CheckProof(std::span<const std::byte> body) {
  static const auto secret =
      glint::server::TransferSecret::FromBytes(std::as_bytes(std::span("fuzzing secret, 32 bytes long..", 32)));
  static const std::vector<std::byte> decode_hello = glint::server::EncodeHello({kLayout, true, {}});
  static const std::vector<std::byte> prefill_hello = glint::server::EncodeHello({kLayout, true, {std::byte{1}}});
  const auto side = glint::server::TransferSide::kPrefill;
  if (!secret.ok()) std::abort();
  if (secret->Verify(side, decode_hello, prefill_hello, body)) {
    const glint::server::TransferProof expected = secret->Prove(side, decode_hello, prefill_hello);
    if (body.size() != expected.size() || std::memcmp(body.data(), expected.data(), body.size()) != 0) std::abort();
  }
}

void ParseBody(const glint::server::FrameHeader& header, std::span<const std::byte> body) {
  if (header.type == FrameType::kAuth) {
    CheckProof(body);
  } else if (header.type == FrameType::kHello) {
    const auto hello = glint::server::DecodeHello(body);
    if (hello.ok()) {
      const std::vector<std::byte> again = glint::server::EncodeHello(*hello);
      if (again.size() != body.size() || std::memcmp(again.data(), body.data(), body.size()) != 0) std::abort();
    }
  } else if (header.type == FrameType::kImage) {
    // Placeholders must fit the 29-token prompt from position 3: the patches a reader would then allocate are
    // bounded by the prompt (at most 29 · merge² rows).
    const glint::server::ImageShape shape{2, 1176};
    const auto image = glint::server::DecodeImage(body, shape, 29, 3);
    if (image.ok() && (image->start < 3 || image->Patches() > 29 * 4 || image->start + image->Patches() / 4 > 29 ||
                       glint::server::PatchBytes(*image, shape) > 29 * 4 * 1176 * 4)) {
      std::abort();
    }
  } else if (header.type == FrameType::kLayer) {
    // Layer 1 of a 29-token prompt (4 blocks): only a body of exactly its size, index and regions unpacks.
    std::vector<std::byte> slot(kLayout.slot_bytes), blocks(4 * kLayout.block_bytes);
    if (glint::server::UnpackLayer(body, kLayout, 1, slot, blocks).ok() &&
        static_cast<int64_t>(body.size()) != glint::server::LayerFrameBytes(kLayout, 1, 4)) {
      std::abort();
    }
  } else if (header.type == FrameType::kMtp) {
    // The MTP layer's rows of a 29-token prompt (4 blocks): only at exactly their size, and never into a layout
    // without the MTP layer.
    std::vector<std::byte> slot(kMtpLayout.slot_bytes), blocks(4 * kMtpLayout.block_bytes);
    if (glint::server::UnpackMtp(body, kMtpLayout, slot, blocks).ok() &&
        static_cast<int64_t>(body.size()) != glint::server::MtpFrameBytes(kMtpLayout, 4)) {
      std::abort();
    }
    std::vector<std::byte> plain_slot(kLayout.slot_bytes), plain_blocks(4 * kLayout.block_bytes);
    if (glint::server::UnpackMtp(body, kLayout, plain_slot, plain_blocks).ok()) std::abort();
  } else if (header.type == FrameType::kState) {
    const auto state = glint::server::DecodeState(body, 29, kLayout);
    if (state.ok() && (state->tokens != 29 || state->slot_bytes != kLayout.slot_bytes ||
                       state->block_bytes != 4 * kLayout.block_bytes || state->logits != kLayout.vocab)) {
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> rest(reinterpret_cast<const std::byte*>(data), size);
  if (size >= 2 && data[0] % 2 == 1) {
    constexpr FrameType kTypes[] = {FrameType::kHello, FrameType::kPrompt, FrameType::kState, FrameType::kLogits,
                                    FrameType::kEnd,   FrameType::kError,  FrameType::kImage, FrameType::kPatches,
                                    FrameType::kLayer, FrameType::kAuth,   FrameType::kMtp,   FrameType::kHidden};
    const FrameType type = kTypes[data[1] % std::size(kTypes)];
    const std::span<const std::byte> body = rest.subspan(2);
    const auto header = glint::server::DecodeFrameHeader(glint::server::EncodeFrameHeader(type, body));
    if (!header.ok() || header->type != type || header->length != body.size()) std::abort();
    if (!glint::server::CheckFrameBody(*header, body).ok()) std::abort();
    ParseBody(*header, body);
    return 0;
  }
  while (rest.size() >= glint::server::kFrameHeaderBytes) {
    const auto header = glint::server::DecodeFrameHeader(rest.first<glint::server::kFrameHeaderBytes>());
    rest = rest.subspan(glint::server::kFrameHeaderBytes);
    if (!header.ok()) continue;
    if (header->type < FrameType::kHello || header->type > FrameType::kHidden ||
        static_cast<uint32_t>(header->type) == 4 || static_cast<uint32_t>(header->type) == 5) {
      std::abort();  // version 1's SLOT and BLOCKS are refused
    }
    const std::span<const std::byte> body = rest.first(std::min<uint64_t>(header->length, rest.size()));
    rest = rest.subspan(body.size());
    if (glint::server::CheckFrameBody(*header, body).ok()) ParseBody(*header, body);
  }
  return 0;
}
