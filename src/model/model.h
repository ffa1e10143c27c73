// The GLM-5.3-Flash text model, fp32 reference forward pass over a ragged batch (model-glm53.md §3).
//
// Each batch entry is one sequence: a span of new tokens continuing from the caches in its SequenceState, which
// live in paged memory (blocks + a slot, cache_layout.h) that the engine or the state itself owns. Logits are computed
// only for the positions asked for; the final normed hidden is returned where MTP needs it. The layer loop in model.cc
// reads like the model card:
//   X = 4 copies of embed(x)
//   per layer: (attention site) mHC read → RMSNorm → KDA or DSA → mHC write;
//              (FFN site)       mHC read → RMSNorm → dense MLP or MoE → mHC write
//   y = RMSNorm(mean of streams); logits = lm_head · y
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "dist/sharding.h"
#include "io/config.h"
#include "memory/item_arena.h"
#include "memory/memory_mirror.h"
#include "memory/owned_memory.h"
#include "model/cache_layout.h"
#include "model/dsa.h"
#include "model/ffn.h"
#include "model/kda.h"
#include "model/mhc.h"
#include "model/trace.h"
#include "model/weights.h"

namespace glint {

class WorkerPool;  // base/worker_pool.h

class Model;

// Where one sequence's caches are (cache_layout.h): its blocks, reached through its block table, and its slot.
// Views, not owners: into an engine's pools (BindSequence), or into the state's own memory (NewSequence).
struct SequenceMemory {
  const ItemArena* blocks = nullptr;                  // items of layout.block_bytes
  const std::vector<int32_t>* block_table = nullptr;  // position p in block (*block_table)[p / block_tokens]
  std::byte* slot = nullptr;                          // layout.slot_bytes
  // --dp-attention: `blocks` and `slot` are the names of another rank's memory (address space with nothing behind
  // it, ItemArena::Reserved): this rank books and names them in batch plans but never touches them.
  bool elsewhere = false;
};

// Every per-sequence cache of the trunk (and of the MTP layer): the unit the model sees. Move-only.
struct SequenceState {
  const Model* owner = nullptr;  // a state is only valid with the model that created it
  int64_t tokens = 0;            // positions consumed by the trunk
  std::shared_ptr<const CacheLayout> layout;
  SequenceMemory memory;
  // NewSequence only: the state owns its memory and Forward grows it. An engine's state has none: the engine
  // reserves blocks before each Forward.
  std::unique_ptr<OwnedSequenceMemory> owned;
  // A forward pass failed after it started writing, so the caches no longer describe `tokens`; refused from then on.
  bool broken = false;
  // The MTP layer's own latent + indexer cache; its position p holds the pair (h_p, x_{p+1}). NewSequence: a cache
  // with its own memory. BindSequence with a layout made with CacheOptions::mtp: a view into the same blocks (the
  // layout's MTP segments) and slot; otherwise none.
  DsaCache mtp_dsa;
  int64_t mtp_tokens = 0;  // pairs consumed by the MTP layer (= mtp_dsa.tokens)
  // --dp-attention (ShardPlan::dp_attention): the rank that runs this sequence's attention and holds its caches,
  // chosen by rank 0; -1: every rank (replicated attention). A state of another rank's sequence has no cache memory
  // (HeldElsewhere: no slot, or one that names another rank's memory): the model only advances its `tokens`.
  int attention_rank = -1;
  bool HeldElsewhere() const { return attention_rank >= 0 && (memory.slot == nullptr || memory.elsewhere); }
};

enum class LogitsWanted { kNone, kLast, kAll };

// A copy of the sequence's KDA state (every KDA layer's conv window and S, laid out as the first
// layout.checkpoint_bytes of a slot) to write when the sequence reaches `position` inside a Forward call: the
// prefix cache's checkpoints, taken without making chunks stop at them. `position` is block-aligned, so the
// indexer's filling pools (the rest of the slot) are empty there.
// With data null the model only splits its KDA recurrence there, as a call boundary would, copying nothing: the
// engine splits at every checkpoint position, cached or not, so that its arithmetic never depends on what the
// prefix cache holds (a hit computes bit for bit what a run without it computes).
struct StateCheckpoint {
  int64_t position = 0;       // state.tokens < position ≤ state.tokens + T
  std::byte* data = nullptr;  // layout.checkpoint_bytes; null: split only
};

// Told when a batch entry's caches for one layer are final for this Forward call: right after the layer's
// attention sublayer has run over the entry's last rows (the FFN sublayer and the later layers write nothing of
// it). Called on the thread that called Forward, once per layer, in layer order, while the later layers are still
// to run; a plain function and a context, so that an entry without one costs one branch per layer. Prefill/decode
// disaggregation sends each layer's state from here (docs/disaggregation.md "Streaming").
struct LayerDone {
  void (*call)(void* context, int64_t layer) = nullptr;
  void* context = nullptr;
  void operator()(int64_t layer) const {
    if (call != nullptr) call(context, layer);
  }
};

struct BatchEntry {
  std::span<const int32_t> tokens;  // [T] new tokens, T ≥ 1
  SequenceState* state = nullptr;
  LogitsWanted logits = LogitsWanted::kLast;
  bool want_hidden = false;                           // return the final normed hidden [T, D] (MTP input)
  std::span<const StateCheckpoint> checkpoints = {};  // ascending positions; empty: none
  // Speculative decoding: the KDA state (the slot's first layout.checkpoint_bytes) as it is at each `position`, at
  // positions inside the call (state.tokens < position < state.tokens + T, ascending, data not null), so that the
  // tokens after any of them can be rejected: RollBack restores one. The model splits its KDA recurrence at each,
  // exactly as separate calls would; every other sublayer is per row and unchanged. Empty: none. A verification of
  // K drafts has K of them, one after each row but the last.
  std::span<const StateCheckpoint> rollback = {};
  // Image rows (docs/vision.md): the input embeddings of the tokens at these indices (ascending, in [0, T)) are
  // replaced by `embedding_rows` [positions, D] (the vision tower's output, in placeholder order), as HF's
  // masked_scatter does; every other token keeps its embedding. Empty: none (text only).
  std::span<const int32_t> embedding_positions = {};
  std::span<const float> embedding_rows = {};
  LayerDone layer_done = {};  // null: nobody is told
};

// The replacement row of token `index` of `entry` ([D] inside entry.embedding_rows), or null when it has none.
const float* ReplacedEmbedding(const BatchEntry& entry, int64_t index, int64_t d);

struct EntryOutput {
  std::vector<float> logits;  // [rows, V]: rows = T (kAll), 1 (kLast) or 0; empty on ranks other than 0
                              // (several ranks: only rank 0 receives logits, lm_head_split.h)
  std::vector<float> hidden;  // [T, D] when want_hidden
  // Set when this entry alone could not be computed (a routed expert its rows needed could not be read from disk,
  // docs/expert-cache.md): its outputs are not valid and its state is broken. See Model::Forward.
  Status error;
};

// Rows replacing the MTP layer's embeddings of its next tokens (docs/vision.md "MTP drafts"): the token at index
// positions[i] (ascending, in [0, T)) of next_tokens is embedded as rows[i·D, (i+1)·D) — the image row the trunk
// took at that position (BatchEntry::embedding_rows) — instead of its embedding-table row. Empty: none.
struct MtpReplacedEmbeddings {
  std::span<const int32_t> positions = {};
  std::span<const float> rows = {};  // [positions, D]
};

// One sequence's part of a batched MTP call (Model::MtpForwardBatch): T pairs (h_t, x_{t+1}) continuing the
// state's MTP cache, as MtpForward takes them.
struct MtpEntry {
  SequenceState* state = nullptr;
  std::span<const float> hidden;              // [T, D] the trunk's final normed hidden at positions t
  std::span<const int32_t> next_tokens;       // [T] the tokens at t + 1
  LogitsWanted logits = LogitsWanted::kLast;  // draft logits wanted: every pair, the last one, or none
  MtpReplacedEmbeddings replaced = {};        // image rows in place of next tokens' embeddings
};

// The replacement row of next token `index` ([D] inside replaced.rows), or null when it has none.
const float* ReplacedEmbedding(const MtpReplacedEmbeddings& replaced, int64_t index, int64_t d);

// Discrete choices to force instead of computing them (the quality gate of quantized paths compares with the
// choices of the fp32 path): per layer, per new token.
struct ForcedChoices {
  std::vector<std::vector<RouterChoice>> router;            // [layer][token]
  std::vector<std::vector<std::vector<int64_t>>> attended;  // [layer][token] → attended positions
};

struct ForwardOptions {
  KdaAlgorithm kda_algorithm = KdaAlgorithm::kChunked;  // HF: chunked for multi-token calls
  DsaOptions dsa;                                       // naive/absorbed MLA, indexer/dense selection
  // false: MtpForward skips lm_head and returns no logits (the state advances as usual) — a follower rank that
  // holds no lm_head rows, whose draft logits nobody reads (lockstep/lockstep.cc). Not sent in plans: rank 0 always
  // wants them. With several ranks only rank 0 receives the logits either way (lm_head_split.h).
  bool mtp_logits = true;
};

// A multi-rank leader (lockstep.h) keeps the other ranks' copies of an engine's pools identical: the engine hands
// it the pools it allocated (their sequences laid out by `layout`) and tells it of every copy it makes outside a
// forward pass (MemoryMirror).
class EngineMirror : public MemoryMirror {
 public:
  // `arenas`: blocks, slots, checkpoints, rollback snapshots (empty arenas allowed). `backing_rank` −1: every rank
  // keeps a copy; r ≥ 0 (--dp-attention): only rank r holds their memory (the caller's arenas are then only names
  // unless r is its own rank), and the other ranks make none of the copies in them. Returns the id to detach.
  virtual int64_t AttachPools(std::shared_ptr<const CacheLayout> layout, std::span<const ItemArena* const> arenas,
                              int backing_rank = -1) = 0;
  virtual void DetachPools(int64_t id) = 0;
  // `bytes` from outside the pools were written at `destination` (inside them): a sequence's state imported from
  // another server (docs/disaggregation.md "Several ranks"). The other ranks get the bytes themselves, in the plan
  // that precedes the sequence's next step.
  virtual void OnWrite(std::byte* destination, std::span<const std::byte> bytes) = 0;
  // The same for a slot whose KDA heads are split over a tensor-parallel group (--tp > 1): `whole_slot` is laid out
  // for the whole model (`whole`), `slot` for this rank's heads (`part`, its LocalConfig); each rank writes the
  // part of it that it holds (CopyWholeSlotToPart).
  virtual void OnWriteSlot(std::byte* slot, const CacheLayout& part, std::span<const std::byte> whole_slot,
                           const CacheLayout& whole) = 0;
  // KDA layer `layer`'s slot state (LayerRegions(whole, layer), packed) of the sequence at `slot` (laid out by
  // `part`), its heads gathered from the ranks that hold them (--tp > 1): called inside a forward pass from an
  // entry's BatchEntry::layer_done, which the plan tells the other ranks of, so that they send their heads then.
  virtual std::vector<std::byte> GatherKdaLayer(const std::byte* slot, const CacheLayout& part,
                                                const CacheLayout& whole, int64_t layer) = 0;
  // The last Forward's outputs are gone (their memory may hold other values now): no later MTP call's hidden input
  // is one of them. The engine calls it at the end of every step, so that an MTP call outside a step (an imported
  // state's last pair, whose hidden row arrived with the state) sends its rows inline.
  virtual void ForgetForwardOutputs() = 0;
};

// What the engine knows of a model: the forward pass over a ragged batch and the per-sequence state. The fp32
// ReferenceModel implements it; faster implementations (int8, threads) implement it too and are tested against it.
class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Bytes of weights held in memory (for the capacity report); 0 when unknown.
  virtual int64_t weight_bytes() const { return 0; }
  // Whether MtpForward can run: the config has an MTP layer and its weights were loaded.
  virtual bool has_mtp() const = 0;
  // How this model's weights are split over ranks (sharding.h); one rank holding everything unless loaded with a
  // ModelParallel of several ranks.
  virtual ShardPlan shard_plan() const { return SingleRankPlan(config()); }
  // The config of this rank's shard (sharding.h LocalConfig: its tensor-parallel head counts and widths); the
  // caches are laid out for it. config() itself is the whole model's.
  virtual const ModelConfig& local_config() const { return config(); }

  // The layout of one sequence's caches for `options`; the engine sizes its pools with it.
  virtual Result<CacheLayout> CacheLayoutFor(const CacheOptions& options) const {
    return MakeCacheLayout(local_config(), options);
  }
  // An empty sequence that owns its memory (blocks grown on demand, StandaloneBlockTokens, fp32 state), with an
  // MTP cache when the model has an MTP layer. For tests and tools; the engine uses BindSequence.
  virtual SequenceState NewSequence() const;
  // The same with the latents and pooled keys stored as `kv_dtype` (--kv-cache-dtype). Not mirrored to other ranks
  // (a LockstepLeader's NewSequence is): for one-rank tools.
  SequenceState NewStandaloneSequence(KvCacheDtype kv_dtype) const;
  // A sequence whose caches live in memory the caller manages: `layout` from CacheLayoutFor, `memory` holding
  // `tokens` positions already (0 for a zeroed slot, or a restored prefix). The caller keeps the block table
  // covering every position a Forward will write. With a layout that has the MTP cache, the MTP layer holds
  // `mtp_tokens` pairs (−1: as many as `tokens`) in the same memory.
  virtual SequenceState BindSequence(std::shared_ptr<const CacheLayout> layout, SequenceMemory memory, int64_t tokens,
                                     int64_t mtp_tokens = -1) const;
  // Who must hear of the engine's pools and copies (a multi-rank leader, lockstep.h); null for a model that runs
  // alone.
  virtual EngineMirror* engine_mirror() const { return nullptr; }
  // The workers the forward pass runs on, free between passes (the engine samples rows on them); null: none.
  virtual WorkerPool* worker_pool() const { return nullptr; }
  // The first sign that weights read at run time are not those loaded (a routed expert whose extent failed its
  // checksum, a container changed while in use): the model is damaged for good and /health says so. Ok while
  // intact. A mapped file that shrank is reported apart (base/file.h MappingDamage).
  virtual Status WeightsDamage() const { return Status::Ok(); }
  // Whether this model implements `options`: an error naming the option it does not (Forward and MtpForward
  // refuse them with it before touching any state).
  virtual Status CheckOptions(const ForwardOptions& options) const { return Status::Ok(); }

  // Runs the trunk over every entry; outputs[i] belongs to batch[i]. Checks every entry first (token ids in
  // range, T ≥ 1, the state belongs to this model, the context limit) so a bad entry changes no state.
  // A failure scoped to some entries (an expert read, FastModel with --expert-memory) returns an error AND sets
  // those entries' outputs[i].error: every entry whose error stays Ok then has complete outputs and its state
  // advanced exactly as on success. Any other error sets no entry's error, and every state of the batch may be
  // broken (PathModel marks them all).
  virtual Status Forward(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                         const ForwardOptions& options = {}, Trace* trace = nullptr,
                         const ForcedChoices* forced = nullptr) const = 0;

  // The MTP layer (§10) over T pairs (h_t, x_{t+1}) continuing the state's MTP cache: hidden [T, D] is the trunk's
  // final normed hidden at positions t, next_tokens [T] the tokens at t+1. Returns draft logits [T, V] for t+2.
  // `replaced`: image rows in place of some next tokens' embeddings (checked as Forward checks image rows).
  virtual Status MtpForward(SequenceState& state, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                            std::vector<float>& logits, const ForwardOptions& options = {}, Trace* trace = nullptr,
                            const MtpReplacedEmbeddings& replaced = {}) const = 0;
  // The MTP layer over several sequences: logits[i] [rows, V] for batch[i] (rows: T, 1 or 0 per its `logits`).
  // Entries must have distinct states. This default runs MtpForward on each in turn (one weight read per
  // sequence); FastModel overrides it with one pass over every entry's pairs. On an error, the states of entries
  // already run have advanced.
  // With `entry_errors`, every entry runs whatever the others do and entry_errors[i] says how entry i went (an
  // error return then names how many failed; the states of the entries that did not fail advanced as on success).
  // With `last_hidden`, (*last_hidden)[i] [D] is the layer's normed output at entry i's last pair — the row lm_head
  // reads, which chained drafts take as the next pair's hidden (docs/engine.md "Speculative decoding"); this
  // default cannot give it (PathModel can) and refuses it.
  virtual Status MtpForwardBatch(std::span<const MtpEntry> batch, std::vector<std::vector<float>>& logits,
                                 const ForwardOptions& options = {}, std::vector<Status>* entry_errors = nullptr,
                                 std::vector<std::vector<float>>* last_hidden = nullptr) const;
};

// The models that compute the forward pass in this process (ReferenceModel, FastModel) share one orchestration
// (forward_common.cc): Forward refuses options the path does not implement (CheckOptions), checks the batch
// (CheckBatch), sizes the outputs, grows the states' own memory, runs the path's ForwardBatch, and marks states
// broken when it fails — every state of the batch on an error, or the entries whose outputs[i].error it set —
// then returns FailedEntriesStatus. MtpForward checks its inputs (CheckMtpInput) and runs MtpForwardChecked. A
// model that hands calls on to another (LockstepLeader) derives from Model instead.
class PathModel : public Model {
 public:
  Status Forward(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                 const ForwardOptions& options = {}, Trace* trace = nullptr,
                 const ForcedChoices* forced = nullptr) const final;
  Status MtpForward(SequenceState& state, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                    std::vector<float>& logits, const ForwardOptions& options = {}, Trace* trace = nullptr,
                    const MtpReplacedEmbeddings& replaced = {}) const final;
  // One entry at a time through MtpForwardChecked, which also gives the last pair's normed output.
  Status MtpForwardBatch(std::span<const MtpEntry> batch, std::vector<std::vector<float>>& logits,
                         const ForwardOptions& options = {}, std::vector<Status>* entry_errors = nullptr,
                         std::vector<std::vector<float>>* last_hidden = nullptr) const override;

 protected:
  // The path's forward pass over a checked batch whose outputs are sized and whose memory is prepared. Returns Ok
  // (entries that failed alone set their outputs[i].error) or an error that fails the whole batch.
  virtual Status ForwardBatch(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                              const ForwardOptions& options, Trace* trace, const ForcedChoices* forced) const = 0;
  // The path's MTP layer over checked inputs: logits [T, V]; `normed` (when not null) [T, D], the head's input.
  virtual Status MtpForwardChecked(SequenceState& state, std::span<const float> hidden,
                                   std::span<const int32_t> next_tokens, std::vector<float>& logits,
                                   const ForwardOptions& options, Trace* trace, const MtpReplacedEmbeddings& replaced,
                                   std::vector<float>* normed = nullptr) const = 0;
};

// Speculative decoding: puts the sequence back at `position`, whose KDA state `snapshot` holds (a BatchEntry's
// rollback written by a Forward that went past it). The DSA caches need nothing: the rows past `position`
// (latents, the draft's filling-pool row, a pooled key it completed) are written again by the next token at
// `position` before anything reads them, and the rows before it were never touched; docs/engine.md
// "Speculative decoding" has the argument and tests/unit/spec_decode_test.cc checks it bit for bit.
void RollBack(SequenceState& state, const std::byte* snapshot, int64_t position);

// The fp32 reference: plain loops, FP8 weights dequantized to fp32 in memory. The oracle of every fast path.
// One sequence's pass through the reference trunk (ReferenceModel::ForwardOne): what every site reads.
struct ReferencePass {
  const BatchEntry& entry;
  int sequence;
  const ForwardOptions& options;
  Trace* trace;                                              // null unless this sequence is traced
  const ForcedChoices* forced;                               // null: the model chooses experts and keys
  int64_t tokens;                                            // T: the entry's new tokens
  std::vector<std::pair<int64_t, std::byte*>> state_copies;  // (offset in the chunk, destination) of KDA state copies
};

// The named activations of one reference pass (shapes beside them).
struct ReferenceActivations {
  ReferenceActivations(int64_t tokens, int64_t hc, int64_t d);
  std::vector<float> streams;         // X [T, hc, D]: the mHC residual streams
  std::vector<float> sublayer_in;     // [T, D]: the site's normed collapse, the sublayer's input
  std::vector<float> sublayer_out;    // [T, D]: the sublayer's output (MoE: summed over the ranks)
  std::vector<float> collapsed;       // [D]: one token's mHC read
  std::vector<MhcCoefficients> site;  // [T]: this site's mHC coefficients
};

class ReferenceModel final : public PathModel {
 public:
  // `weights` holds the experts and tensor-parallel slices `plan` says are local (tensor_parallel.h); `comm`
  // (plan.ranks > 1) sums the MoE partial outputs, `tp_comm` (plan.tp > 1: the ranks of this rank's tp group)
  // the split attention and dense MLP outputs.
  ReferenceModel(ModelConfig config, ModelWeights weights, ShardPlan plan = {}, Communicator* comm = nullptr,
                 std::unique_ptr<Communicator> tp_comm = nullptr);
  // Reads config.json and the safetensors of `dir` — with `parallel` of several ranks, only this rank's experts
  // (options.experts is set from the plan) and its tensor-parallel slices. Collective over parallel.comm.
  static Result<std::unique_ptr<ReferenceModel>> Load(const std::string& dir, const LoadOptions& options = {},
                                                      const ModelParallel& parallel = {});

  const ModelConfig& config() const override { return config_; }
  const ModelConfig& local_config() const override { return local_; }
  int64_t weight_bytes() const override;
  bool has_mtp() const override { return weights_.mtp != nullptr; }
  // The communicator of this rank's tp group (null at --tp 1): its stats() count the collectives over the group
  // (the attention and dense all-reduces, the lm_head gather), the world's the rest.
  const Communicator* tp_communicator() const { return tp_comm_.get(); }
  ShardPlan shard_plan() const override { return plan_; }
  const ModelWeights& weights() const { return weights_; }

 private:
  Status ForwardBatch(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                      const ForwardOptions& options, Trace* trace, const ForcedChoices* forced) const override;
  Status MtpForwardChecked(SequenceState& state, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                           std::vector<float>& logits, const ForwardOptions& options, Trace* trace,
                           const MtpReplacedEmbeddings& replaced, std::vector<float>* normed) const override;
  Status ForwardOne(const BatchEntry& entry, int sequence, EntryOutput& output, const ForwardOptions& options,
                    Trace* trace, const ForcedChoices* forced) const;
  // The steps of ForwardOne: embedding, the two sublayers of a layer, the tracing of a site, the head.
  void Embed(const ReferencePass& pass, ReferenceActivations& act) const;
  Status Attention(const ReferencePass& pass, int64_t layer, const std::string& prefix,
                   ReferenceActivations& act) const;
  Status Ffn(const ReferencePass& pass, int64_t layer, ReferenceActivations& act,
             std::vector<RouterChoice>& choices) const;
  void TraceSublayer(const ReferencePass& pass, const std::string& name, const ReferenceActivations& act) const;
  Status Head(const ReferencePass& pass, ReferenceActivations& act, EntryOutput& output) const;
  // logits [rows, V] of `normed` [rows, D] on rank 0 (lm_head_split.h: this rank's vocabulary rows, gathered);
  // empty on the other ranks.
  Status LmHead(const float* normed, int64_t rows, std::vector<float>& logits) const;

  // Expert parallel: the MoE outputs [rows, D] are this rank's partial sums until summed over the ranks.
  Status SumMoeOverRanks(std::span<float> partial) const;
  // Tensor parallel: a split sublayer's outputs [rows, D] are this rank's partial sums until summed over its tp
  // group; a replicated one (`split` false) is whole already.
  Status SumOverTensorGroup(bool split, std::span<float> partial, const char* what) const;

  ModelConfig config_;
  ModelConfig local_;  // LocalConfig(config_, plan_): what the layers run on
  ModelWeights weights_;
  ShardPlan plan_;
  Communicator* comm_ = nullptr;
  std::unique_ptr<Communicator> tp_comm_;
};

}  // namespace glint
