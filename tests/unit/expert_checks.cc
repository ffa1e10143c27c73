#include "expert_checks.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "base/file.h"
#include "io/safetensors.h"
#include "io/weight_container.h"
#include "packed/fast_convert.h"
#include "test_util.h"

namespace glint::testing {

std::string ConvertToContainer(const std::string& model_dir, WorkerPool& pool, const FastConvertOptions& convert) {
  const std::string out = MakeTempDir("expert_container");
  const Result<ModelConfig> config = LoadModelConfig(model_dir);
  const Result<Checkpoint> checkpoint = Checkpoint::Open(model_dir);
  EXPECT_TRUE(config.ok() && checkpoint.ok()) << model_dir;
  if (!config.ok() || !checkpoint.ok()) return {};
  const Result<std::vector<PlannedTensor>> plan = PlanFastWeights(*checkpoint, *config, convert);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return {};
  EXPECT_OK(WriteFastContainer(*plan, pool, JoinPath(out, kContainerFileName), {}));
  const Result<std::string> config_text = ReadFile(JoinPath(model_dir, "config.json"));
  EXPECT_TRUE(config_text.ok());
  EXPECT_OK(WriteFileAtomic(JoinPath(out, "config.json"), config_text.ok() ? *config_text : std::string()));
  return out;
}

uint64_t ExpertExtentOffset(const std::string& container_dir, int64_t layer, int64_t expert) {
  const Result<ContainerFile> container = ContainerFile::Open(JoinPath(container_dir, kContainerFileName));
  EXPECT_TRUE(container.ok()) << container.status().ToString();
  if (!container.ok()) return 0;
  const std::string prefix = layer < 0 ? std::string("mtp.moe.") : "layers." + std::to_string(layer) + ".moe.";
  const std::string name = ExpertExtentName(prefix, expert);
  const ContainerExtent* extent = container->FindExtent(name);
  EXPECT_NE(extent, nullptr) << name;
  return extent == nullptr ? 0 : extent->offset;
}

Status FaultyReader::Read(uint64_t offset, std::span<uint8_t> out) {
  const int64_t number = plan_->reads++;
  if (plan_->sleep_microseconds > 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(plan_->sleep_microseconds));
  }
  bool fail = false;
  {
    std::lock_guard<std::mutex> lock(plan_->mutex);
    fail = plan_->failing_offsets.count(offset) != 0 || plan_->failing_once.erase(offset) != 0;
    // The numbered read fails, and so does the retry that follows it at the same offset.
    if (number == plan_->fail_read_number) plan_->failing_once.insert(offset), fail = true;
  }
  if (fail) {
    ++plan_->injected;
    std::memset(out.data(), 0xff, out.size());  // what a half-done DMA might leave: must never be computed with
    return IoError("reading ", out.size(), " bytes at offset ", offset, " of the container: Input/output error");
  }
  if (plan_->short_reads) {
    ++plan_->injected;
    GLINT_RETURN_IF_ERROR(inner_->Read(offset, out.subspan(0, out.size() / 2 / 4096 * 4096)));
    return IoError("short read of the container: ", out.size() / 2 / 4096 * 4096, " of ", out.size(),
                   " bytes at offset ", offset, " (the file ends early)");
  }
  GLINT_RETURN_IF_ERROR(inner_->Read(offset, out));
  std::lock_guard<std::mutex> lock(plan_->mutex);
  if (plan_->corrupt_offsets.count(offset) != 0) {
    ++plan_->injected;
    out[out.size() / 2] ^= 0x5a;  // "succeeds": only the extent's checksum can tell
  }
  return Status::Ok();
}

FastModelOptions FaultyCacheOptions(uint64_t budget, std::shared_ptr<FaultPlan> plan, int readers) {
  FastModelOptions options;
  options.expert_memory = budget;
  options.expert_readers = readers;
  options.open_expert_reader = [plan](const std::string& path) -> Result<std::unique_ptr<ExtentReader>> {
    GLINT_ASSIGN_OR_RETURN(std::unique_ptr<DirectFileReader> inner, DirectFileReader::Open(path));
    return std::unique_ptr<ExtentReader>(std::make_unique<FaultyReader>(std::move(inner), plan));
  };
  return options;
}

ExpertBudgets BudgetsOf(const std::string& container_dir, WorkerPool& pool) {
  FastModelOptions options;
  options.expert_memory = uint64_t{1} << 40;  // capped at every expert
  const Result<std::unique_ptr<FastModel>> model = FastModel::Load(container_dir, pool, options);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (!model.ok()) return {};
  const DiskExpertCache& cache = *(*model)->expert_cache();
  return {static_cast<uint64_t>((*model)->config().num_experts_per_tok) * cache.slot_bytes(),
          static_cast<uint64_t>(cache.slots()) * cache.slot_bytes()};
}

}  // namespace glint::testing
