// Writes a safetensors file tensor by tensor, without holding the tensors in memory (the bench preset is several
// GB). All names, dtypes and shapes are declared up front so the header can be written first; the byte layout is
// that of SafetensorsWriter (io/safetensors.h): tensors in the declared order, each 64-byte aligned, the header
// padded with spaces so the data section starts 64-aligned.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"

namespace glint {

class SafetensorsStreamWriter {
 public:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };

  // Creates `path` (truncating) and writes the header.
  static Result<SafetensorsStreamWriter> Create(const std::string& path, std::vector<Entry> entries,
                                                const std::map<std::string, std::string>& metadata = {});

  SafetensorsStreamWriter(SafetensorsStreamWriter&& other) noexcept;
  SafetensorsStreamWriter& operator=(SafetensorsStreamWriter&&) = delete;
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  ~SafetensorsStreamWriter();

  // Appends bytes of the current tensor (in declaration order; any chunking). A write that runs past the current
  // tensor's size is an error, so a wrong shape cannot silently shift the following tensors.
  Status Write(std::span<const uint8_t> bytes);
  // The tensor the next Write goes to, or nullptr when all are complete.
  const Entry* current() const;
  // Checks every tensor is complete, flushes and fsyncs. The file is incomplete until Close succeeds.
  Status Close();
  uint64_t total_bytes() const { return total_bytes_; }
  uint64_t bytes_written() const { return data_offset_ + data_position_; }

 private:
  SafetensorsStreamWriter() = default;
  Status WritePadding(uint64_t count);

  std::string path_;
  FILE* file_ = nullptr;
  std::vector<Entry> entries_;
  std::vector<uint64_t> sizes_;   // [entries] bytes of each tensor
  std::vector<uint64_t> begins_;  // [entries] data-section offsets
  size_t current_ = 0;            // index of the tensor being written
  uint64_t written_in_current_ = 0;
  uint64_t data_position_ = 0;  // bytes of the data section written so far
  uint64_t total_bytes_ = 0;    // file size when complete
  uint64_t data_offset_ = 0;    // 8 + header length: where the data section starts
  uint64_t data_size_ = 0;      // bytes of the data section when complete
};

}  // namespace glint
