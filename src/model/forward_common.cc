// The shared part of the forward paths (forward_common.h) and of the Model interface (model.h): sequences, the
// orchestration of PathModel, the checks, and the views of a layer's caches in a sequence's memory.
#include "model/forward_common.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace glint {

// ---- Model: sequences and the default batched MTP ----

SequenceState Model::NewSequence() const { return NewStandaloneSequence(KvCacheDtype::kFloat32); }

SequenceState Model::NewStandaloneSequence(KvCacheDtype kv_dtype) const {
  const ModelConfig& c = config();
  CacheOptions options;
  options.block_tokens = StandaloneBlockTokens(c);
  options.kv_dtype = kv_dtype;
  Result<CacheLayout> layout = CacheLayoutFor(options);
  SequenceState state;
  state.owner = this;
  // A config whose sizes cannot be laid out gets a state without memory; Forward refuses it with the reason.
  if (!layout.ok()) return state;
  state.layout = std::make_shared<const CacheLayout>(std::move(layout).value());
  Result<std::unique_ptr<OwnedSequenceMemory>> owned =
      OwnedSequenceMemory::Create(options.block_tokens, state.layout->block_bytes, state.layout->slot_bytes);
  GLINT_CHECK(owned.ok()) << owned.status().ToString();
  state.owned = std::move(owned).value();
  state.memory = {&state.owned->blocks, &state.owned->block_table, state.owned->slot.Item(0)};
  if (c.HasMtp()) state.mtp_dsa = NewDsaCache(c);
  return state;
}

SequenceState Model::BindSequence(std::shared_ptr<const CacheLayout> layout, SequenceMemory memory, int64_t tokens,
                                  int64_t mtp_tokens) const {
  SequenceState state;
  state.owner = this;
  state.tokens = tokens;
  state.layout = std::move(layout);
  state.memory = memory;
  if (state.layout != nullptr && state.layout->has_mtp() && memory.slot != nullptr) {
    // The MTP layer's cache: its own segments of the same blocks (position p of the block table) and slot.
    const CacheLayout& l = *state.layout;
    DsaCache& cache = state.mtp_dsa;
    cache.kv_lora_rank = l.kv_lora_rank;
    cache.index_head_dim = l.index_head_dim;
    cache.kpool = l.index_kpool;
    cache.block_tokens = l.block_tokens();
    cache.blocks = memory.blocks;
    cache.block_table = memory.block_table;
    cache.dtype = l.options.kv_dtype;
    cache.latents_offset = l.mtp_latents;
    cache.pooled_offset = l.mtp_pooled;
    cache.pending = reinterpret_cast<float*>(memory.slot + l.mtp_pending);
    state.mtp_tokens = cache.tokens = mtp_tokens < 0 ? tokens : mtp_tokens;
  }
  return state;
}

namespace {

// The MTP batch run one entry at a time: run(i, logits) computes entry i's logits [T, V] (Model::MtpForwardBatch's
// contract), which are then trimmed to the rows the entry wants.
template <typename RunEntry>
Status MtpEntriesOneByOne(std::span<const MtpEntry> batch, int64_t vocab, std::vector<std::vector<float>>& logits,
                          std::vector<Status>* entry_errors, RunEntry run) {
  logits.assign(batch.size(), {});
  if (entry_errors != nullptr) entry_errors->assign(batch.size(), Status::Ok());
  Status first;
  size_t failed = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const MtpEntry& entry = batch[i];
    if (entry.state == nullptr) return InvalidArgument("MTP batch entry ", i, " has no sequence state");
    Status status = run(i, logits[i]);
    if (!status.ok() && entry_errors == nullptr) return status.WithContext(StrCat("MTP batch entry ", i));
    if (!status.ok()) {  // this entry alone (an expert read): the others go on
      (*entry_errors)[i] = status;
      if (failed++ == 0) first = status.WithContext(StrCat("MTP batch entry ", i));
      logits[i].clear();
      continue;
    }
    const int64_t rows = static_cast<int64_t>(logits[i].size()) / vocab;
    if (entry.logits == LogitsWanted::kNone) {
      logits[i].clear();
    } else if (entry.logits == LogitsWanted::kLast && rows > 1) {
      logits[i].erase(logits[i].begin(), logits[i].end() - vocab);
    }
  }
  if (failed > 0) return first.WithContext(StrCat(failed, " of ", batch.size(), " MTP entries failed"));
  return Status::Ok();
}

}  // namespace

Status Model::MtpForwardBatch(std::span<const MtpEntry> batch, std::vector<std::vector<float>>& logits,
                              const ForwardOptions& options, std::vector<Status>* entry_errors,
                              std::vector<std::vector<float>>* last_hidden) const {
  if (last_hidden != nullptr) {
    return Unimplemented("this model does not return the MTP layer's output hidden state (chained drafts need it)");
  }
  return MtpEntriesOneByOne(batch, config().vocab_size, logits, entry_errors, [&](size_t i, std::vector<float>& out) {
    const MtpEntry& entry = batch[i];
    return MtpForward(*entry.state, entry.hidden, entry.next_tokens, out, options, nullptr, entry.replaced);
  });
}

// ---- PathModel: one orchestration for every forward path ----

namespace {

// Outputs sized as Model::Forward promises them: logits [rows, V] (rows: T, 1 or 0; none on a rank that does not
// receive logits), hidden [T, D] when wanted.
void SizeOutputs(const ModelConfig& c, bool receives_logits, std::span<const BatchEntry> batch,
                 std::vector<EntryOutput>& outputs) {
  outputs.assign(batch.size(), EntryOutput{});
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t tokens = static_cast<int64_t>(batch[i].tokens.size());
    const int64_t rows = batch[i].logits == LogitsWanted::kAll    ? tokens
                         : batch[i].logits == LogitsWanted::kLast ? 1
                                                                  : 0;
    outputs[i].logits.resize(receives_logits ? rows * c.vocab_size : 0);
    if (batch[i].want_hidden) outputs[i].hidden.resize(tokens * c.hidden_size);
  }
}

}  // namespace

Status PathModel::Forward(std::span<const BatchEntry> batch, std::vector<EntryOutput>& outputs,
                          const ForwardOptions& options, Trace* trace, const ForcedChoices* forced) const {
  GLINT_RETURN_IF_ERROR(CheckOptions(options));
  GLINT_RETURN_IF_ERROR(CheckBatch(*this, batch));
  SizeOutputs(config(), shard_plan().receives_logits(), batch, outputs);
  for (const BatchEntry& entry : batch) PrepareEntryMemory(entry);  // own memory grows; an engine's is reserved
  Status status = ForwardBatch(batch, outputs, options, trace, forced);
  if (!status.ok()) {  // some layers may have written: no state of the batch is known to describe its tokens
    for (const BatchEntry& entry : batch) entry.state->broken = true;
    return status;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!outputs[i].error.ok()) batch[i].state->broken = true;  // this entry alone failed (an expert read)
    // --dp-attention: the rank holding this sequence advanced its caches; this rank's view follows.
    if (batch[i].state->HeldElsewhere()) batch[i].state->tokens += static_cast<int64_t>(batch[i].tokens.size());
  }
  return FailedEntriesStatus(outputs);
}

Status PathModel::MtpForward(SequenceState& state, std::span<const float> hidden, std::span<const int32_t> next_tokens,
                             std::vector<float>& logits, const ForwardOptions& options, Trace* trace,
                             const MtpReplacedEmbeddings& replaced) const {
  GLINT_RETURN_IF_ERROR(CheckOptions(options));
  GLINT_RETURN_IF_ERROR(CheckMtpInput(*this, state, hidden, next_tokens, replaced));
  return MtpForwardChecked(state, hidden, next_tokens, logits, options, trace, replaced);
}

Status PathModel::MtpForwardBatch(std::span<const MtpEntry> batch, std::vector<std::vector<float>>& logits,
                                  const ForwardOptions& options, std::vector<Status>* entry_errors,
                                  std::vector<std::vector<float>>* last_hidden) const {
  GLINT_RETURN_IF_ERROR(CheckOptions(options));
  if (last_hidden != nullptr) last_hidden->assign(batch.size(), {});
  const int64_t d = config().hidden_size;
  return MtpEntriesOneByOne(batch, config().vocab_size, logits, entry_errors, [&](size_t i, std::vector<float>& out) {
    const MtpEntry& entry = batch[i];
    GLINT_RETURN_IF_ERROR(CheckMtpInput(*this, *entry.state, entry.hidden, entry.next_tokens, entry.replaced));
    std::vector<float> normed;  // [T, D]
    GLINT_RETURN_IF_ERROR(MtpForwardChecked(*entry.state, entry.hidden, entry.next_tokens, out, options, nullptr,
                                            entry.replaced, last_hidden != nullptr ? &normed : nullptr));
    if (last_hidden != nullptr) (*last_hidden)[i].assign(normed.end() - d, normed.end());
    return Status::Ok();
  });
}

// ---- checks ----

Status DpAttentionRefusesMtp() {
  return Unimplemented(
      "--dp-attention does not run the MTP layer yet (--speculative mtp, final hidden states): leave one of them "
      "out");
}

Status CheckMtpInput(const Model& model, const SequenceState& state, std::span<const float> hidden,
                     std::span<const int32_t> next_tokens, const MtpReplacedEmbeddings& replaced) {
  const ModelConfig& c = model.config();
  if (!model.has_mtp()) return FailedPrecondition("the model has no MTP layer loaded");
  if (model.shard_plan().dp_attention) return DpAttentionRefusesMtp();
  if (state.owner != &model) return InvalidArgument("the sequence state was not created by this model");
  if (state.mtp_dsa.blocks == nullptr) {
    return FailedPrecondition(
        "this sequence has no MTP cache: bind it with a cache layout made with "
        "CacheOptions::mtp (speculative decoding), or use NewSequence");
  }
  const int64_t pairs = static_cast<int64_t>(next_tokens.size());
  if (pairs == 0) return InvalidArgument("MTP needs at least one (hidden, next token) pair");
  if (static_cast<int64_t>(hidden.size()) != pairs * c.hidden_size) {
    return InvalidArgument("MTP hidden has ", hidden.size(), " values; expected ", pairs, " × ", c.hidden_size);
  }
  for (int32_t token : next_tokens) {
    if (token < 0 || token >= c.vocab_size) return InvalidArgument("MTP token id ", token, " is out of range");
  }
  return CheckEmbeddingRows(replaced.positions, replaced.rows, pairs, c).WithContext("MTP");
}

// Image rows replacing embeddings: ascending positions inside the `tokens` of an entry, one finite row of D values
// each.
Status CheckEmbeddingRows(std::span<const int32_t> positions, std::span<const float> rows, int64_t tokens,
                          const ModelConfig& config) {
  if (rows.size() != positions.size() * static_cast<size_t>(config.hidden_size)) {
    return InvalidArgument(rows.size(), " embedding row values for ", positions.size(),
                           " replaced positions; expected positions × hidden_size ", config.hidden_size);
  }
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] < 0 || positions[i] >= tokens || (i > 0 && positions[i] <= positions[i - 1])) {
      return InvalidArgument("replaced embedding position ", positions[i], " (entry ", i, ") is out of order or ",
                             "outside the entry's ", tokens, " tokens");
    }
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!std::isfinite(rows[i])) {
      return InvalidArgument("replaced embedding row ", i / config.hidden_size, " holds a non-finite value");
    }
  }
  return Status::Ok();
}

namespace {

Status CheckEntry(const Model& model, const BatchEntry& entry) {
  const ModelConfig& config = model.config();
  if (entry.state == nullptr) return InvalidArgument("batch entry has no sequence state");
  if (entry.state->owner != &model) {
    return InvalidArgument("the sequence state was not created by this model (call NewSequence on it)");
  }
  if (entry.tokens.empty()) return InvalidArgument("a batch entry has no tokens; expected at least one");
  if (entry.want_hidden && model.shard_plan().dp_attention) return DpAttentionRefusesMtp();
  for (size_t i = 0; i < entry.tokens.size(); ++i) {
    if (entry.tokens[i] < 0 || entry.tokens[i] >= config.vocab_size) {
      return InvalidArgument("token id ", entry.tokens[i], " at index ", i, " is out of range; expected 0 ≤ id < ",
                             config.vocab_size);
    }
  }
  if (entry.state->HeldElsewhere()) {  // --dp-attention: another rank holds its caches and checks them
    const int64_t total = entry.state->tokens + static_cast<int64_t>(entry.tokens.size());
    if (total > config.max_position_embeddings) {
      return OutOfRange("the sequence would reach ", total, " tokens; the model's maximum is ",
                        config.max_position_embeddings, " (max_position_embeddings)");
    }
  } else {
    GLINT_RETURN_IF_ERROR(CheckEntryMemory(entry, model.local_config()));  // the caches hold this rank's heads
  }
  return CheckEmbeddingRows(entry.embedding_positions, entry.embedding_rows, static_cast<int64_t>(entry.tokens.size()),
                            config);
}

}  // namespace

namespace {

const float* FindReplacedRow(std::span<const int32_t> positions, std::span<const float> rows, int64_t index,
                             int64_t d) {
  const auto it = std::lower_bound(positions.begin(), positions.end(), index);
  if (it == positions.end() || *it != index) return nullptr;
  return rows.data() + (it - positions.begin()) * d;
}

}  // namespace

const float* ReplacedEmbedding(const BatchEntry& entry, int64_t index, int64_t d) {
  return FindReplacedRow(entry.embedding_positions, entry.embedding_rows, index, d);
}

const float* ReplacedEmbedding(const MtpReplacedEmbeddings& replaced, int64_t index, int64_t d) {
  return FindReplacedRow(replaced.positions, replaced.rows, index, d);
}

Status CheckBatch(const Model& model, std::span<const BatchEntry> batch) {
  for (size_t i = 0; i < batch.size(); ++i) {
    Status status = CheckEntry(model, batch[i]);
    if (!status.ok()) return status.WithContext(StrCat("batch entry ", i));
    for (size_t j = 0; j < i; ++j) {
      if (batch[j].state == batch[i].state) return InvalidArgument("batch entries ", j, " and ", i, " share a state");
    }
  }
  return Status::Ok();
}

Status FailedEntriesStatus(std::span<const EntryOutput> outputs) {
  size_t failed = 0, first = 0;
  for (size_t i = outputs.size(); i-- > 0;) {
    if (!outputs[i].error.ok()) ++failed, first = i;
  }
  if (failed == 0) return Status::Ok();
  return outputs[first].error.WithContext(StrCat("batch entry ", first, " (", failed, " of ", outputs.size(),
                                                 " entries failed; the others were computed)"));
}

Status CheckEntryMemory(const BatchEntry& entry, const ModelConfig& config) {
  const SequenceState& state = *entry.state;
  if (state.broken) {
    return FailedPrecondition("the sequence state was left inconsistent by a failed forward pass; start a new one");
  }
  if (state.layout == nullptr || state.memory.blocks == nullptr || state.memory.block_table == nullptr ||
      state.memory.slot == nullptr) {
    return FailedPrecondition("the sequence state has no cache memory (make it with NewSequence or BindSequence)");
  }
  GLINT_RETURN_IF_ERROR(state.layout->CheckMatches(config));
  if (state.memory.blocks->item_bytes() != state.layout->block_bytes) {
    return FailedPrecondition("the sequence's blocks are ", state.memory.blocks->item_bytes(),
                              " bytes; its layout needs ", state.layout->block_bytes);
  }
  if (state.tokens < 0) return FailedPrecondition("the sequence state has ", state.tokens, " positions");
  const int64_t total = entry.state->tokens + static_cast<int64_t>(entry.tokens.size());
  if (total > config.max_position_embeddings) {
    return OutOfRange("the sequence would reach ", total, " tokens; the model's maximum is ",
                      config.max_position_embeddings, " (max_position_embeddings)");
  }
  // Blocks for every position this call writes: the state's own memory grows (after all checks, in Forward);
  // an engine's must already be reserved.
  const int64_t capacity = static_cast<int64_t>(state.memory.block_table->size()) * state.layout->block_tokens();
  if (state.owned == nullptr && capacity < total) {
    return FailedPrecondition("the sequence's block table covers ", capacity, " positions but this call needs ", total,
                              "; reserve blocks before the forward pass");
  }
  int64_t previous = state.tokens;
  for (const StateCheckpoint& checkpoint : entry.checkpoints) {
    if (checkpoint.position <= previous || checkpoint.position > total) {
      return InvalidArgument("state checkpoint at position ", checkpoint.position,
                             " is not within this call's positions ", state.tokens + 1, " .. ", total, ", ascending");
    }
    if (checkpoint.position % state.layout->block_tokens() != 0) {
      return InvalidArgument("state checkpoint at position ", checkpoint.position, " is not at a block boundary (",
                             state.layout->block_tokens(), " tokens): the indexer's filling pool would be lost");
    }
    previous = checkpoint.position;
  }
  int64_t previous_rollback = state.tokens;
  for (const StateCheckpoint& rollback : entry.rollback) {
    if (rollback.data == nullptr || rollback.position <= previous_rollback || rollback.position >= total) {
      return InvalidArgument("the rollback snapshot at position ", rollback.position,
                             " is not strictly inside this call's positions ", state.tokens, " .. ", total,
                             ", after the previous one, with memory to write to");
    }
    previous_rollback = rollback.position;
  }
  for (int32_t block : *state.memory.block_table) {
    if (block < 0 || block >= state.memory.blocks->count()) {
      return FailedPrecondition("the sequence's block table names block ", block, " of ", state.memory.blocks->count());
    }
  }
  return Status::Ok();
}

// ---- memory and cache views ----

void PrepareEntryMemory(const BatchEntry& entry) {
  SequenceState& state = *entry.state;
  if (state.owned != nullptr && !state.HeldElsewhere())
    state.owned->Reserve(state.tokens + static_cast<int64_t>(entry.tokens.size()));
}

KdaStateView KdaLayerStateIn(const CacheLayout& layout, int64_t layer, std::byte* slot_like) {
  const CacheLayout::Layer& at = layout.layers[layer];
  KdaStateView view;
  view.conv_window = reinterpret_cast<float*>(slot_like + at.conv);
  view.recurrent = slot_like + at.recurrent;
  view.storage = layout.options.kda_state;
  return view;
}

KdaStateView KdaLayerState(const SequenceState& state, int64_t layer) {
  return KdaLayerStateIn(*state.layout, layer, state.memory.slot);
}

std::vector<std::pair<int64_t, std::byte*>> EntryStateCopies(const BatchEntry& entry) {
  std::vector<std::pair<int64_t, std::byte*>> copies;
  for (const StateCheckpoint& checkpoint : entry.checkpoints) {
    copies.emplace_back(checkpoint.position - entry.state->tokens, checkpoint.data);
  }
  for (const StateCheckpoint& rollback : entry.rollback) {
    copies.emplace_back(rollback.position - entry.state->tokens, rollback.data);
  }
  std::stable_sort(copies.begin(), copies.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return copies;
}

void RollBack(SequenceState& state, const std::byte* snapshot, int64_t position) {
  GLINT_CHECK(state.memory.slot != nullptr && snapshot != nullptr && position >= 0 && position <= state.tokens)
      << "rollback to " << position << " of a sequence at " << state.tokens;
  std::memcpy(state.memory.slot, snapshot, state.layout->checkpoint_bytes);
  state.tokens = position;
}

void CopyKdaLayerState(const SequenceState& state, int64_t layer, std::byte* checkpoint) {
  const CacheLayout::Layer& at = state.layout->layers[layer];
  std::memcpy(checkpoint + at.conv, state.memory.slot + at.conv, state.layout->kda_conv_bytes);
  std::memcpy(checkpoint + at.recurrent, state.memory.slot + at.recurrent, state.layout->kda_recurrent_bytes);
}

DsaCache DsaLayerCache(const SequenceState& state, int64_t layer) {
  const CacheLayout& layout = *state.layout;
  const CacheLayout::Layer& at = layout.layers[layer];
  DsaCache cache;
  cache.kv_lora_rank = layout.kv_lora_rank;
  cache.index_head_dim = layout.index_head_dim;
  cache.kpool = layout.index_kpool;
  cache.block_tokens = layout.block_tokens();
  cache.tokens = state.tokens;
  cache.blocks = state.memory.blocks;
  cache.block_table = state.memory.block_table;
  cache.dtype = layout.options.kv_dtype;
  cache.latents_offset = at.latents;
  cache.pooled_offset = at.pooled;
  cache.pending = reinterpret_cast<float*>(state.memory.slot + at.pending);
  return cache;
}

std::vector<int32_t> PadSelections(std::span<const std::vector<int64_t>> selected, int64_t width) {
  std::vector<int32_t> out(selected.size() * width, -1);
  for (size_t t = 0; t < selected.size(); ++t) {
    const int64_t count = std::min<int64_t>(width, static_cast<int64_t>(selected[t].size()));
    for (int64_t i = 0; i < count; ++i) out[t * width + i] = static_cast<int32_t>(selected[t][i]);
  }
  return out;
}

}  // namespace glint
