// Helpers for the tests of the routed-expert cache (`--expert-memory`, docs/expert-cache.md): a model converted
// into a container (the cache reads its extents), a reader that injects faults, and the cache's budgets.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "base/worker_pool.h"
#include "fast/fast_model.h"
#include "io/extent_reader.h"

namespace glint::testing {

// The model in `model_dir` (a checkpoint) converted by the `glint convert` path into a new temporary directory
// (model.glint + config.json), which FastModel::Load maps; empty on failure (with a test failure).
std::string ConvertToContainer(const std::string& model_dir, WorkerPool& pool, const FastConvertOptions& convert = {});

// The container's offset of routed expert `expert` of hidden layer `layer` ("layers.L.moe." extents; layer −1:
// the MTP layer's, "mtp.moe.").
uint64_t ExpertExtentOffset(const std::string& container_dir, int64_t layer, int64_t expert);

// What a FaultyReader does; changed by the test between (never during) Forward calls.
struct FaultPlan {
  std::mutex mutex;
  std::set<uint64_t> failing_offsets;  // every read at these offsets fails (EIO)
  std::set<uint64_t> failing_once;     // the next read at these offsets fails, later ones succeed
  int64_t fail_read_number = -1;  // the read with this number (0, 1, …; counting every read) fails, and its retry
  bool short_reads = false;       // every read fills only its first half and says so
  std::set<uint64_t> corrupt_offsets;  // reads at these offsets succeed with one byte changed (a disk's wrong bytes)
  int sleep_microseconds = 0;          // each read waits this long first (a slow drive)
  std::atomic<int64_t> reads{0};       // reads so far
  std::atomic<int64_t> injected{0};    // faults injected so far
};

// Reads through a DirectFileReader (O_DIRECT), injecting the faults of its plan: errors worded as the real reader
// words them ("I/O error", "short read"), so the messages the tests check are the ones users see.
class FaultyReader final : public ExtentReader {
 public:
  FaultyReader(std::unique_ptr<ExtentReader> inner, std::shared_ptr<FaultPlan> plan)
      : inner_(std::move(inner)), plan_(std::move(plan)) {}
  Status Read(uint64_t offset, std::span<uint8_t> out) override;
  bool direct() const override { return inner_->direct(); }

 private:
  std::unique_ptr<ExtentReader> inner_;
  std::shared_ptr<FaultPlan> plan_;
  std::atomic<int64_t> failed_number_reads_{0};
};

// Options whose expert cache (`budget` bytes, `readers` reads in flight) reads through a FaultyReader of `plan`.
FastModelOptions FaultyCacheOptions(uint64_t budget, std::shared_ptr<FaultPlan> plan, int readers = 4);

// The smallest budget the cache accepts for the container's model (one layer's top-k experts), from a cache of
// every expert; and the budget that holds every routed expert.
struct ExpertBudgets {
  uint64_t minimum = 0, all = 0;
};
ExpertBudgets BudgetsOf(const std::string& container_dir, WorkerPool& pool);

}  // namespace glint::testing
