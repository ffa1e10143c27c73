// Load-time conversion of a checkpoint into the fast path's packed weights (fast_weights.h), either into memory
// (FastModel::Load on a checkpoint directory) or once into a container file (`glint convert`, io/weight_container.h)
// that later loads by mmap with no conversion.
//
// The plan lists every packed tensor with its kind, dims and blob sizes before any conversion runs, so a container
// header can be written first and the data streamed tensor by tensor; no fp32 copy of a large tensor is ever held.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/worker_pool.h"
#include "dist/sharding.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "packed/fast_tensor_parallel.h"
#include "packed/fast_weights.h"

namespace glint {

// Int4 expert K-group (docs/fast-path.md, "int4 experts": measured against 32 and 128).
inline constexpr int64_t kDefaultInt4Group = 64;

struct FastConvertOptions {
  int64_t group = 128;                           // int8 K-group size (docs/fast-path.md: why 128)
  bool with_mtp = true;                          // convert the MTP layer when the config has one
  ExpertWeights experts = ExpertWeights::kInt8;  // routed experts' gate/up/down (main and MTP layers)
  int64_t int4_group = kDefaultInt4Group;        // K-group of int4 experts
  // Expert parallel: convert only these experts (the checkpoint's other experts are checked, never read). `glint
  // convert` converts all: one container serves any rank count.
  LocalExperts local;
  // Tensor parallel: convert only these slices of the named tensors (FastTensorSlices; the rest of each tensor is
  // never decoded, though a column slice reads the checkpoint rows it lies in). Empty: every tensor whole.
  std::map<std::string, FastSlice> slices;
  // false: skip lm_head (a rank that holds none of it: only rank 0's tp group does, docs/distributed.md "lm_head").
  bool lm_head = true;
};

struct ConvertProgress {
  uint64_t done_bytes = 0;  // output bytes written so far
  uint64_t total_bytes = 0;
  std::string tensor;  // the tensor just finished
};
using ConvertProgressFn = std::function<void(const ConvertProgress&)>;

struct PlannedTensor {
  std::string name;
  std::string kind;  // as StoredTensor::kind
  std::vector<int64_t> dims;
  std::vector<uint64_t> blob_bytes;
  // Fills the blobs (each pre-sized and 64-byte aligned, zeroed). May use the pool.
  std::function<Status(std::vector<std::span<uint8_t>>& blobs, WorkerPool& pool)> fill;
  // Container extent (io/weight_container.h): a routed expert's tensors share one, named ExpertExtentName(…), so
  // the expert is one contiguous 4 KiB-aligned read (experts/expert_store.h). Empty for everything else.
  std::string extent = {};
};

// The extent of routed expert `expert` of the MoE whose tensors start with `moe_prefix` ("layers.3.moe.").
std::string ExpertExtentName(const std::string& moe_prefix, int64_t expert);

// Checks the checkpoint against the config (every expected tensor present with its shape, FP8 tensors with
// correctly shaped block scales, no unknown tensors) and plans the conversion. The plan refers to the checkpoint's
// mapping: keep the checkpoint alive while running it.
Result<std::vector<PlannedTensor>> PlanFastWeights(const Checkpoint& checkpoint, const ModelConfig& config,
                                                   const FastConvertOptions& options);

// Runs the plan into owned memory.
Status MaterializeFastWeights(const std::vector<PlannedTensor>& plan, WorkerPool& pool, FastWeightSource& out,
                              const ConvertProgressFn& progress = nullptr);

// Runs the plan into a container at `path` (written to path.tmp, renamed when complete).
Status WriteFastContainer(const std::vector<PlannedTensor>& plan, WorkerPool& pool, const std::string& path,
                          std::map<std::string, std::string> metadata, const ConvertProgressFn& progress = nullptr);

// Exposes a mapped container's tensors as a weight source.
Result<FastWeightSource> SourceFromContainer(std::unique_ptr<ContainerFile> container);

}  // namespace glint
