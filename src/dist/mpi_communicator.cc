#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "dist/mpi_heartbeat.h"

namespace glint {

struct MpiCommunicator::Handle {
  MPI_Comm comm = MPI_COMM_WORLD;
};
namespace {
std::string SecondsText(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", seconds);
  return text;
}
}  // namespace

struct MpiCommunicator::Heartbeat {
  MpiHeartbeat thread;
};

Result<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return FailedPrecondition("MPI is already initialised in this process; create one communicator");
  GLINT_ASSIGN_OR_RETURN(const double peer_timeout, ParsePeerTimeout(std::getenv(kPeerTimeoutVariable)));
  const int wanted = peer_timeout > 0 ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED;
  int provided = 0;
  if (MPI_Init_thread(argc, argv, wanted, &provided) != MPI_SUCCESS) return InternalError("MPI_Init_thread failed");
  auto comm = std::unique_ptr<MpiCommunicator>(new MpiCommunicator());
  comm->handle_ = std::make_unique<Handle>();
  if (provided < wanted) {
    return FailedPrecondition(
        "the MPI library provides thread level ", provided, "; glint needs ",
        wanted == MPI_THREAD_MULTIPLE
            ? "MPI_THREAD_MULTIPLE for the heartbeat that notices a lost rank (GLINT_PEER_TIMEOUT=0 turns it off)"
            : "MPI_THREAD_SERIALIZED (the engine thread communicates)");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &comm->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &comm->size_);
  comm->world_rank_ = comm->rank_;
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  comm->library_.assign(version, length);
  if (const size_t end = comm->library_.find_first_of(",\n"); end != std::string::npos) comm->library_.resize(end);
  GLINT_RETURN_IF_ERROR(comm->StartHeartbeat(peer_timeout));
  return comm;
}

Status MpiCommunicator::StartHeartbeat(double timeout_seconds) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  std::vector<char> names(static_cast<size_t>(MPI_MAX_PROCESSOR_NAME) * size_);
  GLINT_RETURN_IF_ERROR(Check(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(),
                                            MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD),
                              "MPI_Allgather of the host names"));
  for (int r = 0; r < size_; ++r) {
    const char* start = names.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    hosts_.emplace_back(start, strnlen(start, MPI_MAX_PROCESSOR_NAME));
  }
  if (timeout_seconds <= 0 || size_ == 1) return Status::Ok();
  auto on_silent = [this, timeout_seconds](int peer, double seconds) {
    Abort(StrCat("no heartbeat from rank ", peer, " on host ", hosts_[peer], " for ", SecondsText(seconds), " (",
                 kPeerTimeoutVariable, "=", timeout_seconds,
                 "): its process was stopped or killed, or its host is unreachable; ending every rank"),
          1);
  };
  heartbeat_.reset(new Heartbeat{MpiHeartbeat(MPI_COMM_WORLD, timeout_seconds, std::move(on_silent))});
  return Status::Ok();
}

MpiCommunicator::~MpiCommunicator() {
  heartbeat_.reset();  // its goodbyes before MPI_Finalize
  if (world_) {
    MPI_Finalize();
  } else {
    MPI_Comm_free(&handle_->comm);
  }
}

Result<std::unique_ptr<Communicator>> MpiCommunicator::Split(int color, int key) {
  MPI_Comm split = MPI_COMM_NULL;
  GLINT_RETURN_IF_ERROR(Check(MPI_Comm_split(handle_->comm, color, key, &split), "MPI_Comm_split"));
  auto sub = std::unique_ptr<MpiCommunicator>(new MpiCommunicator());
  sub->handle_ = std::make_unique<Handle>();
  sub->handle_->comm = split;
  sub->world_ = false;
  MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN);
  MPI_Comm_rank(split, &sub->rank_);
  MPI_Comm_size(split, &sub->size_);
  sub->world_rank_ = world_rank_;
  sub->library_ = library_;
  AdoptSplit(*sub);
  return std::unique_ptr<Communicator>(std::move(sub));
}

std::string MpiCommunicator::Describe() const {
  return "MPI (" + library_ + "), " + std::to_string(size_) + (size_ == 1 ? " rank" : " ranks") +
         (world_ ? "" : " of a split");
}

void MpiCommunicator::Abort(const std::string& message, int code) const {
  std::fprintf(stderr, "glint rank %d: %s\n", world_rank_, message.c_str());
  std::fflush(stderr);
  // MPI_Abort asks mpirun (through this host's orted) to end every rank; on a host cut off from mpirun that
  // request never arrives and MPI_Abort would wait for it, so this process ends itself after 1 s (mpirun ends
  // the job for a rank that exits with an error too).
  std::thread([code] {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::_Exit(code);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] true if it ever did
}

Status MpiCommunicator::Check(int code, const char* what) const {
  if (code == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  const std::string who = world_ ? StrCat("rank ", rank_, " of ", size_)
                                 : StrCat("rank ", world_rank_, " (", rank_, " of ", size_, " in its group)");
  return InternalError(who, ": ", what, " failed: ", std::string(text, length));
}

Status MpiCommunicator::DoAllGather(std::span<const std::byte> send, std::span<std::byte> received) {
  if (send.size() > static_cast<size_t>(INT_MAX)) {
    return InvalidArgument("all-gather of ", send.size(), " bytes; at most ", INT_MAX, " per call");
  }
  const int count = static_cast<int>(send.size());
  return Check(MPI_Allgather(send.data(), count, MPI_BYTE, received.data(), count, MPI_BYTE, handle_->comm),
               "MPI_Allgather");
}

Status MpiCommunicator::DoBroadcast(std::vector<std::byte>& buffer, int root) {
  // The length first, so that receivers size their buffers; then the bytes.
  unsigned long long length = buffer.size();
  GLINT_RETURN_IF_ERROR(WaitIdly(&length, root));
  if (length > static_cast<unsigned long long>(INT_MAX)) {
    return InvalidArgument("broadcast of ", length, " bytes; at most ", INT_MAX, " per call");
  }
  buffer.resize(length);
  if (length == 0) return Status::Ok();
  return Check(MPI_Bcast(buffer.data(), static_cast<int>(length), MPI_BYTE, root, handle_->comm), "MPI_Bcast");
}

Status MpiCommunicator::WaitIdly(unsigned long long* length, int root) const {
  // A follower rank waits here for rank 0's next plan, which under `glint serve` can be minutes away. A blocking
  // MPI_Bcast spins a core the whole time; polling a non-blocking one spins only for the first millisecond (the gap
  // between the steps of a busy engine) and then sleeps 100 µs between polls, so an idle rank costs ~nothing and a
  // busy one adds no latency.
  MPI_Request request;
  GLINT_RETURN_IF_ERROR(
      Check(MPI_Ibcast(length, 1, MPI_UNSIGNED_LONG_LONG, root, handle_->comm, &request), "MPI_Ibcast"));
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int done = 0;
    GLINT_RETURN_IF_ERROR(Check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test"));
    if (done) return Status::Ok();
    if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(1)) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

Status MpiCommunicator::DoGather(std::span<const std::byte> send, std::span<const uint64_t> counts,
                                 std::span<std::byte> received, int root) {
  // MPI_Gatherv counts and displacements are ints: the callers keep a call under 1 GiB (GatherLogitRows).
  std::vector<int> sizes(counts.size()), offsets(counts.size());
  uint64_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (offset + counts[r] > static_cast<uint64_t>(INT_MAX)) {
      return InvalidArgument("gather of more than ", INT_MAX, " bytes in one call");
    }
    sizes[r] = static_cast<int>(counts[r]);
    offsets[r] = static_cast<int>(offset);
    offset += counts[r];
  }
  return Check(MPI_Gatherv(send.data(), static_cast<int>(send.size()), MPI_BYTE, received.data(), sizes.data(),
                           offsets.data(), MPI_BYTE, root, handle_->comm),
               "MPI_Gatherv");
}

Status MpiCommunicator::DoAllToAll(std::span<const std::byte> send, std::span<const uint64_t> send_counts,
                                   std::vector<std::byte>& received, std::vector<uint64_t>& received_counts) {
  // The counts first (what each rank will get from each), then the bytes. MPI_Alltoallv counts and displacements
  // are ints: a call moves under 2 GiB per rank (the callers' passes are ≤ max_tokens_per_pass rows).
  received_counts.assign(size_, 0);
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
  GLINT_RETURN_IF_ERROR(Check(MPI_Alltoall(send_counts.data(), 1, MPI_UNSIGNED_LONG_LONG, received_counts.data(), 1,
                                           MPI_UNSIGNED_LONG_LONG, handle_->comm),
                              "MPI_Alltoall of the row counts"));
  std::vector<int> send_sizes(size_), send_offsets(size_), receive_sizes(size_), receive_offsets(size_);
  uint64_t sent = 0, got = 0;
  for (int r = 0; r < size_; ++r) {
    if (sent + send_counts[r] > static_cast<uint64_t>(INT_MAX) ||
        got + received_counts[r] > static_cast<uint64_t>(INT_MAX)) {
      return InvalidArgument("all-to-all of more than ", INT_MAX, " bytes in one call");
    }
    send_sizes[r] = static_cast<int>(send_counts[r]), send_offsets[r] = static_cast<int>(sent);
    receive_sizes[r] = static_cast<int>(received_counts[r]), receive_offsets[r] = static_cast<int>(got);
    sent += send_counts[r], got += received_counts[r];
  }
  received.resize(got);
  return Check(MPI_Alltoallv(send.data(), send_sizes.data(), send_offsets.data(), MPI_BYTE, received.data(),
                             receive_sizes.data(), receive_offsets.data(), MPI_BYTE, handle_->comm),
               "MPI_Alltoallv");
}

Status MpiCommunicator::DoBarrier() { return Check(MPI_Barrier(handle_->comm), "MPI_Barrier"); }

}  // namespace glint
