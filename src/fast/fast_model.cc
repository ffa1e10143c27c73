#include "fast/fast_model.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "base/file.h"
#include "base/log.h"
#include "base/timer.h"
#include "dist/lm_head_split.h"
#include "dist/row_exchange.h"
#include "kernels/vector_ops.h"
#include "model/forward_common.h"
#include "model/mhc.h"
#include "packed/fast_tensor_parallel.h"

namespace glint {

// One pass of the fast trunk (FastModel::RunPass): what every site reads.
struct FastPass {
  std::span<const BatchEntry> batch;
  std::span<const Segment> segments;      // the pass's rows, per sequence
  int64_t rows = 0;                       // n
  Trace* trace = nullptr;                 // null: nothing traced
  const ForcedChoices* forced = nullptr;  // null: the model chooses experts and keys
};

namespace {

// Reads one byte of every 4 KB page of `blob` (volatile: the reads are the point), faulting its pages in.
void TouchBytes(std::span<const uint8_t> blob) {
  constexpr size_t kPage = 4096;
  const volatile uint8_t* bytes = blob.data();
  for (size_t i = 0; i < blob.size(); i += kPage) (void)bytes[i];
}

// Reads one byte of every page of the source's blobs on the pool's threads: the pages of a mapped container come
// in now (only the tensors this model binds: this rank's, not the vision tower's) and, on a NUMA machine, are placed on
// the node of the threads that will read them (first touch).
void TouchPages(const FastWeightSource& source, WorkerPool& pool) {
  std::vector<std::span<const uint8_t>> blobs;
  for (const auto& [name, tensor] : source.tensors())
    blobs.insert(blobs.end(), tensor.blobs.begin(), tensor.blobs.end());
  pool.ParallelFor(static_cast<int64_t>(blobs.size()), 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t b = begin; b < end; ++b) TouchBytes(blobs[b]);
  });
}

// Pages of a container that were in the page cache before this load (another program read the file, it was written
// or copied moments ago, or part of it was evicted and read back in pieces) stay in the small folios they were cached
// in, whatever MappedFile::Open advised, and the products stream them slower: a container copied by `cp` (0 % on
// 2 MB pages) prefilled 512 tokens 1.05× slower than after reading it again (98 %), a 16-sequence decode step 1.03×
// (medians of six alternating pairs, docs/performance.md "Reading the container again for 2 MB
// pages"). Dropping this process's pages (Release: the same addresses, every view stays valid) and the file's cached
// pages (Uncache), then touching the tensors again, reads them from disk as 2 MB folios. It costs a cold read of
// those bytes, once; pages another process maps stay as they are.

// Whether a 2 MB window of the source's tensors, read again from disk, comes back on a 2 MB page: for a container
// with none of its resident bytes on 2 MB pages, where that may be the page cache (every page cached small) or the
// kernel and filesystem (no THP, no large folios). The first window aligned to 2 MB inside one blob; the mapping is
// at offset 0, so a window aligned in memory is aligned in the file too, as a PMD mapping needs.
enum class HugePageProbe { kNoWindow, kHuge, kSmall };
Result<HugePageProbe> ProbeHugePagesFromDisk(const FastWeightSource& source, const ContainerFile& container) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  for (const auto& [name, tensor] : source.tensors()) {
    for (std::span<const uint8_t> blob : tensor.blobs) {
      const uintptr_t begin = reinterpret_cast<uintptr_t>(blob.data());
      const uintptr_t window = (begin + kHuge - 1) / kHuge * kHuge;
      if (!container.Holds(blob) || window + kHuge > begin + blob.size()) continue;
      const std::span<const uint8_t> probe = blob.subspan(window - begin, kHuge);
      GLINT_RETURN_IF_ERROR(container.Release(probe));
      GLINT_RETURN_IF_ERROR(container.Uncache(probe));
      TouchBytes(probe);
      return container.Resident().huge_page_bytes > 0 ? HugePageProbe::kHuge : HugePageProbe::kSmall;
    }
  }
  return HugePageProbe::kNoWindow;  // no blob holds a whole aligned window (a tiny model): none could be 2 MB
}

Status ReadAgainOnHugePages(const FastWeightSource& source, WorkerPool& pool, FastLoadReport& report) {
  const ContainerFile* container = source.container();
  if (container == nullptr) return Status::Ok();
  const MappedFile::Residency before = container->Resident();
  report.small_pages = FastLoadReport::SmallPages::kOnHugePages;
  if (!WorthReadingAgainForHugePages(before)) return Status::Ok();
  if (before.huge_page_bytes == 0) {
    GLINT_ASSIGN_OR_RETURN(const HugePageProbe probe, ProbeHugePagesFromDisk(source, *container));
    if (probe == HugePageProbe::kSmall) report.small_pages = FastLoadReport::SmallPages::kNoneForThisFile;
    if (probe != HugePageProbe::kHuge) return Status::Ok();
  }
  const double share = static_cast<double>(before.huge_page_bytes) / static_cast<double>(before.resident_bytes);
  LogInfo("'", container->path(), "': ", static_cast<int>(100 * share), "% of its ", before.resident_bytes >> 20,
          " MiB on 2 MB pages (the page cache held it in small pages); reading it again from disk for 2 MB pages "
          "(--keep-small-pages skips this)");
  Stopwatch watch;
  // The whole mapping, not the tensors' blobs: the checksum pass also read the pages between them (an extent's
  // padding, tensors this rank does not bind), and one small page left cached inside a 2 MB range keeps the whole
  // range from coming back as one folio (on make-tiny's expert-heavy preset: 49 % before and after). Touched again
  // below: the tensors only.
  GLINT_RETURN_IF_ERROR(container->Release(container->bytes()));
  GLINT_RETURN_IF_ERROR(container->Uncache(container->bytes()));
  TouchPages(source, pool);
  report.small_pages = FastLoadReport::SmallPages::kReadAgain;
  report.huge_page_share_before_reread = share;
  report.reread_seconds = watch.Seconds();
  return Status::Ok();
}

// The checksum pass at load (io/weight_container.h): every tensor of `source` that is a view of its container,
// checked against the header's sums on the pool's threads, one tensor (or routed-expert extent) per task. Routed
// experts are skipped when an expert cache reads them: it checks each extent as it reads it. Run before any tensor
// is sliced or copied, while every view still covers the whole stored tensor. `release_pages`: under several ranks,
// which keep only slices (tensor parallel) or drop tensors (lm_head outside rank 0's group), the hashed pages leave
// the resident set again, or the rank would hold whole tensors (tests/mpi/cli_rss.sh); one process keeps them all,
// resident, and releasing would only fault them in a second time (≈ 2 s more to load the bench model). Returns the
// bytes hashed.
Result<uint64_t> VerifyContainerTensors(const FastWeightSource& source, WorkerPool& pool, bool experts_checked_later,
                                        bool release_pages) {
  const ContainerFile* container = source.container();
  if (container == nullptr) return uint64_t{0};
  std::vector<const ContainerEntry*> todo;
  std::set<int64_t> extents;
  uint64_t bytes = 0;
  for (const auto& [name, tensor] : source.tensors()) {
    const ContainerEntry* entry = container->Find(name);
    if (entry == nullptr) return InternalError("tensor '", name, "' is not in the container it was read from");
    if (entry->extent >= 0 && (experts_checked_later || !extents.insert(entry->extent).second)) continue;
    todo.push_back(entry);
    if (entry->extent >= 0) {
      bytes += container->extents()[entry->extent].bytes;
    } else {
      for (const auto& blob : entry->blobs) bytes += blob.size();
    }
  }
  std::vector<Status> errors(todo.size());
  pool.ParallelFor(static_cast<int64_t>(todo.size()), 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) errors[t] = container->VerifyEntry(*todo[t], release_pages);
  });
  for (const Status& error : errors) GLINT_RETURN_IF_ERROR(error);
  return bytes;
}

// The plan for a source whose column splits must land on `column_group` (its int8 / int4 K-group). With an expert
// cache the routed experts stay whole at any --tp (by id over every rank): the cache reads and holds whole experts,
// one container extent each, where a column slice of down_proj would be one run per 16-row block
// (docs/distributed.md "The fast path").
Result<ShardPlan> FastShardPlan(const ModelConfig& config, const FastModelOptions& options, int64_t column_group) {
  ModelParallel parallel = options.parallel;
  parallel.column_group = column_group;
  parallel.whole_experts = parallel.whole_experts || options.expert_memory > 0;
  return MakeShardPlan(config, parallel);
}

}  // namespace

bool WorthReadingAgainForHugePages(const MappedFile::Residency& residency) {
  return static_cast<double>(residency.huge_page_bytes) <
         kHugePageShareGoal * static_cast<double>(residency.resident_bytes);
}

FastModel::FastModel(ModelConfig config, FastWeightSource source, FastWeights weights, WorkerPool& pool,
                     const FastModelOptions& options, ShardPlan plan)
    : config_(std::move(config)),
      plan_(std::move(plan)),
      local_(LocalConfig(config_, plan_)),
      comm_(options.parallel.comm),
      source_(std::move(source)),
      weights_(std::move(weights)),
      pool_(pool),
      isa_(options.isa),
      max_tokens_per_pass_(std::max<int64_t>(1, options.max_tokens_per_pass)) {
  load_report_.weight_bytes = source_.TotalBytes();
  load_report_.resident_bytes = load_report_.weight_bytes;
  if (plan_.head_split()) {  // this rank's share of a split lm_head: rank 0's a view of its whole copy
    head_share_ = weights_.lm_head;
    const IndexRange mine = plan_.head_rows_of_rank[plan_.rank];
    if (plan_.rank == 0) head_share_.int8 = Int8RowRange(weights_.lm_head.int8, mine.begin, mine.end);
  }
}

Status FastModel::AttachExpertCache(const FastModelOptions& options) {
  const ContainerFile* container = source_.container();
  if (container == nullptr) {
    return FailedPrecondition("--expert-memory reads routed experts from a `glint convert` container (model.glint); ",
                              "this model was converted at load: convert it once with `glint convert`");
  }
  std::unique_ptr<ExtentReader> reader;
  if (options.open_expert_reader) {
    GLINT_ASSIGN_OR_RETURN(reader, options.open_expert_reader(container->path()));
  } else {
    GLINT_ASSIGN_OR_RETURN(reader, DirectFileReader::Open(container->path()));
  }
  std::unique_ptr<UringExtentReader> uring;
  if (options.expert_io == ExpertIo::kUring) {
    if (options.open_expert_reader) {
      return InvalidArgument("--expert-io uring reads the container itself; an injected reader needs pread");
    }
    GLINT_ASSIGN_OR_RETURN(std::unique_ptr<DirectFileReader> file, DirectFileReader::Open(container->path()));
    GLINT_ASSIGN_OR_RETURN(uring, UringExtentReader::Open(std::move(file), std::max(1, options.expert_readers)));
  }
  GLINT_ASSIGN_OR_RETURN(expert_cache_,
                         DiskExpertCache::Create(weights_, *container, config_.num_experts_per_tok, std::move(reader),
                                                 {options.expert_memory, options.expert_readers, options.expert_policy},
                                                 std::move(uring)));
  context_->experts = expert_cache_.get();
  expert_prefetch_ = options.expert_prefetch;
  if (!options.expert_profile.empty()) GLINT_RETURN_IF_ERROR(KeepProfiledExperts(options.expert_profile));
  // Everything but the routed experts stays resident: read those pages in now (the mapping was not populated).
  uint64_t resident = 0;
  volatile uint8_t sink = 0;
  for (const ContainerEntry& entry : container->entries()) {
    if (entry.extent >= 0) continue;
    const StoredTensor* held = source_.Find(entry.name);  // this rank's part (lm_head rows), or none of it
    if (held == nullptr) continue;
    for (const auto& blob : held->blobs) {
      for (size_t i = 0; i < blob.size(); i += 4096) sink = sink + blob[i];
      resident += blob.size();
    }
  }
  load_report_.resident_bytes = resident;
  load_report_.expert_cache_bytes = static_cast<uint64_t>(expert_cache_->slots()) * expert_cache_->slot_bytes();
  load_report_.expert_read_buffer_bytes = expert_cache_->read_buffer_bytes();
  load_report_.weight_bytes = resident + load_report_.expert_cache_bytes + load_report_.expert_read_buffer_bytes;
  return Status::Ok();
}

Status FastModel::KeepProfiledExperts(const std::string& path) {
  GLINT_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  Result<ExpertTrace> parsed = ParseExpertTrace(text, config_.num_hidden_layers);
  if (!parsed.ok()) return parsed.status().WithContext(StrCat("--expert-profile '", path, "'"));
  const ExpertTrace& profile = *parsed;
  // The cache numbers its layers as the model's MoE layers in order, then the MTP layer.
  std::map<int64_t, int64_t> cache_layer;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    if (config_.mlp_kinds[l] == MlpKind::kMoe) cache_layer.emplace(l, static_cast<int64_t>(cache_layer.size()));
  }
  if (weights_.mtp != nullptr) cache_layer.emplace(config_.num_hidden_layers, static_cast<int64_t>(cache_layer.size()));
  std::vector<std::pair<int64_t, int64_t>> hot;  // (cache layer, expert), hottest first
  for (const auto& [hidden_layer, expert] : HottestExperts(profile)) {
    const auto layer = cache_layer.find(hidden_layer);
    if (layer == cache_layer.end()) {
      return InvalidArgument("--expert-profile '", path, "': layer ", hidden_layer,
                             " has no routed experts in this model");
    }
    hot.emplace_back(layer->second, expert);
  }
  GLINT_ASSIGN_OR_RETURN(const int64_t kept, expert_cache_->KeepHot(hot));
  LogInfo("expert cache: kept the ", kept, " most used experts of '", path, "' (", hot.size(), " in the profile, ",
          expert_cache_->slots(), " slots)");
  return Status::Ok();
}

Result<std::unique_ptr<FastModel>> FastModel::Create(ModelConfig config, FastWeightSource source, WorkerPool& pool,
                                                     const FastModelOptions& options) {
  GLINT_ASSIGN_OR_RETURN(ShardPlan plan, FastShardPlan(config, options, SourceColumnGroup(source)));
  return Assemble(std::move(config), std::move(source), std::move(plan), false, pool, options);
}

Result<std::unique_ptr<FastModel>> FastModel::Assemble(ModelConfig config, FastWeightSource source, ShardPlan plan,
                                                       bool sliced, WorkerPool& pool, const FastModelOptions& options) {
  if (!IsaSupported(options.isa)) {
    return InvalidArgument("this CPU does not support the '", IsaName(options.isa), "' kernels");
  }
  if (options.mla_attention == mla::AttentionPrecision::kBf16 && !mla::AttendBf16Supported()) {
    return InvalidArgument("bf16 MLA attention needs AVX512-BF16 (vdpbf16ps), which this CPU does not report");
  }
  if (config.hc_mult > 8) return Unimplemented("the fast path supports hc_mult ≤ 8, got ", config.hc_mult);
  if (config.kv_lora_rank % kInt8RowBlock != 0 || config.v_head_dim % kInt8RowBlock != 0) {
    return Unimplemented("the fast path needs kv_lora_rank and v_head_dim to be multiples of 16 (got ",
                         config.kv_lora_rank, " and ", config.v_head_dim, ")");
  }
  if (plan.dp_attention && (options.expert_memory > 0 || !options.expert_trace.empty())) {
    return Unimplemented("--dp-attention does not run with --expert-memory or --expert-trace yet; leave them out");
  }
  const LocalExperts local = plan.local_experts();
  // The vision tower's tensors ("vision.*" in a container) belong to the image encoder, which maps the container
  // itself, on rank 0 only (docs/distributed.md "Images"): not this model's weights, never read in by it.
  source.Drop([&](const std::string& name) { return IsOtherRanksExpert(name, local) || name.starts_with("vision."); });
  Stopwatch verify_watch;
  uint64_t verified_bytes = 0;
  if (options.verify_checksums) {
    GLINT_ASSIGN_OR_RETURN(verified_bytes,
                           VerifyContainerTensors(source, pool, options.expert_memory > 0, plan.distributed()));
  }
  const double verify_seconds = verified_bytes > 0 ? verify_watch.Seconds() : 0.0;
  if (!sliced) GLINT_RETURN_IF_ERROR(SliceFastSource(source, FastTensorSlices(config, plan)));
  // Only rank 0's group holds lm_head rows, except under --lm-head-split-rows, where every other rank holds its
  // share of the vocabulary beside rank 0's whole copy (rank 0 also computes passes with more logit rows).
  const IndexRange head_rows =
      plan.head_split() && plan.rank != 0 ? plan.head_rows_of_rank[plan.rank] : plan.slices().vocab_rows;
  GLINT_RETURN_IF_ERROR(KeepLmHeadRows(source, head_rows));
  const bool with_mtp = config.HasMtp() && source.Find("mtp.eh_proj") != nullptr;
  const ModelConfig local_config = LocalConfig(config, plan);
  GLINT_ASSIGN_OR_RETURN(FastWeights weights, BindFastWeights(source, local_config, with_mtp, local,
                                                              plan.slices().shared_columns.count(), head_rows.count()));
  auto model = std::unique_ptr<FastModel>(
      new FastModel(std::move(config), std::move(source), std::move(weights), pool, options, std::move(plan)));
  model->context_ = std::make_unique<FastContext>(pool, options.isa, model->local_);
  model->context_->attention = mla::AttentionOnTiles(options.mla_attention, options.isa);
  model->load_report_.verify_seconds = verify_seconds;
  model->load_report_.verified_bytes = verified_bytes;
  if (!options.expert_trace.empty()) {
    const ModelConfig& c = model->config_;
    const int64_t moe_layers = std::count(c.mlp_kinds.begin(), c.mlp_kinds.end(), MlpKind::kMoe) + (with_mtp ? 1 : 0);
    GLINT_ASSIGN_OR_RETURN(model->expert_trace_,
                           ExpertTraceWriter::Open(options.expert_trace, moe_layers, c.n_routed_experts,
                                                   c.num_experts_per_tok, c.num_hidden_layers));
  }
  return model;
}

void FastModel::RecordRouting(int64_t layer, const std::vector<RouterChoice>& choices) const {
  if (expert_trace_ == nullptr) return;
  std::vector<std::vector<int32_t>> rows;
  rows.reserve(choices.size());
  for (const RouterChoice& choice : choices) rows.emplace_back(choice.experts.begin(), choice.experts.end());
  expert_trace_->Record(trace_step_, layer, rows);
}

Result<std::unique_ptr<FastModel>> FastModel::Load(const std::string& dir, WorkerPool& pool,
                                                   const FastModelOptions& options) {
  Stopwatch watch;
  GLINT_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  const std::string container_path = JoinPath(dir, kContainerFileName);
  FastWeightSource source;
  const bool from_container = PathExists(container_path);
  ShardPlan plan;
  if (from_container) {
    // Mapped without populating: only this model's tensors are read in (TouchPages below), not the whole file —
    // not the vision tower's (the image encoder's, on rank 0), not another rank's experts or slices (Assemble cuts
    // the source to this rank's), and with an expert cache not the routed experts (AttachExpertCache reads the
    // rest).
    GLINT_ASSIGN_OR_RETURN(ContainerFile container, ContainerFile::Open(container_path));
    GLINT_ASSIGN_OR_RETURN(source, SourceFromContainer(std::make_unique<ContainerFile>(std::move(container))));
    GLINT_ASSIGN_OR_RETURN(plan, FastShardPlan(config, options, SourceColumnGroup(source)));
  } else {
    GLINT_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(dir));
    FastConvertOptions convert = options.convert;
    if (options.experts.has_value()) convert.experts = *options.experts;
    const int64_t int4_group = convert.experts == ExpertWeights::kInt4 ? convert.int4_group : 0;
    GLINT_ASSIGN_OR_RETURN(plan, FastShardPlan(config, options, ConvertColumnGroup(convert.group, int4_group)));
    convert.local = plan.local_experts();
    convert.lm_head = plan.computes_logits() || plan.head_split();  // KeepLmHeadRows narrows it
    convert.slices = FastTensorSlices(config, plan);                // convert only this rank's slices
    GLINT_ASSIGN_OR_RETURN(auto tensors, PlanFastWeights(checkpoint, config, convert));
    GLINT_RETURN_IF_ERROR(MaterializeFastWeights(tensors, pool, source, options.progress));
  }
  GLINT_ASSIGN_OR_RETURN(auto model,
                         Assemble(std::move(config), std::move(source), plan, !from_container, pool, options));
  if (options.experts.has_value() && model->weights_.experts != *options.experts) {
    return InvalidArgument("'", container_path, "' holds ", ExpertWeightsName(model->weights_.experts),
                           " routed experts, not the requested ", ExpertWeightsName(*options.experts),
                           "; the expert format is chosen when converting (glint convert --experts ",
                           ExpertWeightsName(*options.experts), ")");
  }
  if (from_container && options.populate && options.expert_memory == 0) {
    TouchPages(model->source_, pool);
    if (options.reread_small_pages) {
      GLINT_RETURN_IF_ERROR(ReadAgainOnHugePages(model->source_, pool, model->load_report_));
    } else {
      model->load_report_.small_pages = FastLoadReport::SmallPages::kKept;
    }
  }
  if (options.expert_memory > 0) GLINT_RETURN_IF_ERROR(model->AttachExpertCache(options));
  model->load_report_.from_container = from_container;
  model->load_report_.seconds = watch.Seconds();
  if (const ContainerFile* container = model->source_.container(); container != nullptr) {
    const MappedFile::Residency residency = container->Resident();
    model->load_report_.container_resident_bytes = residency.resident_bytes;
    model->load_report_.container_huge_page_bytes = residency.huge_page_bytes;
  }
  return model;
}

Status FastModel::WeightsDamage() const { return expert_cache_ != nullptr ? expert_cache_->damage() : Status::Ok(); }

Status FastModel::SumMoeOverRanks(float* partial, int64_t rows) const {
  if (!plan_.distributed()) return Status::Ok();
  const int64_t count = rows * config_.hidden_size;
  std::vector<Status>& row_errors = context_->row_errors;
  if (expert_cache_ == nullptr || static_cast<int64_t>(row_errors.size()) != rows) {
    return comm_->AllReduceSum(std::span<float>(partial, count)).WithContext("summing the MoE outputs over the ranks");
  }
  // With an expert cache a read can fail on one rank only: its flags (1 per failed row) ride in the same
  // all-reduce, one float per row, so every rank fails the same rows (docs/expert-cache.md "Faults").
  std::vector<float>& fused = moe_fused_;
  fused.resize(count + rows);
  std::memcpy(fused.data(), partial, count * sizeof(float));
  for (int64_t r = 0; r < rows; ++r) fused[count + r] = row_errors[r].ok() ? 0.0f : 1.0f;
  GLINT_RETURN_IF_ERROR(comm_->AllReduceSum(fused).WithContext("summing the MoE outputs over the ranks"));
  std::memcpy(partial, fused.data(), count * sizeof(float));
  for (int64_t r = 0; r < rows; ++r) {
    if (fused[count + r] > 0 && row_errors[r].ok()) {
      row_errors[r] = IoError(
          "a routed expert this token needed could not be read on another rank (its log and "
          "error name the expert)");
    }
  }
  return Status::Ok();
}

Result<Communicator*> FastModel::TensorGroup() const {
  if (tp_comm_ == nullptr) {
    // Made at the start of the first pass (RunPass), which every rank reaches at the same point of the same batch
    // (lockstep), not at load: a rank that fails to load must not leave the others inside this collective over every
    // rank. The groups are the ep ranks, each ordered by tp rank.
    GLINT_ASSIGN_OR_RETURN(tp_comm_, comm_->Split(plan_.ep_rank(), plan_.tp_rank()));
  }
  return tp_comm_.get();
}

Status FastModel::SumOverTensorGroup(bool split, float* partial, int64_t rows, const char* what) const {
  if (!split || !plan_.tensor_parallel()) return Status::Ok();
  GLINT_ASSIGN_OR_RETURN(Communicator * group, TensorGroup());
  return group->AllReduceSum(std::span<float>(partial, rows * config_.hidden_size))
      .WithContext(StrCat("summing the ", what, " outputs over the tp group"));
}

Status FastModel::CheckOptions(const ForwardOptions& options) const {
  if (options.kda_algorithm != KdaAlgorithm::kChunked) {
    return Unimplemented(
        "the fast path computes KDA in the chunked form only (one-token parts by the fused decode "
        "step), not ForwardOptions::kda_algorithm recurrent; the reference path implements it");
  }
  if (options.dsa.form != MlaForm::kAbsorbed) {
    return Unimplemented(
        "the fast path computes MLA in the absorbed form only, not ForwardOptions::dsa.form "
        "naive; the reference path implements it");
  }
  if (options.dsa.selection != KeySelection::kIndexer) {
    return Unimplemented("the fast path selects keys with the indexer only, not ForwardOptions::dsa.selection ",
                         options.dsa.selection == KeySelection::kDense ? "dense" : "forced",
                         "; force choices through ForcedChoices");
  }
  return Status::Ok();
}

Status FastModel::ForwardBatch(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                               const ForwardOptions&, Trace* trace, const ForcedChoices* forced) const {
  std::lock_guard<std::mutex> lock(mutex_);
  ++trace_step_;
  last_step_ = FastStepStats{};
  last_step_.experts_active.assign(config_.num_hidden_layers, 0);
  context_->ResetStats();
  context_->profile.Start();
  GLINT_RETURN_IF_ERROR(plan_.dp_attention ? RunDpPasses(batch, outputs, trace, forced)
                                           : RunPasses(batch, outputs, trace, forced));
  last_step_.weight_bytes_read = context_->weight_bytes_read;
  last_step_.dense_products = context_->dense_products;
  last_step_.expert_products = context_->expert_products;
  last_step_.indexer_seconds = context_->indexer_seconds;
  last_step_.indexer_key_bytes = context_->indexer_key_bytes;
  context_->profile.Stop();
  last_step_.part_seconds = context_->profile.seconds();
  return Status::Ok();
}

Status FastModel::RunPasses(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs, Trace* trace,
                            const ForcedChoices* forced) const {
  // Passes of at most max_tokens_per_pass rows; an entry longer than that continues in the next pass from the
  // state the previous pass left (a chunked prefill). State copies (prefix-cache checkpoints, the rollback
  // snapshot) go with the segment that holds their position; FastKda splits its recurrence there, so neither
  // segments nor passes end at them. A pass ends only when full, and an entry that goes on continues in the next
  // pass: no pass holds two segments of one sequence.
  std::vector<Segment> segments;
  int64_t rows = 0;
  for (size_t e = 0; e < batch.size(); ++e) {
    const int64_t tokens = static_cast<int64_t>(batch[e].tokens.size());
    const int64_t start = batch[e].state->tokens;                                           // position before this call
    const std::vector<std::pair<int64_t, std::byte*>> copies = EntryStateCopies(batch[e]);  // (rows of the entry, …)
    size_t next_copy = 0;
    for (int64_t consumed = 0; consumed < tokens && outputs[e].error.ok();) {  // a failed entry runs no further
      const int64_t take = std::min(tokens - consumed, max_tokens_per_pass_ - rows);
      Segment segment{static_cast<int>(e), rows, take, start + consumed, consumed, {}};
      // ≥ 1 row before each copy: CheckBatch validated the positions.
      for (; next_copy < copies.size() && copies[next_copy].first <= consumed + take; ++next_copy) {
        segment.state_copies.emplace_back(copies[next_copy].first - consumed, copies[next_copy].second);
      }
      segments.push_back(std::move(segment));
      rows += take;
      consumed += take;
      if (rows == max_tokens_per_pass_) {
        GLINT_RETURN_IF_ERROR(RunPassScoped(FastPass{batch, segments, rows, trace, forced}, outputs));
        segments.clear();
        rows = 0;
      }
    }
  }
  if (!segments.empty()) GLINT_RETURN_IF_ERROR(RunPassScoped(FastPass{batch, segments, rows, trace, forced}, outputs));
  return Status::Ok();
}

void FastModel::SetProfiling(bool on) const {
  std::lock_guard<std::mutex> lock(mutex_);
  context_->profile.set_enabled(on);
}

// An expert read that failed for some rows fails only their sequences (outputs[i].error): rows never mix across
// sequences, so the others are exact; a failed sequence runs no further segment.
Status FastModel::RunPassScoped(const FastPass& pass, std::vector<EntryOutput>& outputs) const {
  context_->row_errors.assign(pass.rows, Status::Ok());
  Status status = RunPass(pass, outputs);
  std::vector<Status> row_errors = std::move(context_->row_errors);
  context_->row_errors.clear();
  GLINT_RETURN_IF_ERROR(status);
  for (const Segment& s : pass.segments) {
    for (int64_t i = 0; i < s.count; ++i) {
      if (!row_errors[s.row + i].ok()) {
        if (outputs[s.sequence].error.ok()) outputs[s.sequence].error = row_errors[s.row + i];
        break;
      }
    }
  }
  return Status::Ok();
}

namespace {

// Traces are per sequence: each segment's rows under its sequence's names (a sequence spanning several passes
// records a name once per pass, in order). values [n, width].
void TraceRows(const FastPass& pass, const std::string& name, const float* values, int64_t width) {
  if (pass.trace == nullptr) return;
  for (const Segment& s : pass.segments) {
    if (!pass.trace->Wants(s.sequence)) continue;
    pass.trace->Floats(s.sequence, name, std::span<const float>(values + s.row * width, s.count * width),
                       {s.count, width});
  }
}

// The sublayer's input and output of one site, e.g. "layer.3.attn" → layer.3.attn_in, layer.3.attn_out.
void TraceSublayer(const FastPass& pass, const std::string& name, FastActivations& act, int64_t d) {
  TraceRows(pass, name + "_in", act.sublayer_in.data(), d);
  TraceRows(pass, name + "_out", act.sublayer_out.data(), d);
}

// Each segment's state in KDA layer `layer`: its slot's view and the view in each of its copies' destinations.
std::vector<KdaSegmentState> KdaStates(const FastPass& pass, int64_t layer) {
  std::vector<KdaSegmentState> states;  // [segments]
  for (const Segment& s : pass.segments) {
    const SequenceState& state = *pass.batch[s.sequence].state;
    KdaSegmentState& at = states.emplace_back(KdaSegmentState{KdaLayerState(state, layer)});
    for (const auto& [rows, destination] : s.state_copies) {
      // No destination: a split of the recurrence only (a checkpoint position whose checkpoint the cache has).
      at.copies.push_back(destination != nullptr ? KdaLayerStateIn(*state.layout, layer, destination) : KdaStateView{});
    }
  }
  return states;
}

// Forced choices of layer `layer` per pass row (null: the model chooses); empty when none are forced. ForcedChoices
// are indexed by the entry's token, a segment's row i being token first_index + i.
template <typename Choice>
std::vector<const Choice*> ForcedRows(const FastPass& pass, const std::vector<std::vector<Choice>>* per_layer,
                                      int64_t layer) {
  if (per_layer == nullptr || layer >= static_cast<int64_t>(per_layer->size())) return {};
  const std::vector<Choice>& forced = (*per_layer)[layer];
  std::vector<const Choice*> rows(pass.rows, nullptr);  // [n]
  for (const Segment& s : pass.segments) {
    for (int64_t i = 0; i < s.count; ++i) {
      const int64_t index = s.first_index + i;
      if (index < static_cast<int64_t>(forced.size())) rows[s.row + i] = &forced[index];
    }
  }
  return rows;
}

}  // namespace

void FastModel::Embed(const FastPass& pass, FastActivations& act) const {
  const int64_t n = pass.rows, d = config_.hidden_size, hc = config_.hc_mult;
  float* streams = act.streams.Floats(n * hc * d);
  act.sublayer_in.Floats(n * d);
  act.sublayer_out.Floats(n * d);
  act.site.resize(n);
  // X: [n, hc, D], every stream starts as the token embedding.
  for (const Segment& s : pass.segments) {
    for (int64_t i = 0; i < s.count; ++i) {
      float* x = streams + (s.row + i) * hc * d;
      if (const float* image = ReplacedEmbedding(pass.batch[s.sequence], s.first_index + i, d)) {
        std::memcpy(x, image, d * sizeof(float));  // an image row (docs/vision.md)
      } else {
        weights_.embed.Row(pass.batch[s.sequence].tokens[s.first_index + i], x);
      }
      for (int64_t k = 1; k < hc; ++k) std::memcpy(x + k * d, x, d * sizeof(float));
    }
  }
}

Status FastModel::Attention(const FastPass& pass, int64_t l, const std::string& prefix, FastActivations& act) const {
  FastContext& ctx = *context_;
  const FastLayerWeights& layer = weights_.layers[l];
  if (layer.attention_kind == AttentionKind::kKda) {
    GLINT_RETURN_IF_ERROR(
        FastKda(ctx, layer.kda, act.sublayer_in.data(), pass.segments, KdaStates(pass, l), act.sublayer_out.data()));
    return SumOverTensorGroup(plan_.kda_split, act.sublayer_out.data(), pass.rows, "KDA");
  }
  const bool forcing = pass.forced != nullptr && l < static_cast<int64_t>(pass.forced->attended.size()) &&
                       !pass.forced->attended[l].empty();
  const std::vector<const std::vector<int64_t>*> forced =
      ForcedRows(pass, forcing ? &pass.forced->attended : nullptr, l);
  std::vector<DsaCache> caches;  // [segments] this layer's view in each sequence's memory
  for (const Segment& s : pass.segments) caches.push_back(DsaLayerCache(*pass.batch[s.sequence].state, l));
  DsaTrace selections;
  GLINT_RETURN_IF_ERROR(FastDsa(ctx, layer.dsa, act.sublayer_in.data(), pass.segments, caches, forced,
                                act.sublayer_out.data(), pass.trace != nullptr ? &selections : nullptr));
  GLINT_RETURN_IF_ERROR(SumOverTensorGroup(plan_.mla_split, act.sublayer_out.data(), pass.rows, "MLA"));
  if (pass.trace == nullptr) return Status::Ok();
  for (const Segment& s : pass.segments) {
    if (!pass.trace->Wants(s.sequence)) continue;
    const int64_t width = config_.DenseRegimeTokens();
    pass.trace->Ints(s.sequence, prefix + "indexer_selected",
                     PadSelections(std::span(selections.selected).subspan(s.row, s.count), width), {s.count, width});
  }
  return Status::Ok();
}

Status FastModel::Ffn(const FastPass& pass, int64_t l, const std::string& prefix, FastActivations& act) const {
  FastContext& ctx = *context_;
  const FastLayerWeights& layer = weights_.layers[l];
  const int64_t n = pass.rows;
  if (layer.mlp_kind == MlpKind::kDense) {
    FastMlp(ctx, layer.mlp, act.sublayer_in.data(), n, act.sublayer_out.data());
    return SumOverTensorGroup(plan_.mlp_split, act.sublayer_out.data(), n, "dense MLP");
  }
  if (plan_.dp_attention) return DpMoe(pass, l, act.sublayer_in.data(), n, act.sublayer_out.data());
  const std::vector<const RouterChoice*> forced =
      ForcedRows(pass, pass.forced != nullptr ? &pass.forced->router : nullptr, l);
  std::vector<RouterChoice> choices;
  int64_t active = 0;
  ctx.prefetch_next = nullptr;
  for (int64_t next = l + 1; expert_prefetch_ && next < config_.num_hidden_layers; ++next) {
    if (weights_.layers[next].mlp_kind == MlpKind::kMoe) {
      ctx.prefetch_next = &weights_.layers[next].moe;
      break;
    }
  }
  const Status moe =
      FastMoe(ctx, layer.moe, act.sublayer_in.data(), n, forced, act.sublayer_out.data(),
              pass.trace != nullptr || expert_trace_ ? &choices : nullptr, &active, plan_.local_experts());
  ctx.prefetch_next = nullptr;
  GLINT_RETURN_IF_ERROR(moe);
  RecordRouting(l, choices);
  GLINT_RETURN_IF_ERROR(SumMoeOverRanks(act.sublayer_out.data(), n));
  last_step_.experts_active[l] = std::max(last_step_.experts_active[l], active);
  if (pass.trace == nullptr) return Status::Ok();
  for (const Segment& s : pass.segments) {
    if (!pass.trace->Wants(s.sequence)) continue;
    std::vector<int32_t> experts;
    for (int64_t i = 0; i < s.count; ++i) {
      experts.insert(experts.end(), choices[s.row + i].experts.begin(), choices[s.row + i].experts.end());
    }
    pass.trace->Ints(s.sequence, prefix + "moe_experts", experts, {s.count, config_.num_experts_per_tok});
  }
  return Status::Ok();
}

// Mean of the streams → RMSNorm → lm_head, for the rows asked for; the final normed hidden where MTP wants it.
Status FastModel::Head(const FastPass& pass, FastActivations& act, std::vector<EntryOutput>& outputs) const {
  FastContext& ctx = *context_;
  const ModelConfig& c = config_;
  const int64_t n = pass.rows, d = c.hidden_size, hc = c.hc_mult;
  float* normed = act.final_normed.Floats(n * d);
  const float* streams = act.streams.data();
  ctx.pool.Run(n, [&](int64_t t, int) {
    float* out = normed + t * d;
    vec::Scale(1.0f / static_cast<float>(hc), streams + t * hc * d, d, out);
    for (int64_t k = 1; k < hc; ++k) vec::Axpy(1.0f / static_cast<float>(hc), streams + (t * hc + k) * d, d, out);
    vec::RmsNorm(out, weights_.final_norm, d, c.rms_norm_eps, out);
  });
  TraceRows(pass, "final.normed", normed, d);
  if (plan_.dp_attention) return DpHead(pass, normed, outputs);
  std::vector<std::pair<int64_t, float*>> logit_rows;  // (pass row, destination: null on ranks other than 0)
  const bool receives = plan_.receives_logits();
  for (const Segment& s : pass.segments) {
    const BatchEntry& entry = pass.batch[s.sequence];
    const int64_t tokens = static_cast<int64_t>(entry.tokens.size());
    float* logits = receives ? outputs[s.sequence].logits.data() : nullptr;
    for (int64_t i = 0; i < s.count; ++i) {
      const int64_t index = s.first_index + i;
      if (entry.logits == LogitsWanted::kAll) {
        logit_rows.push_back({s.row + i, receives ? logits + index * c.vocab_size : nullptr});
      } else if (entry.logits == LogitsWanted::kLast && index == tokens - 1) {
        logit_rows.push_back({s.row + i, logits});
      }
      if (entry.want_hidden) {
        std::memcpy(outputs[s.sequence].hidden.data() + index * d, normed + (s.row + i) * d, d * sizeof(float));
      }
    }
  }
  const int64_t count = static_cast<int64_t>(logit_rows.size());
  if (count == 0 || !(plan_.computes_logits() || plan_.splits_head(count))) return Status::Ok();
  float* gathered = act.logit_inputs.Floats(count * d);
  for (int64_t r = 0; r < count; ++r)
    std::memcpy(gathered + r * d, normed + logit_rows[r].first * d, d * sizeof(float));
  float* logits = act.logits.Floats(count * c.vocab_size);
  GLINT_RETURN_IF_ERROR(LmHead(gathered, count, logits, logits));
  for (int64_t r = 0; r < count && receives; ++r) {
    std::memcpy(logit_rows[r].second, logits + r * c.vocab_size, c.vocab_size * sizeof(float));
  }
  return Status::Ok();
}

Status FastModel::LmHead(const float* normed, int64_t rows, float* out, float* logits) const {
  if (rows > 0 && plan_.splits_head(rows)) {  // every rank its share of the vocabulary, rank 0 gathers
    const int64_t width = head_share_.rows();
    context_->Linear(head_share_, normed, config_.hidden_size, rows, out, width);
    lm_head_rows_ += rows;
    std::vector<float> local(out, out + rows * width);
    return GatherLogitColumns(plan_.head_rows_of_rank, config_.vocab_size, comm_, local, rows, logits);
  }
  if (rows == 0 || !plan_.computes_logits()) return Status::Ok();             // not rank 0's group: only rank 0 samples
  const int64_t width = weights_.lm_head.rows(), vocab = config_.vocab_size;  // width: this rank's vocabulary rows
  context_->Linear(weights_.lm_head, normed, config_.hidden_size, rows, out, width);
  lm_head_rows_ += rows;
  if (!plan_.vocab_split) return Status::Ok();  // rank 0 holds it whole: `out` is the logits
  // Split by vocabulary over rank 0's tp group (made by RunPass before any lm_head call).
  GLINT_ASSIGN_OR_RETURN(Communicator * group, TensorGroup());
  std::vector<float> local(out, out + rows * width);
  return GatherLogitRows(plan_, vocab, group, local, rows, logits);
}

// The trunk, as the model card draws it (docs/model-glm53.md §2–§4) and as ReferenceModel::ForwardOne runs it, over
// the rows of every sequence of the pass at once: embed into hc streams; per layer an attention site and an FFN
// site, each "mHC read → RMSNorm → sublayer → mHC write"; then the head.
Status FastModel::RunPass(const FastPass& pass, std::vector<EntryOutput>& outputs) const {
  FastContext& ctx = *context_;
  FastActivations& act = ctx.act;
  const int64_t n = pass.rows, d = config_.hidden_size;
  last_step_.rows += n;
  // Every rank makes the tp group here, at the same pass: lm_head's gather needs it even when no trunk sublayer is
  // split, and only rank 0's group reaches lm_head.
  if (plan_.tensor_parallel()) GLINT_RETURN_IF_ERROR(TensorGroup().status());
  if (plan_.dp_attention && n == 0) return RunEmptyDpPass(pass, outputs);
  Embed(pass, act);
  float* streams = act.streams.data();
  float* h = act.sublayer_in.data();
  float* y = act.sublayer_out.data();
  MhcTokenCoefficients* site = act.site.data();
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    const FastLayerWeights& layer = weights_.layers[l];
    const std::string prefix = "layer." + std::to_string(l) + ".";

    FastMhcRead(ctx, layer.hc_attn, layer.attn_norm, streams, n, h, site);  // attention site: KDA | DSA
    GLINT_RETURN_IF_ERROR(Attention(pass, l, prefix, act));
    for (const Segment& s : pass.segments) {  // an entry's caches are final once its last segment passed the layer
      const BatchEntry& entry = pass.batch[s.sequence];
      if (s.first_index + s.count == static_cast<int64_t>(entry.tokens.size())) entry.layer_done(l);
    }
    TraceSublayer(pass, prefix + "attn", act, d);
    FastMhcWrite(ctx, site, y, n, streams);

    FastMhcRead(ctx, layer.hc_ffn, layer.ffn_norm, streams, n, h, site);  // FFN site: dense MLP | MoE
    GLINT_RETURN_IF_ERROR(Ffn(pass, l, prefix, act));
    TraceSublayer(pass, prefix + "ffn", act, d);
    FastMhcWrite(ctx, site, y, n, streams);
    TraceRows(pass, prefix + "streams", streams, config_.hc_mult * d);
  }
  GLINT_RETURN_IF_ERROR(Head(pass, act, outputs));
  for (const Segment& s : pass.segments) pass.batch[s.sequence].state->tokens += s.count;
  return Status::Ok();
}

// ---- --dp-attention (docs/distributed.md "Attention data-parallel") ----

namespace {

// The passes of the batch entries `entries` (indices, ascending), at most `max_rows` rows each, filled in order as
// RunPasses fills them (a pass ends only when full). Only for entries that cannot fail alone (no expert cache).
std::vector<std::vector<Segment>> SplitIntoPasses(std::span<const BatchEntry> batch, std::span<const size_t> entries,
                                                  int64_t max_rows) {
  std::vector<std::vector<Segment>> passes(1);
  int64_t rows = 0;
  for (size_t e : entries) {
    const int64_t tokens = static_cast<int64_t>(batch[e].tokens.size()), start = batch[e].state->tokens;
    const std::vector<std::pair<int64_t, std::byte*>> copies = EntryStateCopies(batch[e]);
    size_t next_copy = 0;
    for (int64_t consumed = 0; consumed < tokens;) {
      if (rows == max_rows) passes.emplace_back(), rows = 0;
      const int64_t take = std::min(tokens - consumed, max_rows - rows);
      Segment segment{static_cast<int>(e), rows, take, start + consumed, consumed, {}};
      for (; next_copy < copies.size() && copies[next_copy].first <= consumed + take; ++next_copy) {
        segment.state_copies.emplace_back(copies[next_copy].first - consumed, copies[next_copy].second);
      }
      passes.back().push_back(std::move(segment));
      rows += take;
      consumed += take;
    }
  }
  if (rows == 0) passes.pop_back();
  return passes;
}

}  // namespace

Status FastModel::RunDpPasses(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs, Trace* trace,
                              const ForcedChoices* forced) const {
  if (trace != nullptr) return Unimplemented("--dp-attention does not trace a forward pass yet");
  std::vector<int64_t> rows_of_rank(plan_.ranks, 0);
  std::vector<size_t> mine;
  for (size_t e = 0; e < batch.size(); ++e) {
    const int owner = batch[e].state->attention_rank;
    if (owner < 0 || owner >= plan_.ranks) {
      return Unimplemented("--dp-attention: batch entry ", e, "'s sequence has no attention rank (", owner,
                           "); only sequences made by NewSequence or bound by the engine under --dp-attention "
                           "have one");
    }
    if (batch[e].want_hidden) return DpAttentionRefusesMtp();
    rows_of_rank[owner] += static_cast<int64_t>(batch[e].tokens.size());
    if (owner == plan_.rank) mine.push_back(e);
  }
  // Every rank knows every entry's owner and length: they agree on the number of passes without a message.
  int64_t passes = 0;
  for (int64_t rows : rows_of_rank) passes = std::max(passes, (rows + max_tokens_per_pass_ - 1) / max_tokens_per_pass_);
  const std::vector<std::vector<Segment>> local = SplitIntoPasses(batch, mine, max_tokens_per_pass_);
  for (int64_t p = 0; p < passes; ++p) {
    const std::vector<Segment> none;
    const std::vector<Segment>& segments = p < static_cast<int64_t>(local.size()) ? local[p] : none;
    int64_t rows = 0;
    for (const Segment& segment : segments) rows += segment.count;
    GLINT_RETURN_IF_ERROR(RunPassScoped(FastPass{batch, segments, rows, trace, forced}, outputs));
  }
  return Status::Ok();
}

Status FastModel::RunEmptyDpPass(const FastPass& pass, std::vector<EntryOutput>& outputs) const {
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    if (weights_.layers[l].mlp_kind == MlpKind::kMoe) GLINT_RETURN_IF_ERROR(DpMoe(pass, l, nullptr, 0, nullptr));
  }
  return DpHead(pass, nullptr, outputs);
}

Status FastModel::DpMoe(const FastPass& pass, int64_t l, const float* h, int64_t n, float* out) const {
  FastContext& ctx = *context_;
  const FastMoeWeights& moe = weights_.layers[l].moe;
  const int64_t d = config_.hidden_size, k = config_.num_experts_per_tok;
  std::vector<RouterChoice> routed;  // this rank's rows, routed here (the router is replicated)
  if (n > 0)
    routed = RouteMoe(ctx, moe, h, n, ForcedRows(pass, pass.forced != nullptr ? &pass.forced->router : nullptr, l));
  std::vector<int32_t> experts(n * k);
  std::vector<float> weights(n * k);
  std::vector<std::vector<int>> destinations(n);
  for (int64_t t = 0; t < n; ++t) {
    if (static_cast<int64_t>(routed[t].experts.size()) != k || static_cast<int64_t>(routed[t].weights.size()) != k) {
      return InternalError("--dp-attention: row ", t, " was routed to ", routed[t].experts.size(), " experts, not ", k);
    }
    std::copy(routed[t].experts.begin(), routed[t].experts.end(), experts.begin() + t * k);
    std::copy(routed[t].weights.begin(), routed[t].weights.end(), weights.begin() + t * k);
    destinations[t] = RowDestinations(routed[t].experts, plan_, config_.n_shared_experts > 0);
  }
  const DispatchedRows sent = PackDispatch(h, n, d, k, experts, weights, destinations, plan_.ranks);
  std::vector<std::byte> received;
  std::vector<uint64_t> received_counts;
  GLINT_RETURN_IF_ERROR(comm_->AllToAll(sent.bytes, sent.counts, received, received_counts)
                            .WithContext("sending MoE rows to the ranks holding their experts"));
  GLINT_ASSIGN_OR_RETURN(const ReceivedRows in,
                         UnpackDispatch(received, received_counts, k, d, config_.n_routed_experts));
  std::vector<RouterChoice> given(in.rows);  // as the owner routed them
  for (int64_t i = 0; i < in.rows; ++i) {
    given[i].experts.assign(in.experts.begin() + i * k, in.experts.begin() + (i + 1) * k);
    given[i].weights.assign(in.weights.begin() + i * k, in.weights.begin() + (i + 1) * k);
  }
  std::vector<float> partial(in.rows * d);  // this rank's experts' part of each received row (shared included)
  int64_t active = 0;
  if (in.rows > 0) {
    GLINT_RETURN_IF_ERROR(
        FastMoeRouted(ctx, moe, in.hidden.data(), in.rows, given, partial.data(), &active, plan_.local_experts()));
  }
  last_step_.experts_active[l] = std::max(last_step_.experts_active[l], active);
  std::vector<std::byte> returned;
  std::vector<uint64_t> returned_counts;
  GLINT_RETURN_IF_ERROR(comm_
                            ->AllToAll(std::as_bytes(std::span<const float>(partial)),
                                       ReturnCounts(received_counts, k, d), returned, returned_counts)
                            .WithContext("returning MoE partial sums to the rows' ranks"));
  return CombineReturned(returned, returned_counts, sent, n, k, d, out);
}

namespace {

// A final hidden row on its way to rank 0's lm_head: where its logits go, then its D values.
struct HeadRecordKey {
  int32_t entry = 0;
  int32_t index = 0;  // token of the entry
};

}  // namespace

Status FastModel::DpHead(const FastPass& pass, const float* normed, std::vector<EntryOutput>& outputs) const {
  const int64_t d = config_.hidden_size, vocab = config_.vocab_size;
  const size_t record = sizeof(HeadRecordKey) + d * sizeof(float);
  std::vector<std::byte> send;
  for (const Segment& s : pass.segments) {
    const BatchEntry& entry = pass.batch[s.sequence];
    const int64_t tokens = static_cast<int64_t>(entry.tokens.size());
    for (int64_t i = 0; i < s.count; ++i) {
      const int64_t index = s.first_index + i;
      if (entry.logits != LogitsWanted::kAll && !(entry.logits == LogitsWanted::kLast && index == tokens - 1)) continue;
      const HeadRecordKey key{s.sequence, static_cast<int32_t>(index)};
      const size_t at = send.size();
      send.resize(at + record);
      std::memcpy(send.data() + at, &key, sizeof key);
      std::memcpy(send.data() + at + sizeof key, normed + (s.row + i) * d, d * sizeof(float));
    }
  }
  std::vector<uint64_t> counts(plan_.ranks, 0);
  counts[0] = send.size();  // rank 0 alone samples and holds lm_head (--tp 1)
  std::vector<std::byte> received;
  std::vector<uint64_t> received_counts;
  GLINT_RETURN_IF_ERROR(
      comm_->AllToAll(send, counts, received, received_counts).WithContext("sending final hidden rows to rank 0"));
  if (plan_.rank != 0 || received.empty()) return Status::Ok();
  if (received.size() % record != 0) return InternalError("--dp-attention: final hidden rows of a partial size");
  const int64_t rows = static_cast<int64_t>(received.size() / record);
  float* inputs = context_->act.logit_inputs.Floats(rows * d);
  std::vector<float*> destinations(rows);
  for (int64_t r = 0; r < rows; ++r) {
    HeadRecordKey key;
    std::memcpy(&key, received.data() + r * record, sizeof key);
    if (key.entry < 0 || static_cast<size_t>(key.entry) >= outputs.size() || key.index < 0 ||
        key.index >= static_cast<int64_t>(pass.batch[key.entry].tokens.size())) {
      return InternalError("--dp-attention: a final hidden row for entry ", key.entry, " token ", key.index);
    }
    const bool all = pass.batch[key.entry].logits == LogitsWanted::kAll;
    destinations[r] = outputs[key.entry].logits.data() + (all ? key.index * vocab : 0);
    std::memcpy(inputs + r * d, received.data() + r * record + sizeof key, d * sizeof(float));
  }
  float* logits = context_->act.logits.Floats(rows * vocab);
  GLINT_RETURN_IF_ERROR(LmHead(inputs, rows, logits, logits));
  for (int64_t r = 0; r < rows; ++r) std::memcpy(destinations[r], logits + r * vocab, vocab * sizeof(float));
  return Status::Ok();
}

}  // namespace glint
