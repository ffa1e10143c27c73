// The world communicator of a test binary started by mpirun (tests/mpi/mpi_test_main.cc creates it before the
// tests run and finalises it after).
#pragma once

#include "dist/communicator.h"

namespace glint::testing {

Communicator& World();

}  // namespace glint::testing
