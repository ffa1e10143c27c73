#include "dist/launch.h"

#include <cstdio>
#include <cstdlib>

#ifdef GLINT_HAVE_MPI
#include "dist/mpi_communicator.h"
#endif

namespace glint {

bool BuiltWithMpi() {
#ifdef GLINT_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool LaunchedByMpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

Result<std::unique_ptr<Communicator>> MakeCommunicator(int* argc, char*** argv) {
  if (!LaunchedByMpirun()) return std::unique_ptr<Communicator>(std::make_unique<SingleProcessCommunicator>());
#ifdef GLINT_HAVE_MPI
  GLINT_ASSIGN_OR_RETURN(auto comm, MpiCommunicator::Create(argc, argv));
  return std::unique_ptr<Communicator>(std::move(comm));
#else
  return FailedPrecondition(
      "started by mpirun, but this glint was built without MPI (install libopenmpi-dev and "
      "reconfigure; scripts/setup.sh does)");
#endif
}

void AbortAllRanks(const Communicator& comm, const std::string& message, int code) {
#ifdef GLINT_HAVE_MPI
  if (const auto* mpi = dynamic_cast<const MpiCommunicator*>(&comm)) mpi->Abort(message, code);
#endif
  std::fprintf(stderr, "glint: %s\n", message.c_str());
  std::exit(code);
}

}  // namespace glint
