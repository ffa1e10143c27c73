// Weights of the fast path: packed kernel formats (quant/int8_matrix.h, quant/bf16_matrix.h) viewed in memory that
// belongs to a FastWeightSource (buffers converted at load time, or a mapped `glint convert` container).
//
// Precision policy (measured in docs/fast-path.md): int8 W8A8 for every large projection (MLA, dense MLP, experts,
// KDA q/k/v/o, kv_b_proj absorbed, lm_head, MTP eh_proj); exact bf16 weights × fp32 activations for tensors that
// make discrete choices or feed exponentials and are < 2% of the bytes (MoE router, DSA indexer, KDA f/g/b gate
// projections); small F32 tensors stay F32; the embedding stays bf16 (one row read per token).
//
// Projections that share an input are stacked into one matrix so the activations are quantized once and one
// parallel call covers them: KDA [q; k; v] and [f_a; g_a; b], MLA [q_a; kv_a], indexer [wk; gate; weights_proj],
// SwiGLU [gate; up]. kv_b_proj is split for the absorbed form: k_absorb stacks Wk_hᵀ [kv_lora, qk] per head and
// v_up stacks Wv_h [v, kv_lora] per head, so head h owns a contiguous range of row blocks in each.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "dist/sharding.h"
#include "io/config.h"
#include "io/weight_container.h"
#include "quant/bf16_matrix.h"
#include "quant/int4_matrix.h"
#include "quant/int8_matrix.h"

namespace glint {

// One packed linear weight [rows, cols]: int8, int4 (routed experts with `--experts int4`) or bf16.
struct PackedLinear {
  enum class Format { kNone, kInt8, kInt4, kBf16 };
  Format format = Format::kNone;
  Int8MatrixView int8;
  Int4MatrixView int4;
  Bf16MatrixView bf16;

  int64_t rows() const;
  int64_t cols() const;
  uint64_t bytes() const;  // bytes a full product reads (codes + scales, or bf16 values)
  // The activation K-grouping of an int8 or int4 weight (what QuantizeActivations needs).
  Int8Layout ActivationGrouping() const {
    return format == Format::kInt4 ? int4.layout.ActivationGrouping() : int8.layout;
  }
};

// Storage of the routed experts' gate/up/down weights (everything else is unaffected): int8 W8A8 (default) or
// int4 W4A8 (docs/fast-path.md, "int4 experts"), which halves the bytes of the model's largest part.
enum class ExpertWeights { kInt8, kInt4 };
std::string_view ExpertWeightsName(ExpertWeights format);  // "int8", "int4"
Result<ExpertWeights> ParseExpertWeights(std::string_view name);

// Rows of an embedding table [rows, cols] in bf16 (or fp32 when the checkpoint stored fp32).
struct EmbeddingTable {
  int64_t rows = 0, cols = 0;
  const uint16_t* bf16 = nullptr;  // [rows, cols] when bf16
  const float* f32 = nullptr;      // [rows, cols] otherwise
  void Row(int64_t r, float* out) const;
};

struct FastMhcWeights {
  const float* fn = nullptr;     // [(2 + hc)·hc, hc·D]
  const float* base = nullptr;   // [(2 + hc)·hc]
  const float* scale = nullptr;  // [3]
};

struct FastKdaWeights {
  PackedLinear qkv;                                    // int8 [3·width, D]  q, k, v
  PackedLinear gates_in;                               // bf16 [2·d + H, D]  f_a, g_a, b
  PackedLinear f_b, g_b;                               // bf16 [width, d]
  PackedLinear o_proj;                                 // int8 [D, width]
  const float* conv[3] = {nullptr, nullptr, nullptr};  // q, k, v: [width, K]
  const float* a_log = nullptr;                        // [H]
  const float* dt_bias = nullptr;                      // [width]
  const float* o_norm = nullptr;                       // [d]
};

struct FastDsaWeights {
  PackedLinear qa_kva;                   // int8 [q_lora + kv_lora, D]
  const float* q_a_norm = nullptr;       // [q_lora]
  const float* kv_a_norm = nullptr;      // [kv_lora]
  PackedLinear q_b;                      // int8 [H·qk, q_lora]
  PackedLinear k_absorb;                 // int8 [H·kv_lora, qk]   per head Wk_hᵀ
  PackedLinear v_up;                     // int8 [H·v, kv_lora]    per head Wv_h
  PackedLinear o_proj;                   // int8 [D, H·v]
  PackedLinear index_in;                 // bf16 [2·e + I, D]      wk, compress_gate, weights_proj
  PackedLinear index_q;                  // bf16 [I·e, q_lora]     wq_b
  const float* k_norm_weight = nullptr;  // [e]
  const float* k_norm_bias = nullptr;    // [e]
  const float* ape = nullptr;            // [kpool, e]
};

struct FastMlpWeights {
  PackedLinear gate_up;  // int8 [2·width, D]  gate rows, then up rows
  PackedLinear down;     // int8 [D, width]
};

struct FastMoeWeights {
  PackedLinear router;                  // bf16 [E, D]
  const float* bias = nullptr;          // [E] e_score_correction_bias (choice only)
  std::vector<FastMlpWeights> experts;  // [E]
  std::vector<FastMlpWeights> shared;   // [0 or 1]
};

struct FastLayerWeights {
  AttentionKind attention_kind;
  MlpKind mlp_kind;
  const float* attn_norm = nullptr;  // [D] input_layernorm
  const float* ffn_norm = nullptr;   // [D] post_attention_layernorm
  FastMhcWeights hc_attn, hc_ffn;
  FastKdaWeights kda;
  FastDsaWeights dsa;
  FastMlpWeights mlp;
  FastMoeWeights moe;
};

struct FastMtpWeights {
  PackedLinear eh_proj;  // int8 [D, 2·D]
  const float* enorm = nullptr;
  const float* hnorm = nullptr;
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* head_norm = nullptr;
  FastDsaWeights dsa;
  FastMoeWeights moe;
};

struct FastWeights {
  ExpertWeights experts = ExpertWeights::kInt8;  // of every routed expert (binding refuses a mix)
  EmbeddingTable embed;
  std::vector<FastLayerWeights> layers;
  const float* final_norm = nullptr;  // [D]
  PackedLinear lm_head;               // int8 [V, D]
  std::unique_ptr<FastMtpWeights> mtp;
};

// A stored packed tensor: kind ("int8" or "int4": dims [rows, cols, group], blobs [codes, scales]; "bf16": dims [rows,
// cols], blobs [values]; "f32": dims = shape, blobs [values]; "rows_bf16" / "rows_f32": dims [rows, cols]).
struct StoredTensor {
  std::string kind;
  std::vector<int64_t> dims;
  std::vector<std::span<const uint8_t>> blobs;
};

// Owns the memory behind FastWeights: converted buffers or a mapped container.
class FastWeightSource {
 public:
  void Add(std::string name, StoredTensor tensor) { tensors_[std::move(name)] = std::move(tensor); }
  AlignedBuffer& Own(AlignedBuffer buffer) {
    owned_.push_back(std::make_unique<AlignedBuffer>(std::move(buffer)));
    return *owned_.back();
  }
  void SetContainer(std::unique_ptr<ContainerFile> container) { container_ = std::move(container); }
  const ContainerFile* container() const { return container_.get(); }
  const StoredTensor* Find(const std::string& name) const;
  // Drops the tensors `drop` names (another rank's experts): their bytes no longer count, nothing binds them.
  void Drop(const std::function<bool(const std::string&)>& drop);
  const std::map<std::string, StoredTensor>& tensors() const { return tensors_; }
  uint64_t TotalBytes() const;

 private:
  std::map<std::string, StoredTensor> tensors_;
  std::vector<std::unique_ptr<AlignedBuffer>> owned_;
  std::unique_ptr<ContainerFile> container_;
};

// Binds every tensor the config needs, checking kinds, dims and blob sizes. `with_mtp`: bind the MTP layer too.
// `local`: the experts to bind (expert parallel); the others stay empty and need not be in the source.
// `shared_width`: the shared expert's intermediate width (tensor parallel: its column slice); < 0: the config's
// SharedIntermediate(). `lm_head_rows`: the rows of lm_head the source holds (KeepLmHeadRows); −1: all vocab_size,
// 0: none (left empty).
Result<FastWeights> BindFastWeights(const FastWeightSource& source, const ModelConfig& config, bool with_mtp,
                                    const LocalExperts& local = {}, int64_t shared_width = -1,
                                    int64_t lm_head_rows = -1);
// Narrows the source's int8 lm_head [V, D] to rows [begin, end) (ShardPlan vocab_rows: begin a multiple of the
// 16-row block, end one too or V), so that only those blocks' bytes count and are read; drops it when the range is
// empty. A view of the same bytes: each remaining row's codes and scales are unchanged.
Status KeepLmHeadRows(FastWeightSource& source, const IndexRange& rows);
// Whether a source tensor name belongs to an expert outside `local` ("layers.3.moe.experts.17.down",
// "mtp.moe.shared.gate_up").
bool IsOtherRanksExpert(const std::string& name, const LocalExperts& local);

}  // namespace glint
