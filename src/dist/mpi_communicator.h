// The Open MPI communicator (MPI_COMM_WORLD, or a sub-communicator of it made by Split). Compiled only when CMake found
// MPI (GLINT_HAVE_MPI).
//
// One thread communicates over this communicator — the engine thread, which need not be the main thread under
// `glint serve`. The world's communicator also runs a heartbeat thread on a duplicate of MPI_COMM_WORLD
// (dist/mpi_heartbeat.h, dist/peer_watch.h: a stopped, killed or unreachable rank ends the job within
// GLINT_PEER_TIMEOUT seconds with a message naming it and its host), so MPI_Init_thread asks for
// MPI_THREAD_MULTIPLE; with GLINT_PEER_TIMEOUT=0 (no heartbeat) MPI_THREAD_SERIALIZED is enough. Errors return
// (MPI_ERRORS_RETURN) and become a Status naming the collective and this rank, so a failure is reported rather
// than aborted without a word.
#pragma once

#include <memory>
#include <string>
#include <vector>

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
  // Ends every rank of the job with `code` after printing `message` with this rank's number (MPI_Abort). When
  // MPI_Abort cannot reach mpirun (this host lost its network) the process exits by itself 1 s later.
  [[noreturn]] void Abort(const std::string& message, int code) const;
  Result<std::unique_ptr<Communicator>> Split(int color, int key) override;

 protected:
  Status DoAllGather(std::span<const std::byte> send, std::span<std::byte> received) override;
  Status DoBroadcast(std::vector<std::byte>& buffer, int root) override;
  Status DoBarrier() override;
  Status DoGather(std::span<const std::byte> send, std::span<const uint64_t> counts, std::span<std::byte> received,
                  int root) override;
  Status DoAllToAll(std::span<const std::byte> send, std::span<const uint64_t> send_counts,
                    std::vector<std::byte>& received, std::vector<uint64_t>& received_counts) override;

 private:
  MpiCommunicator() = default;
  Status Check(int code, const char* what) const;
  // The host names of every rank, then the heartbeat (unless GLINT_PEER_TIMEOUT is 0).
  Status StartHeartbeat(double timeout_seconds);
  // The length header of a broadcast, received without spinning a core while nothing comes.
  Status WaitIdly(unsigned long long* length, int root) const;
  int rank_ = 0, size_ = 1;
  int world_rank_ = 0;  // this process's rank in MPI_COMM_WORLD (messages name it)
  std::string library_;
  // The MPI_Comm (an int or a pointer, depending on the MPI library), behind a type this header needs no mpi.h for.
  struct Handle;
  std::unique_ptr<Handle> handle_;
  bool world_ = true;               // MPI_COMM_WORLD: finalised by the destructor
  std::vector<std::string> hosts_;  // [world ranks] MPI_Get_processor_name, for the heartbeat's message
  struct Heartbeat;
  std::unique_ptr<Heartbeat> heartbeat_;  // the world's only
};

}  // namespace glint
