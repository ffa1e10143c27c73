// The byte encoding of the batch plans a multi-rank leader broadcasts (lockstep.h): little-endian fixed-width
// integers and floats, vectors as a count then their elements. The reader checks every length against what is
// left, so a short or corrupt message becomes an error, never a read past the end or a huge allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "base/status.h"

namespace glint {

class WireWriter {
 public:
  template <typename T>
  void Put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &value, sizeof(T));
  }
  template <typename T>
  void PutSpan(std::span<const T> values) {
    Put<uint64_t>(values.size());
    const size_t at = bytes_.size();
    bytes_.resize(at + values.size_bytes());
    if (!values.empty()) std::memcpy(bytes_.data() + at, values.data(), values.size_bytes());
  }
  template <typename T>
  void PutVector(const std::vector<T>& values) {
    PutSpan(std::span<const T>(values));
  }
  std::vector<std::byte>& bytes() { return bytes_; }
  bool empty() const { return bytes_.empty(); }

 private:
  std::vector<std::byte> bytes_;
};

class WireReader {
 public:
  explicit WireReader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  template <typename T>
  T Get() {
    T value{};
    if (!Take(sizeof(T))) return value;
    std::memcpy(&value, bytes_.data() + at_ - sizeof(T), sizeof(T));
    return value;
  }
  template <typename T>
  std::vector<T> GetVector() {
    const uint64_t count = Get<uint64_t>();
    std::vector<T> values;
    if (!ok_ || count > (bytes_.size() - at_) / sizeof(T)) {
      Fail("a vector of " + std::to_string(count) + " elements");
      return values;
    }
    values.resize(count);
    if (count > 0) std::memcpy(values.data(), bytes_.data() + at_, count * sizeof(T));
    at_ += count * sizeof(T);
    return values;
  }
  // A count then that many bytes, as PutSpan<std::byte> wrote them: a view into the message, not a copy.
  std::span<const std::byte> GetBytes() {
    const uint64_t count = Get<uint64_t>();
    if (!ok_ || count > bytes_.size() - at_) {
      Fail("a span of " + std::to_string(count) + " bytes");
      return {};
    }
    at_ += count;
    return bytes_.subspan(at_ - count, count);
  }
  bool done() const { return at_ == bytes_.size(); }
  bool ok() const { return ok_; }
  // Ok, or what could not be read and where.
  Status status() const { return ok_ ? Status::Ok() : InvalidArgument("batch plan message: ", error_); }

 private:
  bool Take(size_t n) {
    if (!ok_ || n > bytes_.size() - at_) {
      Fail(std::to_string(n) + " bytes");
      return false;
    }
    at_ += n;
    return true;
  }
  void Fail(const std::string& what) {
    if (ok_)
      error_ = "cannot read " + what + " at byte " + std::to_string(at_) + " of " + std::to_string(bytes_.size());
    ok_ = false;
  }
  std::span<const std::byte> bytes_;
  size_t at_ = 0;
  bool ok_ = true;
  std::string error_;
};

}  // namespace glint
