// What the forward paths share (ReferenceModel in model.cc, FastModel in fast_model.cc): the checks every Forward
// and MtpForward makes before touching any state, so that every path refuses the same inputs with the same
// messages; the preparation of a sequence's memory; and the views of one layer's caches in a sequence's memory
// (cache_layout.h). PathModel (model.h) runs them in one place; wrappers that forward to another model
// (LockstepLeader) call the checks before they hand a batch on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "base/status.h"
#include "io/config.h"
#include "model/model.h"

namespace glint {

// Before any state is touched: each entry has tokens, in range, a state created by `model` with cache memory laid
// out for its config (an engine's block table already covering the new positions, valid state checkpoints),
// within max_position_embeddings; no two entries share a state. Changes nothing.
Status CheckBatch(const Model& model, std::span<const BatchEntry> batch);
// The memory part of those checks for one entry (a layout made for `config`, memory present, blocks reserved for
// every position the call writes unless the state owns its memory, valid state checkpoints).
Status CheckEntryMemory(const BatchEntry& entry, const ModelConfig& config);
// The refusal of the MTP layer and of final hidden states under --dp-attention (not implemented yet).
Status DpAttentionRefusesMtp();
// The MTP layer's inputs (Model::MtpForward): the model has the layer, the state is `model`'s and has an MTP
// cache, at least one pair, hidden [T, D], token ids in range, replaced rows as CheckEmbeddingRows.
Status CheckMtpInput(const Model& model, const SequenceState& state, std::span<const float> hidden,
                     std::span<const int32_t> next_tokens, const MtpReplacedEmbeddings& replaced = {});
// Image rows replacing the embeddings of an entry of `tokens` tokens: positions ascending in [0, tokens), rows
// [positions, D], finite.
Status CheckEmbeddingRows(std::span<const int32_t> positions, std::span<const float> rows, int64_t tokens,
                          const ModelConfig& config);
// What Forward returns when some entries failed alone (their outputs[i].error): the first one's error, saying how
// many failed; Ok when none did.
Status FailedEntriesStatus(std::span<const EntryOutput> outputs);

// Grows a state's own memory (NewSequence) to hold the entry's tokens; a no-op for engine memory. Call after all
// checks passed.
void PrepareEntryMemory(const BatchEntry& entry);
// Views of layer `layer`'s caches in the sequence's memory (cache_layout.h), at position state.tokens.
KdaStateView KdaLayerState(const SequenceState& state, int64_t layer);
DsaCache DsaLayerCache(const SequenceState& state, int64_t layer);
// A KDA layer's state inside `slot_like`: a slot, or a StateCheckpoint destination (laid out as a slot's KDA part).
KdaStateView KdaLayerStateIn(const CacheLayout& layout, int64_t layer, std::byte* slot_like);
// Copies a KDA layer's state (conv window and S as stored) into a StateCheckpoint destination.
void CopyKdaLayerState(const SequenceState& state, int64_t layer, std::byte* checkpoint);
// The KDA positions of an entry where its state is to be copied out (its checkpoints and its rollback snapshot),
// ascending, as (rows of the entry before the copy, destination).
std::vector<std::pair<int64_t, std::byte*>> EntryStateCopies(const BatchEntry& entry);

// Selected positions [T, width] padded with −1: the golden `indexer_selected` layout, as both paths trace it.
std::vector<int32_t> PadSelections(std::span<const std::vector<int64_t>> selected, int64_t width);

}  // namespace glint
