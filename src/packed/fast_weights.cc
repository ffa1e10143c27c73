#include "packed/fast_weights.h"

#include <cstdlib>
#include <cstring>
#include <optional>

#include "quant/formats.h"

namespace glint {

int64_t PackedLinear::rows() const {
  return format == Format::kInt8 ? int8.layout.rows : format == Format::kInt4 ? int4.layout.rows : bf16.layout.rows;
}

int64_t PackedLinear::cols() const {
  return format == Format::kInt8 ? int8.layout.cols : format == Format::kInt4 ? int4.layout.cols : bf16.layout.cols;
}

std::string_view ExpertWeightsName(ExpertWeights format) { return format == ExpertWeights::kInt4 ? "int4" : "int8"; }

Result<ExpertWeights> ParseExpertWeights(std::string_view name) {
  if (name == "int8") return ExpertWeights::kInt8;
  if (name == "int4") return ExpertWeights::kInt4;
  return InvalidArgument("unknown expert weight format '", name, "'; expected int8 or int4");
}

uint64_t PackedLinear::bytes() const {
  if (format == Format::kInt8) return int8.layout.code_bytes() + int8.layout.scale_count() * sizeof(float);
  if (format == Format::kInt4) return int4.layout.code_bytes() + int4.layout.scale_count() * sizeof(float);
  if (format == Format::kBf16) return bf16.layout.value_count() * sizeof(uint16_t);
  return 0;
}

void EmbeddingTable::Row(int64_t r, float* out) const {
  if (bf16 != nullptr) {
    for (int64_t c = 0; c < cols; ++c) out[c] = Bf16ToFloat(bf16[r * cols + c]);
  } else {
    std::memcpy(out, f32 + r * cols, static_cast<size_t>(cols) * sizeof(float));
  }
}

const StoredTensor* FastWeightSource::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

uint64_t FastWeightSource::TotalBytes() const {
  uint64_t total = 0;
  for (const auto& [name, tensor] : tensors_) {
    for (const auto& blob : tensor.blobs) total += blob.size();
  }
  return total;
}

namespace {

std::string DimsText(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

class FastBinder {
 public:
  FastBinder(const FastWeightSource& source) : source_(source) {}

  Result<const StoredTensor*> Get(const std::string& name, const std::string& kind, size_t blobs) {
    const StoredTensor* tensor = source_.Find(name);
    if (tensor == nullptr) return NotFound("converted weights lack '", name, "'");
    if (tensor->kind != kind || tensor->blobs.size() != blobs) {
      return InvalidArgument("converted tensor '", name, "' is of kind '", tensor->kind, "' with ",
                             tensor->blobs.size(), " blobs; expected '", kind, "' with ", blobs);
    }
    for (const auto& blob : tensor->blobs) {
      if (reinterpret_cast<uintptr_t>(blob.data()) % 64 != 0) {
        return InvalidArgument("converted tensor '", name, "' is not 64-byte aligned");
      }
    }
    return tensor;
  }

  Status Int8(const std::string& name, int64_t rows, int64_t cols, PackedLinear& out) {
    GLINT_ASSIGN_OR_RETURN(const StoredTensor* t, Get(name, "int8", 2));
    if (t->dims.size() != 3 || t->dims[0] != rows || t->dims[1] != cols) {
      return InvalidArgument("converted tensor '", name, "' has dims ", DimsText(t->dims), "; the config needs [", rows,
                             ", ", cols, ", group]");
    }
    const Int8Layout layout{rows, cols, t->dims[2]};
    GLINT_RETURN_IF_ERROR(ValidateInt8Layout(layout).WithContext(name));
    if (t->blobs[0].size() != static_cast<size_t>(layout.code_bytes()) ||
        t->blobs[1].size() != static_cast<size_t>(layout.scale_count()) * sizeof(float)) {
      return InvalidArgument("converted tensor '", name, "' has ", t->blobs[0].size(), " code and ", t->blobs[1].size(),
                             " scale bytes; its layout needs ", layout.code_bytes(), " and ", layout.scale_count() * 4);
    }
    out.format = PackedLinear::Format::kInt8;
    out.int8 = {layout, t->blobs[0].data(), reinterpret_cast<const float*>(t->blobs[1].data())};
    return Status::Ok();
  }

  Status Int4(const std::string& name, int64_t rows, int64_t cols, PackedLinear& out) {
    GLINT_ASSIGN_OR_RETURN(const StoredTensor* t, Get(name, "int4", 2));
    if (t->dims.size() != 3 || t->dims[0] != rows || t->dims[1] != cols) {
      return InvalidArgument("converted tensor '", name, "' has dims ", DimsText(t->dims), "; the config needs [", rows,
                             ", ", cols, ", group]");
    }
    const Int4Layout layout{rows, cols, t->dims[2]};
    GLINT_RETURN_IF_ERROR(ValidateInt4Layout(layout).WithContext(name));
    if (t->blobs[0].size() != static_cast<size_t>(layout.code_bytes()) ||
        t->blobs[1].size() != static_cast<size_t>(layout.scale_count()) * sizeof(float)) {
      return InvalidArgument("converted tensor '", name, "' has ", t->blobs[0].size(), " code and ", t->blobs[1].size(),
                             " scale bytes; its int4 layout needs ", layout.code_bytes(), " and ",
                             layout.scale_count() * 4);
    }
    out.format = PackedLinear::Format::kInt4;
    out.int4 = {layout, t->blobs[0].data(), reinterpret_cast<const float*>(t->blobs[1].data())};
    return Status::Ok();
  }

  // A routed expert's matrix: int8 or int4 as stored. Every routed expert must use the same one (`experts`: the
  // format of the first bound, null before it).
  Status Expert(const std::string& name, int64_t rows, int64_t cols, PackedLinear& out,
                std::optional<ExpertWeights>& experts) {
    const StoredTensor* t = source_.Find(name);
    const ExpertWeights stored = t != nullptr && t->kind == "int4" ? ExpertWeights::kInt4 : ExpertWeights::kInt8;
    if (experts.has_value() && *experts != stored) {
      return InvalidArgument("converted tensor '", name, "' is ", ExpertWeightsName(stored), " but earlier routed ",
                             "experts are ", ExpertWeightsName(*experts), "; a container holds one expert format");
    }
    experts = stored;
    return stored == ExpertWeights::kInt4 ? Int4(name, rows, cols, out) : Int8(name, rows, cols, out);
  }

  Status Bf16(const std::string& name, int64_t rows, int64_t cols, PackedLinear& out) {
    GLINT_ASSIGN_OR_RETURN(const StoredTensor* t, Get(name, "bf16", 1));
    const Bf16Layout layout{rows, cols};
    if (t->dims != std::vector<int64_t>{rows, cols} ||
        t->blobs[0].size() != static_cast<size_t>(layout.value_count()) * sizeof(uint16_t)) {
      return InvalidArgument("converted tensor '", name, "' has dims ", DimsText(t->dims), " and ", t->blobs[0].size(),
                             " bytes; the config needs [", rows, ", ", cols, "] (", layout.value_count() * 2,
                             " bytes)");
    }
    out.format = PackedLinear::Format::kBf16;
    out.bf16 = {layout, reinterpret_cast<const uint16_t*>(t->blobs[0].data())};
    return Status::Ok();
  }

  Status F32(const std::string& name, const std::vector<int64_t>& shape, const float*& out) {
    GLINT_ASSIGN_OR_RETURN(const StoredTensor* t, Get(name, "f32", 1));
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    if (t->dims != shape || t->blobs[0].size() != static_cast<size_t>(count) * sizeof(float)) {
      return InvalidArgument("converted tensor '", name, "' has dims ", DimsText(t->dims), "; the config needs ",
                             DimsText(shape));
    }
    out = reinterpret_cast<const float*>(t->blobs[0].data());
    return Status::Ok();
  }

  Status Embedding(const std::string& name, int64_t rows, int64_t cols, EmbeddingTable& out) {
    const StoredTensor* t = source_.Find(name);
    if (t == nullptr) return NotFound("converted weights lack '", name, "'");
    const bool bf16 = t->kind == "rows_bf16";
    if ((!bf16 && t->kind != "rows_f32") || t->blobs.size() != 1 || t->dims != std::vector<int64_t>{rows, cols} ||
        t->blobs[0].size() != static_cast<size_t>(rows * cols) * (bf16 ? 2 : 4)) {
      return InvalidArgument("converted tensor '", name, "' is '", t->kind, "' ", DimsText(t->dims),
                             "; expected rows_bf16 or rows_f32 [", rows, ", ", cols, "]");
    }
    out.rows = rows;
    out.cols = cols;
    if (bf16) {
      out.bf16 = reinterpret_cast<const uint16_t*>(t->blobs[0].data());
    } else {
      out.f32 = reinterpret_cast<const float*>(t->blobs[0].data());
    }
    return Status::Ok();
  }

 private:
  const FastWeightSource& source_;
};

Status BindMhc(FastBinder& b, const ModelConfig& c, const std::string& p, FastMhcWeights& w) {
  const int64_t mix = (2 + c.hc_mult) * c.hc_mult;
  GLINT_RETURN_IF_ERROR(b.F32(p + "fn", {mix, c.hc_mult * c.hidden_size}, w.fn));
  GLINT_RETURN_IF_ERROR(b.F32(p + "base", {mix}, w.base));
  return b.F32(p + "scale", {3}, w.scale);
}

Status BindKda(FastBinder& b, const ModelConfig& c, const std::string& p, FastKdaWeights& w) {
  const int64_t d = c.kda_head_dim, width = c.KdaWidth(), hidden = c.hidden_size;
  GLINT_RETURN_IF_ERROR(b.Int8(p + "qkv", 3 * width, hidden, w.qkv));
  GLINT_RETURN_IF_ERROR(b.Bf16(p + "gates_in", 2 * d + c.kda_num_heads, hidden, w.gates_in));
  GLINT_RETURN_IF_ERROR(b.Bf16(p + "f_b", width, d, w.f_b));
  GLINT_RETURN_IF_ERROR(b.Bf16(p + "g_b", width, d, w.g_b));
  GLINT_RETURN_IF_ERROR(b.Int8(p + "o_proj", hidden, width, w.o_proj));
  const char* convs[3] = {"q_conv", "k_conv", "v_conv"};
  for (int i = 0; i < 3; ++i) GLINT_RETURN_IF_ERROR(b.F32(p + convs[i], {width, c.kda_conv_kernel}, w.conv[i]));
  GLINT_RETURN_IF_ERROR(b.F32(p + "a_log", {c.kda_num_heads}, w.a_log));
  GLINT_RETURN_IF_ERROR(b.F32(p + "dt_bias", {width}, w.dt_bias));
  return b.F32(p + "o_norm", {d}, w.o_norm);
}

Status BindDsa(FastBinder& b, const ModelConfig& c, const std::string& p, FastDsaWeights& w) {
  const int64_t heads = c.num_attention_heads, hidden = c.hidden_size, e = c.index_head_dim;
  GLINT_RETURN_IF_ERROR(b.Int8(p + "qa_kva", c.q_lora_rank + c.kv_lora_rank, hidden, w.qa_kva));
  GLINT_RETURN_IF_ERROR(b.F32(p + "q_a_norm", {c.q_lora_rank}, w.q_a_norm));
  GLINT_RETURN_IF_ERROR(b.F32(p + "kv_a_norm", {c.kv_lora_rank}, w.kv_a_norm));
  GLINT_RETURN_IF_ERROR(b.Int8(p + "q_b", heads * c.qk_head_dim, c.q_lora_rank, w.q_b));
  GLINT_RETURN_IF_ERROR(b.Int8(p + "k_absorb", heads * c.kv_lora_rank, c.qk_head_dim, w.k_absorb));
  GLINT_RETURN_IF_ERROR(b.Int8(p + "v_up", heads * c.v_head_dim, c.kv_lora_rank, w.v_up));
  GLINT_RETURN_IF_ERROR(b.Int8(p + "o_proj", hidden, heads * c.v_head_dim, w.o_proj));
  GLINT_RETURN_IF_ERROR(b.Bf16(p + "index_in", 2 * e + c.index_n_heads, hidden, w.index_in));
  GLINT_RETURN_IF_ERROR(b.Bf16(p + "index_q", c.index_n_heads * e, c.q_lora_rank, w.index_q));
  GLINT_RETURN_IF_ERROR(b.F32(p + "k_norm_weight", {e}, w.k_norm_weight));
  GLINT_RETURN_IF_ERROR(b.F32(p + "k_norm_bias", {e}, w.k_norm_bias));
  return b.F32(p + "ape", {c.index_kpool, e}, w.ape);
}

Status BindMlp(FastBinder& b, const std::string& p, int64_t hidden, int64_t width, FastMlpWeights& w) {
  GLINT_RETURN_IF_ERROR(b.Int8(p + "gate_up", 2 * width, hidden, w.gate_up));
  return b.Int8(p + "down", hidden, width, w.down);
}

Status BindExpert(FastBinder& b, const std::string& p, int64_t hidden, int64_t width, FastMlpWeights& w,
                  std::optional<ExpertWeights>& experts) {
  GLINT_RETURN_IF_ERROR(b.Expert(p + "gate_up", 2 * width, hidden, w.gate_up, experts));
  return b.Expert(p + "down", hidden, width, w.down, experts);
}

Status BindMoe(FastBinder& b, const ModelConfig& c, const std::string& p, const LocalExperts& local,
               int64_t shared_width, FastMoeWeights& w, std::optional<ExpertWeights>& experts) {
  GLINT_RETURN_IF_ERROR(b.Bf16(p + "router", c.n_routed_experts, c.hidden_size, w.router));
  GLINT_RETURN_IF_ERROR(b.F32(p + "bias", {c.n_routed_experts}, w.bias));
  w.experts.resize(c.n_routed_experts);
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    if (!local.routed.Holds(e)) continue;  // another rank's: left empty
    GLINT_RETURN_IF_ERROR(BindExpert(b, p + "experts." + std::to_string(e) + ".", c.hidden_size,
                                     c.moe_intermediate_size, w.experts[e], experts));
  }
  w.shared.resize(c.n_shared_experts > 0 ? 1 : 0);
  if (!w.shared.empty() && local.shared) {
    GLINT_RETURN_IF_ERROR(BindMlp(b, p + "shared.", c.hidden_size, shared_width, w.shared[0]));
  }
  return Status::Ok();
}

}  // namespace

bool IsOtherRanksExpert(const std::string& name, const LocalExperts& local) {
  const size_t moe = name.find("moe.");
  if (moe == std::string::npos) return false;
  const std::string_view rest = std::string_view(name).substr(moe + 4);
  if (rest.starts_with("shared.")) return !local.shared;
  if (!rest.starts_with("experts.")) return false;
  const int64_t expert = std::strtoll(rest.data() + 8, nullptr, 10);
  return !local.routed.Holds(expert);
}

void FastWeightSource::Drop(const std::function<bool(const std::string&)>& drop) {
  std::erase_if(tensors_, [&](const auto& entry) { return drop(entry.first); });
}

Status KeepLmHeadRows(FastWeightSource& source, const IndexRange& rows) {
  const StoredTensor* head = source.Find("lm_head");
  if (head == nullptr || head->kind != "int8" || head->dims.size() != 3 || head->blobs.size() != 2) {
    return Status::Ok();  // absent or malformed: BindFastWeights says what is wrong
  }
  const int64_t vocab = head->dims[0];
  if (rows.end > vocab) return Status::Ok();  // another model's container: BindFastWeights names the tensor
  if (rows.begin == 0 && rows.end == vocab) return Status::Ok();
  if (rows.count() == 0) {
    source.Drop([](const std::string& name) { return name == "lm_head"; });
    return Status::Ok();
  }
  if (rows.begin % kInt8RowBlock != 0 || (rows.end % kInt8RowBlock != 0 && rows.end != vocab)) {
    return InternalError("lm_head rows [", rows.begin, ", ", rows.end, ") of ", vocab, " are not whole row blocks");
  }
  const Int8Layout whole{vocab, head->dims[1], head->dims[2]};
  const Int8Layout part{rows.count(), head->dims[1], head->dims[2]};
  const int64_t first_block = rows.begin / kInt8RowBlock;
  StoredTensor narrowed = *head;
  narrowed.dims[0] = rows.count();
  narrowed.blobs[0] = head->blobs[0].subspan(first_block * whole.block_code_bytes(), part.code_bytes());
  narrowed.blobs[1] = head->blobs[1].subspan(first_block * whole.groups() * kInt8RowBlock * sizeof(float),
                                             part.scale_count() * sizeof(float));
  source.Add("lm_head", std::move(narrowed));
  return Status::Ok();
}

Result<FastWeights> BindFastWeights(const FastWeightSource& source, const ModelConfig& c, bool with_mtp,
                                    const LocalExperts& local, int64_t shared_width, int64_t lm_head_rows) {
  if (shared_width < 0) shared_width = c.SharedIntermediate();
  FastBinder b(source);
  FastWeights w;
  std::optional<ExpertWeights> experts;  // set by the first routed expert bound
  const int64_t d = c.hidden_size;
  GLINT_RETURN_IF_ERROR(b.Embedding("embed", c.vocab_size, d, w.embed));
  GLINT_RETURN_IF_ERROR(b.F32("final_norm", {d}, w.final_norm));
  if (lm_head_rows != 0) {
    GLINT_RETURN_IF_ERROR(b.Int8("lm_head", lm_head_rows < 0 ? c.vocab_size : lm_head_rows, d, w.lm_head));
  }
  w.layers.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    FastLayerWeights& layer = w.layers[l];
    const std::string p = "layers." + std::to_string(l) + ".";
    layer.attention_kind = c.attention_kinds[l];
    layer.mlp_kind = c.mlp_kinds[l];
    GLINT_RETURN_IF_ERROR(b.F32(p + "attn_norm", {d}, layer.attn_norm));
    GLINT_RETURN_IF_ERROR(b.F32(p + "ffn_norm", {d}, layer.ffn_norm));
    GLINT_RETURN_IF_ERROR(BindMhc(b, c, p + "hc_attn.", layer.hc_attn));
    GLINT_RETURN_IF_ERROR(BindMhc(b, c, p + "hc_ffn.", layer.hc_ffn));
    if (layer.attention_kind == AttentionKind::kKda) {
      GLINT_RETURN_IF_ERROR(BindKda(b, c, p + "kda.", layer.kda));
    } else {
      GLINT_RETURN_IF_ERROR(BindDsa(b, c, p + "dsa.", layer.dsa));
    }
    if (layer.mlp_kind == MlpKind::kDense) {
      GLINT_RETURN_IF_ERROR(BindMlp(b, p + "mlp.", d, c.intermediate_size, layer.mlp));
    } else {
      GLINT_RETURN_IF_ERROR(BindMoe(b, c, p + "moe.", local, shared_width, layer.moe, experts));
    }
  }
  if (with_mtp && c.HasMtp()) {
    auto mtp = std::make_unique<FastMtpWeights>();
    GLINT_RETURN_IF_ERROR(b.Int8("mtp.eh_proj", d, 2 * d, mtp->eh_proj));
    GLINT_RETURN_IF_ERROR(b.F32("mtp.enorm", {d}, mtp->enorm));
    GLINT_RETURN_IF_ERROR(b.F32("mtp.hnorm", {d}, mtp->hnorm));
    GLINT_RETURN_IF_ERROR(b.F32("mtp.attn_norm", {d}, mtp->attn_norm));
    GLINT_RETURN_IF_ERROR(b.F32("mtp.ffn_norm", {d}, mtp->ffn_norm));
    GLINT_RETURN_IF_ERROR(b.F32("mtp.head_norm", {d}, mtp->head_norm));
    GLINT_RETURN_IF_ERROR(BindDsa(b, c, "mtp.dsa.", mtp->dsa));
    GLINT_RETURN_IF_ERROR(BindMoe(b, c, "mtp.moe.", local, shared_width, mtp->moe, experts));
    w.mtp = std::move(mtp);
  }
  w.experts = experts.value_or(ExpertWeights::kInt8);
  return w;
}

}  // namespace glint
