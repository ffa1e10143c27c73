// The commands that run a model under `mpirun -np N` (docs/distributed.md): the process's communicator, the
// --tp / --ep flags, and the start-up every rank goes through after loading its shard — one all-gather in which
// the ranks compare their load status and fingerprints (glint binary, flags, model files) and report their weight
// bytes; then rank 0 goes on with the command against a LockstepLeader and the other ranks follow its plans.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "base/status.h"
#include "dist/communicator.h"
#include "model/model.h"

namespace glint::cli {

// The communicator of this process (main creates it before parsing the flags; MPI under mpirun).
Communicator& World();
void SetWorld(std::unique_ptr<Communicator> world, int argc, char** argv);
// Finalises it (MPI_Finalize under mpirun); main calls it last.
void EndWorld();
bool Distributed();  // more than one rank

struct ParallelFlags {
  int tp = 0;  // 0: not given
  int ep = 0;
  bool dp_attention = false;
  bool experts_by_id = false;      // ModelParallel::whole_experts at --tp > 1
  int64_t lm_head_split_rows = 4;  // ShardPlan::head_split_rows
};
void AddParallelFlags(CLI::App& command, ParallelFlags& flags);
// The flags as the model's ModelParallel; refuses --experts-by-id without --tp > 1 (where it would change nothing).
Result<ModelParallel> ToModelParallel(const ParallelFlags& flags);

// Every rank calls this once with what its load gave (its shard of the model in `model_dir`, or an error). One
// rank: returns the model as it is. Several: the ranks compare their status and fingerprints in one all-gather;
// any failure or difference is an error on every rank naming the rank and the cause. Then rank 0 logs the shard
// plan with each rank's weight bytes and gets the model wrapped in a LockstepLeader (lockstep.h); the other ranks
// run the follower loop until rank 0 stops, and get an error for which FollowerFinished() is true — the command
// unwinds and main exits 0.
Result<std::unique_ptr<Model>> JoinRanks(Result<std::unique_ptr<Model>> loaded, const std::string& model_dir);
bool FollowerFinished();
// Whether every rank returns the same error (JoinRanks found a failure or a difference), so none waits for another.
bool RanksAgreedOnError();
// Rank 0 after JoinRanks succeeded: the followers are released when its model is destroyed, so an error of the
// command needs no abort.
bool Leading();
// The model a LockstepLeader wraps, or `model` itself.
const Model& Unwrapped(const Model& model);

}  // namespace glint::cli
