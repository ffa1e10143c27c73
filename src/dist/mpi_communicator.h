// The Open MPI communicator (MPI_COMM_WORLD, or a sub-communicator of it made by Split). Compiled only when CMake found
// MPI (GLINT_HAVE_MPI).
//
// MPI_Init_thread asks for MPI_THREAD_SERIALIZED: one thread at a time communicates — the engine thread, which
// need not be the main thread under `glint serve`. Errors return (MPI_ERRORS_RETURN) and become a Status naming
// the collective and this rank, so a failure is reported rather than aborted without a word.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "dist/communicator.h"

namespace glint {

class MpiCommunicator final : public Communicator {
 public:
  // Initialises MPI (once per process); the destructor finalises it. Destroy every communicator made by Split first.
  static Result<std::unique_ptr<MpiCommunicator>> Create(int* argc, char*** argv);
  ~MpiCommunicator() override;  // the world: MPI_Finalize; a split one: MPI_Comm_free

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string Describe() const override;
  // Ends every rank of the job with `code` after printing `message` with this rank's number (MPI_Abort).
  [[noreturn]] void Abort(const std::string& message, int code) const;
  Result<std::unique_ptr<Communicator>> Split(int color, int key) override;

 protected:
  Status DoAllGather(std::span<const std::byte> send, std::span<std::byte> received) override;
  Status DoBroadcast(std::vector<std::byte>& buffer, int root) override;
  Status DoBarrier() override;
  Status DoGather(std::span<const std::byte> send, std::span<const uint64_t> counts, std::span<std::byte> received,
                  int root) override;

 private:
  MpiCommunicator() = default;
  Status Check(int code, const char* what) const;
  // The length header of a broadcast, received without spinning a core while nothing comes.
  Status WaitIdly(unsigned long long* length, int root) const;
  int rank_ = 0, size_ = 1;
  int world_rank_ = 0;  // this process's rank in MPI_COMM_WORLD (messages name it)
  std::string library_;
  // The MPI_Comm (an int or a pointer, depending on the MPI library), behind a type this header needs no mpi.h for.
  struct Handle;
  std::unique_ptr<Handle> handle_;
  bool world_ = true;  // MPI_COMM_WORLD: finalised by the destructor
};

}  // namespace glint
