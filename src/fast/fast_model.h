// The fast forward pass of GLM-5.3-Flash on x86-64 CPUs: int8 W8A8 and exact-bf16 weights in packed kernel
// layouts, AVX-512 VNNI / AVX2 / scalar kernels chosen at run time, a caller-owned worker pool, and the fp32
// ReferenceModel as its oracle (docs/fast-path.md; measured figures in docs/performance.md).
//
// Implements the engine's Model interface over the same SequenceState as the reference, so the two can be swapped
// and compared state for state. The rows of every sequence in a batch are processed together by each layer (one
// weight read for all of them), in passes of at most max_tokens_per_pass rows so that activation memory stays
// bounded for long prompts (a pass boundary inside a prompt is a chunked prefill, which the model allows).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/worker_pool.h"
#include "experts/expert_store.h"
#include "experts/expert_trace.h"
#include "fast/fast_layers.h"
#include "fast/pass_profile.h"
#include "kernels/isa.h"
#include "model/model.h"
#include "packed/fast_convert.h"

namespace glint {

struct FastPass;       // one pass of the layer loop (fast_model.cc)
struct FastMtpPass;    // one pass of the MTP layer (fast_mtp.cc)
struct FastMtpResult;  // what it gives

struct FastModelOptions {
  Isa isa = BestIsa();                // kernel level for the int8 and bf16 products
  int64_t max_tokens_per_pass = 512;  // rows per layer pass; bounds activation memory
  // `--mla-attention`: the DSA layers' attention over the selected latents in fp32 (the default) or with bf16 dot
  // products (mla::AttendBf16: q̃, latents and probabilities rounded to bf16; needs AVX512-BF16).
  mla::AttentionPrecision mla_attention = mla::AttentionPrecision::kFp32;
  FastConvertOptions convert;  // when loading a checkpoint (not a container)
  // Routed experts' format (`--experts`): a checkpoint is converted to it (overriding convert.experts), a container
  // must hold it (else an error: the format is chosen at `glint convert`). Unset: a container as stored.
  std::optional<ExpertWeights> experts;
  // Read this model's pages of a container in at load, on the pool's threads (first touch: their NUMA node): the
  // rank's tensors only, not the vision tower's nor, with an expert cache, the routed experts'.
  bool populate = true;
  // With `populate`: when under 90 % of the read-in pages are on 2 MB pages (the page cache held the file in small
  // folios before this load) and the kernel gives this file 2 MB pages, drop them and read them again from disk,
  // which brings them as 2 MB pages (FastModel::Load, ReadAgainOnHugePages). `--keep-small-pages` turns it off.
  bool reread_small_pages = true;
  // Check at load every tensor this model binds from a container against the container's checksums
  // (io/weight_container.h): a file changed in place after `glint convert` is refused, not served as wrong text.
  // With an expert cache the routed experts are checked as they are read instead. Off only in tools and tests (no
  // flag: the pass costs about what reading the pages in costs, docs/server.md "Files under a running server").
  bool verify_checksums = true;
  // Routed experts read from the container into a RAM cache of this many bytes (`--expert-memory`,
  // docs/expert-cache.md); 0: every expert resident, as mapped. Needs a `glint convert` container.
  uint64_t expert_memory = 0;
  int expert_readers = 4;                 // reads in flight for the expert cache (pread threads / io_uring depth)
  ExpertIo expert_io = ExpertIo::kPread;  // --expert-io
  ExpertPolicy expert_policy = ExpertPolicy::kFrequencyWeighted;  // --expert-policy
  // --expert-prefetch next-layer: after each MoE layer, its input through the next MoE layer's router names the
  // experts to start reading (docs/expert-cache.md "Prefetch"); off by default until measured.
  bool expert_prefetch = false;
  // Routing trace (`--expert-trace FILE`, docs/expert-cache.md "Policy"): every MoE pass's routed experts per row
  // appended to this file; empty: none. Works with or without an expert cache.
  std::string expert_trace;
  // `--expert-profile FILE`: a trace written by --expert-trace (e.g. of a serving run); its most-used experts (by
  // rows) are read into the cache at start-up and kept there for good (at most half of the slots).
  std::string expert_profile;
  // Opens the container for the expert cache's reads (tests inject faults); default DirectFileReader (O_DIRECT).
  std::function<Result<std::unique_ptr<ExtentReader>>(const std::string& path)> open_expert_reader;
  // Expert parallel (sharding.h): the communicator and --tp/--ep. A rank converts, maps and reads only its experts.
  ModelParallel parallel;
  ConvertProgressFn progress;  // conversion progress (checkpoint loads)
};

// The share of a container's resident bytes on 2 MB pages under which a load reads it again: low enough that a
// container whose pages cannot all come back huge (the file's last partial 2 MB, folios readahead made smaller; the
// bench model comes back at 95–98 %) is not read again at every start, and the few percent above it are worth little
// (from 0 to 98 %: prefill 1.05×, batched decode 1.03×; docs/performance.md "Reading the container again…").
inline constexpr double kHugePageShareGoal = 0.90;

// Whether a load reads a container's pages again for 2 MB pages (FastModelOptions::reread_small_pages): fewer than
// kHugePageShareGoal of its resident bytes are on 2 MB pages. With none on them the load first reads one 2 MB part
// again to learn whether the kernel and filesystem give this file 2 MB pages at all.
bool WorthReadingAgainForHugePages(const MappedFile::Residency& residency);

// How the weights were loaded, for `glint bench-model` and logs.
struct FastLoadReport {
  bool from_container = false;
  double seconds = 0;
  uint64_t weight_bytes = 0;              // packed bytes in memory: resident tensors + the expert cache
  uint64_t resident_bytes = 0;            // tensors held in memory for good (all of them without an expert cache)
  uint64_t expert_cache_bytes = 0;        // the expert cache's slots (0 without one)
  uint64_t expert_read_buffer_bytes = 0;  // what its reads need beyond the slots (the io_uring ring; no staging)
  double verify_seconds = 0;              // the checksum pass over the container's tensors (0 when skipped)
  uint64_t verified_bytes = 0;            // bytes it hashed
  // A container's bytes resident in this process after the load, and those mapped as 2 MB pages (the products
  // stream weights faster from them: docs/performance.md "Weights on 2 MB pages").
  uint64_t container_resident_bytes = 0;
  uint64_t container_huge_page_bytes = 0;
  // What the load did about a container's pages in small pages (FastModelOptions::reread_small_pages).
  enum class SmallPages {
    kNotChecked,       // not a container, `populate` off, or an expert cache (the routed experts fault in as used)
    kKept,             // reread_small_pages off (--keep-small-pages)
    kOnHugePages,      // at least 90 % on 2 MB pages, nothing resident, or no tensor spans a 2 MB window: done
    kReadAgain,        // read again from disk (reread_seconds, huge_page_share_before_reread)
    kNoneForThisFile,  // none on 2 MB pages, and a 2 MB part read again came back in small pages: the kernel or the
                       // filesystem maps this file in 4 KB pages only (transparent huge pages off, no large folios)
  };
  SmallPages small_pages = SmallPages::kNotChecked;
  double huge_page_share_before_reread = 0;
  double reread_seconds = 0;
};

// What the last Forward did, for benchmarks: the rows it ran and the weight bytes its products read, and per MoE
// layer the number of distinct routed experts the rows activated.
struct FastStepStats {
  int64_t rows = 0;
  uint64_t weight_bytes_read = 0;
  ProductTime dense_products;   // the integer (int8/int4) products outside the MoE experts
  ProductTime expert_products;  // the experts' (routed and shared)
  ProductTime products() const { return dense_products + expert_products; }
  double indexer_seconds = 0;           // wall time of the DSA indexers' selections (all DSA layers)
  uint64_t indexer_key_bytes = 0;       // pooled-key bytes they read
  std::vector<int64_t> experts_active;  // [num_hidden_layers], 0 for dense layers
  PassProfile::Seconds part_seconds{};  // wall time by part (pass_profile.h) when profiling is on, else zeros
};

class FastModel final : public PathModel {
 public:
  // `dir` holds config.json and either model.glint (written by `glint convert`: mapped, no conversion) or the
  // checkpoint's safetensors (converted in memory now). The pool must outlive the model.
  static Result<std::unique_ptr<FastModel>> Load(const std::string& dir, WorkerPool& pool,
                                                 const FastModelOptions& options = {});
  // From a source already in memory (tests, conversion benchmarks).
  static Result<std::unique_ptr<FastModel>> Create(ModelConfig config, FastWeightSource source, WorkerPool& pool,
                                                   const FastModelOptions& options = {});

  const ModelConfig& config() const override { return config_; }
  // This rank's head counts and widths (LocalConfig): what the fast layers and the KDA caches are laid out for.
  const ModelConfig& local_config() const override { return local_; }
  int64_t weight_bytes() const override { return static_cast<int64_t>(load_report_.weight_bytes); }
  bool has_mtp() const override { return weights_.mtp != nullptr; }
  WorkerPool* worker_pool() const override { return &pool_; }
  ShardPlan shard_plan() const override { return plan_; }
  // Refuses what the fast path does not implement: recurrent KDA, naive MLA, dense or forced key selection
  // (ForcedChoices forces choices instead).
  Status CheckOptions(const ForwardOptions& options) const override;
  // The MTP layer over every entry's pairs in one pass: its weights and lm_head read once per call; each entry's
  // outputs bit for bit those of the entry alone. An expert read that fails fails only its entries.
  Status MtpForwardBatch(std::span<const MtpEntry> batch, std::vector<std::vector<float>>& logits,
                         const ForwardOptions& options = {}, std::vector<Status>* entry_errors = nullptr,
                         std::vector<std::vector<float>>* last_hidden = nullptr) const override;

  const FastLoadReport& load_report() const { return load_report_; }
  const FastStepStats& last_step() const { return last_step_; }
  // Time every later Forward by part into last_step().part_seconds (bench-model's prefill profile); off by default,
  // when it reads no clock.
  void SetProfiling(bool on) const;
  // Rows that went through lm_head so far, Forward and MTP layer (a rank outside rank 0's tp group computes none).
  int64_t lm_head_rows() const { return lm_head_rows_; }
  const FastWeights& weights() const { return weights_; }
  // The routed-expert cache of --expert-memory, or null (every expert resident).
  const DiskExpertCache* expert_cache() const { return expert_cache_.get(); }
  Status WeightsDamage() const override;
  Isa isa() const { return isa_; }
  mla::AttentionPrecision mla_attention() const { return context_->attention; }

 private:
  FastModel(ModelConfig config, FastWeightSource source, FastWeights weights, WorkerPool& pool,
            const FastModelOptions& options, ShardPlan plan);
  // Create on a source already cut to `plan` (`sliced`: its tensor-parallel slices converted as such) or whole.
  static Result<std::unique_ptr<FastModel>> Assemble(ModelConfig config, FastWeightSource source, ShardPlan plan,
                                                     bool sliced, WorkerPool& pool, const FastModelOptions& options);
  Status AttachExpertCache(const FastModelOptions& options);
  Status KeepProfiledExperts(const std::string& path);  // --expert-profile
  // Expert parallel: the MoE outputs [rows, D] are this rank's partial sums until summed over the ranks.
  // The MoE all-reduce of `rows` rows [rows, D]; with an expert cache it also makes context_->row_errors agree
  // across the ranks (a row failed on any rank fails on all).
  Status SumMoeOverRanks(float* partial, int64_t rows) const;
  // Tensor parallel: a split sublayer's outputs [rows, D] summed over the tp group (nothing when `split` is false).
  Result<Communicator*> TensorGroup() const;  // this rank's tp group communicator, made at the first pass
  Status SumOverTensorGroup(bool split, float* partial, int64_t rows, const char* what) const;
  Status ForwardBatch(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                      const ForwardOptions& options, Trace* trace, const ForcedChoices* forced) const override;
  Status MtpForwardChecked(SequenceState& state, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                           std::vector<float>& logits, const ForwardOptions& options, Trace* trace,
                           const MtpReplacedEmbeddings& replaced, std::vector<float>* normed) const override;
  // The MTP layer over every entry's pairs in one pass (fast_mtp.cc), and its steps.
  Status RunMtpPass(const FastMtpPass& pass, bool want_logits, FastMtpResult& result) const;
  void MtpInput(const FastMtpPass& pass, std::vector<float>& z) const;
  Status MtpAttention(const FastMtpPass& pass, std::vector<float>& z, DsaTrace* selections) const;
  Status MtpFfn(const FastMtpPass& pass, std::vector<float>& z, std::vector<RouterChoice>* choices,
                std::vector<Status>& row_errors) const;
  Status MtpHead(const FastMtpPass& pass, const std::vector<float>& z, bool want_logits, FastMtpResult& result) const;
  // The passes of a Forward: every entry's rows in passes of at most max_tokens_per_pass rows (RunPasses); with
  // --dp-attention only this rank's entries, in as many passes as the rank with the most rows needs (RunDpPasses:
  // the ranks' MoE exchanges pair up, a rank with no rows left runs empty passes).
  Status RunPasses(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs, Trace* trace,
                   const ForcedChoices* forced) const;
  Status RunDpPasses(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs, Trace* trace,
                     const ForcedChoices* forced) const;
  // --dp-attention: one MoE layer over this rank's rows h [n, D] (out [n, D]) with the rows exchanged all-to-all with
  // the ranks holding their experts (dist/row_exchange.h); and the head: the rows wanting logits sent to rank 0,
  // which runs lm_head on every rank's rows. A pass with no rows of this rank runs only these exchanges.
  Status DpMoe(const FastPass& pass, int64_t layer, const float* h, int64_t n, float* out) const;
  Status DpHead(const FastPass& pass, const float* normed, std::vector<EntryOutput>& outputs) const;
  Status RunEmptyDpPass(const FastPass& pass, std::vector<EntryOutput>& outputs) const;
  // RunPass, with rows whose expert could not be read failing their sequence alone (outputs[i].error).
  Status RunPassScoped(const FastPass& pass, std::vector<EntryOutput>& outputs) const;
  // One pass over rows of several sequences (the layer loop), and its steps.
  Status RunPass(const FastPass& pass, std::vector<EntryOutput>& outputs) const;
  void Embed(const FastPass& pass, FastActivations& act) const;
  Status Attention(const FastPass& pass, int64_t layer, const std::string& prefix, FastActivations& act) const;
  Status Ffn(const FastPass& pass, int64_t layer, const std::string& prefix, FastActivations& act) const;
  Status Head(const FastPass& pass, FastActivations& act, std::vector<EntryOutput>& outputs) const;
  // logits [rows, V] of `normed` [rows, D] into `logits` on rank 0 (this rank's lm_head rows, gathered:
  // lm_head_split.h); nothing on a rank without lm_head rows. `out` [rows, this rank's rows]: the product (it may
  // be `logits`, which it is when lm_head is whole on rank 0).
  Status LmHead(const float* normed, int64_t rows, float* out, float* logits) const;

  ModelConfig config_;
  ShardPlan plan_;
  ModelConfig local_;  // LocalConfig(config_, plan_): what FastContext and the layers run on
  Communicator* comm_ = nullptr;
  mutable std::unique_ptr<Communicator> tp_comm_;  // the rank's tensor-parallel group (made at first use)
  FastWeightSource source_;
  FastWeights weights_;
  PackedLinear head_share_;  // --lm-head-split-rows: this rank's lm_head rows (ShardPlan::head_rows_of_rank)
  WorkerPool& pool_;
  Isa isa_;
  int64_t max_tokens_per_pass_;
  FastLoadReport load_report_;
  // The forward pass's scratch; Forward is serialised (one engine thread owns the model).
  mutable std::mutex mutex_;
  mutable std::unique_ptr<FastContext> context_;
  std::unique_ptr<DiskExpertCache> expert_cache_;
  bool expert_prefetch_ = false;  // --expert-prefetch next-layer (with an expert cache)
  // --expert-trace: every MoE pass's routing appended (Forward calls counted as steps).
  void RecordRouting(int64_t layer, const std::vector<RouterChoice>& choices) const;
  std::unique_ptr<ExpertTraceWriter> expert_trace_;
  mutable int64_t trace_step_ = 0;
  mutable FastStepStats last_step_;
  mutable int64_t lm_head_rows_ = 0;
  mutable std::vector<float> moe_fused_;  // SumMoeOverRanks: the outputs and the row failure flags
};

}  // namespace glint
