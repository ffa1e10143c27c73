// main() of the tests run under mpirun: every rank runs every test (they call collectives in the same order);
// only rank 0 prints gtest's report. A failure on any rank fails the process, and mpirun then ends the others, so
// no rank waits forever in a collective its peer left (ctest's timeout is the last resort).
#include "mpi_test_main.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "dist/launch.h"

namespace glint::testing {
namespace {
std::unique_ptr<Communicator> world;
}  // namespace

Communicator& World() { return *world; }

}  // namespace glint::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto comm = glint::MakeCommunicator(&argc, &argv);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  glint::testing::world = std::move(comm).value();
  if (glint::testing::world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int result = RUN_ALL_TESTS();
  if (result != 0) std::fprintf(stderr, "rank %d: tests failed\n", glint::testing::world->rank());
  glint::testing::world.reset();
  return result;
}
