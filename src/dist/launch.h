// Choosing the communicator of a process: MPI when it was started by mpirun (and glint was built with MPI), the
// single-process one otherwise.
#pragma once

#include <memory>

#include "base/status.h"
#include "dist/communicator.h"

namespace glint {

// Whether glint was compiled with MPI support (CMake found MPI).
bool BuiltWithMpi();
// Whether mpirun (Open MPI, or a PMI launcher) started this process: its environment names a world size.
bool LaunchedByMpirun();
// An MpiCommunicator under mpirun, else a SingleProcessCommunicator. Under mpirun without MPI support: an error
// saying so (N copies of a single-process glint would each run the whole model and print everything N times).
Result<std::unique_ptr<Communicator>> MakeCommunicator(int* argc, char*** argv);
// Ends the whole job from this rank with `message` (MPI_Abort under MPI; exit(code) otherwise): for a rank that
// fails while the others wait in a collective, so that none of them hangs.
[[noreturn]] void AbortAllRanks(const Communicator& comm, const std::string& message, int code);

}  // namespace glint
