#include "server/transfer_auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace glint::server {
namespace {

// The labels of the two proofs (and of the protocol version they belong to).
const char* SideLabel(TransferSide side) {
  return side == TransferSide::kPrefill ? "glint transfer plane v3: prefill" : "glint transfer plane v3: decode";
}

bool IsTrailingSpace(unsigned char c) { return c == '\n' || c == '\r' || c == ' ' || c == '\t'; }

}  // namespace

Result<TransferNonce> FreshNonce() {
  TransferNonce nonce{};
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) != 1) {
    return Unavailable("no random bytes for the transfer plane's handshake (OpenSSL RAND_bytes failed)");
  }
  return nonce;
}

Result<TransferSecret> TransferSecret::Load(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open the transfer secret file ", path, ": ", std::strerror(errno));
  struct stat info {};
  std::vector<std::byte> bytes;
  Status status = Status::Ok();
  // The checks are made on the file as opened, so it cannot be swapped between them and the read.
  if (::fstat(fd, &info) != 0) {
    status = IoError("cannot stat the transfer secret file ", path, ": ", std::strerror(errno));
  } else if (!S_ISREG(info.st_mode)) {
    status = InvalidArgument("the transfer secret file ", path, " is not a regular file");
  } else if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    status = FailedPrecondition("the transfer secret file ", path, " has permissions 0", std::oct,
                                (info.st_mode & 07777), std::dec,
                                " (group or others may use it): whoever reads it can have prompts prefilled and read "
                                "their states; make it readable by its owner only (chmod 600)");
  } else if (info.st_size > static_cast<off_t>(kMaxBytes) + 64) {
    status = InvalidArgument("the transfer secret file ", path, " holds ", info.st_size, " bytes; at most ", kMaxBytes,
                             " are taken");
  } else {
    bytes.resize(static_cast<size_t>(info.st_size));
    const ssize_t read = ::read(fd, bytes.data(), bytes.size());
    if (read != static_cast<ssize_t>(bytes.size())) {
      status = IoError("cannot read the transfer secret file ", path);
    }
  }
  ::close(fd);
  if (!status.ok()) return status;
  Result<TransferSecret> secret = FromBytes(bytes);
  OPENSSL_cleanse(bytes.data(), bytes.size());
  if (!secret.ok()) return secret.status().WithContext(StrCat("the transfer secret file ", path));
  return secret;
}

Result<TransferSecret> TransferSecret::FromBytes(std::span<const std::byte> bytes) {
  size_t size = bytes.size();
  while (size > 0 && IsTrailingSpace(static_cast<unsigned char>(bytes[size - 1]))) --size;
  if (size < kMinBytes || size > kMaxBytes) {
    return InvalidArgument("a transfer secret of ", size, " bytes (trailing whitespace removed); expected ", kMinBytes,
                           " to ", kMaxBytes, " (e.g. head -c 32 /dev/urandom | base64 > FILE)");
  }
  TransferSecret secret;
  secret.key_.resize(size);
  std::memcpy(secret.key_.data(), bytes.data(), size);
  return secret;
}

TransferSecret::~TransferSecret() {
  if (!key_.empty()) OPENSSL_cleanse(key_.data(), key_.size());
}

TransferProof TransferSecret::Prove(TransferSide side, std::span<const std::byte> decode_hello,
                                    std::span<const std::byte> prefill_hello) const {
  // label ‖ |Hd| ‖ Hd ‖ |Hp| ‖ Hp, the lengths as u64: no two different inputs give the same bytes.
  std::vector<unsigned char> message;
  const std::string label = SideLabel(side);
  message.insert(message.end(), label.begin(), label.end());
  for (std::span<const std::byte> hello : {decode_hello, prefill_hello}) {
    const uint64_t length = hello.size();
    const auto* length_bytes = reinterpret_cast<const unsigned char*>(&length);
    message.insert(message.end(), length_bytes, length_bytes + sizeof(length));
    const auto* data = reinterpret_cast<const unsigned char*>(hello.data());
    message.insert(message.end(), data, data + hello.size());
  }
  TransferProof proof{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()), message.data(), message.size(),
       reinterpret_cast<unsigned char*>(proof.data()), &length);
  return proof;
}

bool TransferSecret::Verify(TransferSide side, std::span<const std::byte> decode_hello,
                            std::span<const std::byte> prefill_hello, std::span<const std::byte> proof) const {
  if (proof.size() != kTransferProofBytes) return false;
  const TransferProof expected = Prove(side, decode_hello, prefill_hello);
  return CRYPTO_memcmp(expected.data(), proof.data(), expected.size()) == 0;
}

}  // namespace glint::server
