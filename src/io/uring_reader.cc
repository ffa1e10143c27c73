// UringExtentReader (extent_reader.h): io_uring through liburing. One ring per reader; a read is one
// IORING_OP_READ of a whole extent into a 4 KiB-aligned buffer on the O_DIRECT descriptor.
#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "io/extent_reader.h"

namespace glint {

struct UringExtentReader::Ring {
  struct io_uring ring;
};

Result<std::unique_ptr<UringExtentReader>> UringExtentReader::Open(std::unique_ptr<DirectFileReader> file, int depth) {
  if (depth < 1 || depth > 4096) return InvalidArgument("io_uring queue depth ", depth, " is not in 1..4096");
  std::unique_ptr<UringExtentReader> reader(new UringExtentReader());
  reader->ring_ = std::make_unique<Ring>();
  const int error = io_uring_queue_init(static_cast<unsigned>(depth), &reader->ring_->ring, 0);
  if (error < 0) {
    reader->ring_.reset();
    return IoError("io_uring_queue_init(", depth, ") failed: ", std::strerror(-error),
                   " (a kernel without io_uring, or it is disabled: use the pread readers)");
  }
  reader->file_ = std::move(file);
  reader->depth_ = depth;
  reader->pending_.resize(depth);
  reader->tags_.resize(depth);
  for (int slot = depth - 1; slot >= 0; --slot) reader->free_.push_back(slot);
  return reader;
}

uint64_t UringExtentReader::ring_bytes() const {
  const struct io_uring& ring = ring_->ring;
  const auto pages = [](uint64_t bytes) { return (bytes + 4095) / 4096 * 4096; };  // mappings are whole pages
  // One mapping serves both rings when the kernel has IORING_FEAT_SINGLE_MMAP (the larger of the two sizes).
  const uint64_t rings = (ring.features & IORING_FEAT_SINGLE_MMAP) != 0
                             ? pages(std::max<uint64_t>(ring.sq.ring_sz, ring.cq.ring_sz))
                             : pages(ring.sq.ring_sz) + pages(ring.cq.ring_sz);
  return rings + pages(uint64_t{ring.sq.ring_entries} * sizeof(struct io_uring_sqe));
}

UringExtentReader::~UringExtentReader() {
  if (ring_ == nullptr) return;
  std::vector<Completion> done;
  while (in_flight_ > 0 && Wait(done).ok()) done.clear();  // the kernel must not write into freed buffers
  io_uring_queue_exit(&ring_->ring);
}

Status UringExtentReader::Submit(uint64_t tag, uint64_t offset, std::span<uint8_t> out) {
  GLINT_RETURN_IF_ERROR(file_->CheckAligned(offset, out));
  if (free_.empty()) return InternalError("io_uring reader: ", depth_, " reads already in flight");
  struct io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
  if (sqe == nullptr) return InternalError("io_uring reader: the submission queue is full");
  const int slot = free_.back();
  free_.pop_back();
  pending_[slot] = {offset, out};
  tags_[slot] = tag;
  io_uring_prep_read(sqe, file_->fd(), out.data(), static_cast<unsigned>(out.size()), offset);
  io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
  ++in_flight_;
  return Status::Ok();
}

Status UringExtentReader::Wait(std::vector<Completion>& done) {
  if (in_flight_ == 0) return Status::Ok();
  int error = io_uring_submit(&ring_->ring);
  if (error < 0) return IoError("io_uring_submit failed: ", std::strerror(-error));
  struct io_uring_cqe* cqe = nullptr;
  do {
    error = io_uring_wait_cqe(&ring_->ring, &cqe);
  } while (error == -EINTR);
  if (error < 0) return IoError("io_uring_wait_cqe failed: ", std::strerror(-error));
  unsigned head = 0, seen = 0;
  io_uring_for_each_cqe(&ring_->ring, head, cqe) {
    ++seen;
    const int slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
    const Pending& read = pending_[slot];
    Status status;
    if (cqe->res < 0) {
      status = IoError("reading ", read.out.size(), " bytes at offset ", read.offset, " of '", file_->path(),
                       "': ", std::strerror(-cqe->res));
    } else if (static_cast<size_t>(cqe->res) < read.out.size()) {
      // O_DIRECT on a regular file is short only at its end: the file shrank, or the extent lies past it.
      status = file_->CheckUnchanged();
      if (status.ok()) {
        status = IoError("short read of '", file_->path(), "': ", cqe->res, " of ", read.out.size(),
                         " bytes at offset ", read.offset, " (the file ends early)");
      }
    } else {
      status = file_->CheckUnchanged();
    }
    done.push_back({tags_[slot], std::move(status)});
    free_.push_back(slot);
    --in_flight_;
  }
  io_uring_cq_advance(&ring_->ring, seen);
  return Status::Ok();
}

}  // namespace glint
