#include "model/weights.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "io/checkpoint_schema.h"
#include "quant/formats.h"

namespace glint {

Result<CheckedTensor> CheckStoredTensor(const Checkpoint& checkpoint, const ModelConfig& config,
                                        const TensorSpec& spec) {
  const std::string& name = spec.name;
  CheckedTensor stored;
  stored.info = checkpoint.Find(name);
  if (stored.info == nullptr) return NotFound("tensor '", name, "' is missing from the checkpoint");
  const TensorInfo& info = *stored.info;
  if (info.shape != spec.shape) {
    return InvalidArgument("tensor '", name, "' has shape ", info.ShapeString(), "; expected ", ShapeString(spec.shape),
                           " from config.json");
  }
  const std::string scale_name = name + "_scale_inv";
  const TensorInfo* scale = checkpoint.Find(scale_name);
  if (info.dtype == DType::kF8E4M3) {
    if (spec.storage != TensorStorage::kFp8Block) {
      return InvalidArgument("tensor '", name, "' is F8_E4M3 but the release stores it as a float type");
    }
    if (!config.fp8) {
      return InvalidArgument("tensor '", name, "' is F8_E4M3 but config.json has no fp8 quantization_config");
    }
    if (scale == nullptr) return NotFound("FP8 tensor '", name, "' has no '", scale_name, "'");
    const auto expected = ScaleShape(spec.shape, config.fp8_block_rows, config.fp8_block_cols);
    if (scale->dtype != DType::kF32 || scale->shape != expected) {
      return InvalidArgument("'", scale_name, "' is ", DTypeName(scale->dtype), " ", scale->ShapeString(),
                             "; expected F32 ", ShapeString(expected), " (one scale per ", config.fp8_block_rows, "x",
                             config.fp8_block_cols, " block)");
    }
    stored.scale = scale;
    return stored;
  }
  if (info.dtype != DType::kF32 && info.dtype != DType::kBF16 && info.dtype != DType::kF16) {
    return InvalidArgument("tensor '", name, "' has dtype ", DTypeName(info.dtype), "; expected ",
                           spec.storage == TensorStorage::kFp8Block ? "F8_E4M3 (or BF16/F16/F32)" : "BF16, F16 or F32");
  }
  if (scale != nullptr) {
    return InvalidArgument("tensor '", name, "' is ", DTypeName(info.dtype), " but has a '", scale_name,
                           "'; expected F8_E4M3 with block scales, or no scales");
  }
  return stored;
}

Status CheckNoUnknownTensors(const Checkpoint& checkpoint, const ModelConfig& config, const std::set<std::string>& used,
                             bool skip_mtp) {
  const std::string mtp_prefix = LayerPrefix(config.MtpLayerIndex());
  for (const TensorInfo& info : checkpoint.tensors()) {
    if (used.count(info.name) || IsVisionTensorName(info.name)) continue;
    if (skip_mtp && config.HasMtp() && info.name.starts_with(mtp_prefix)) continue;
    if (info.name.ends_with("_scale_inv") && used.count(info.name.substr(0, info.name.size() - 10))) {
      return InvalidArgument("'", info.name, "' scales a tensor that is not stored as F8_E4M3");
    }
    return InvalidArgument("the checkpoint has tensor '", info.name,
                           "' which GLM-5.3-Flash (as described by config.json) does not have");
  }
  return Status::Ok();
}

namespace {

// Binds tensors by name, tracking which checkpoint tensors were used so leftovers can be reported.
class Binder {
 public:
  Binder(const Checkpoint& checkpoint, const ModelConfig& config, const std::map<std::string, TensorRegion>& regions)
      : checkpoint_(checkpoint), config_(config), regions_(regions) {
    for (const TensorSpec& spec : ExpectedTensors(config)) specs_.emplace(spec.name, spec);
  }

  // The part of `name` to read: a tensor-parallel slice, or all of it.
  TensorRegion RegionOf(const std::string& name) const {
    const auto it = regions_.find(name);
    return it == regions_.end() ? TensorRegion{} : it->second;
  }

  Result<std::vector<float>> Tensor(const std::string& name) {
    auto spec_it = specs_.find(name);
    if (spec_it == specs_.end()) return InternalError("no schema entry for '", name, "'");
    GLINT_ASSIGN_OR_RETURN(const CheckedTensor stored, CheckStoredTensor(checkpoint_, config_, spec_it->second));
    used_.insert(name);
    const TensorRegion region = RegionOf(name);
    if (stored.scale == nullptr) {
      GLINT_ASSIGN_OR_RETURN(std::vector<float> values,
                             DecodeRegionToFloat(checkpoint_.ViewOf(*stored.info), nullptr, 0, 0, region));
      GLINT_RETURN_IF_ERROR(CheckFinite(name, values));
      return values;
    }
    used_.insert(stored.scale->name);
    const TensorView scale_view = checkpoint_.ViewOf(*stored.scale);
    GLINT_ASSIGN_OR_RETURN(std::vector<float> values,
                           DecodeRegionToFloat(checkpoint_.ViewOf(*stored.info), &scale_view, config_.fp8_block_rows,
                                               config_.fp8_block_cols, region));
    GLINT_RETURN_IF_ERROR(CheckFinite(name, values));
    return values;
  }

  // A NaN or infinity in a weight poisons every output it reaches; refused at load, with the tensor named,
  // instead of generating garbage without a word.
  static Status CheckFinite(const std::string& name, const std::vector<float>& values) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i])) {
        if (bad == 0) first = i;
        ++bad;
      }
    }
    if (bad == 0) return Status::Ok();
    return InvalidArgument("tensor '", name, "' holds ", bad, " non-finite values (NaN or infinity; the first at ",
                           "flat index ", first, " is ", values[first], "): the checkpoint is corrupt");
  }

  Status Matrix2D(const std::string& name, Matrix& out) {
    GLINT_ASSIGN_OR_RETURN(out.data, Tensor(name));
    const TensorSpec& spec = specs_.at(name);
    int64_t cols = 1;
    for (size_t i = 1; i < spec.shape.size(); ++i) cols *= spec.shape[i];
    const TensorRegion region = RegionOf(name);
    out.rows = (region.row_end < 0 ? spec.shape[0] : region.row_end) - region.row_begin;
    out.cols = (region.col_end < 0 ? cols : region.col_end) - region.col_begin;
    return Status::Ok();
  }
  // A tensor this rank does not hold: checked from the header, its data never read.
  Status Skip(const std::string& name) {
    auto spec_it = specs_.find(name);
    if (spec_it == specs_.end()) return InternalError("no schema entry for '", name, "'");
    GLINT_ASSIGN_OR_RETURN(const CheckedTensor stored, CheckStoredTensor(checkpoint_, config_, spec_it->second));
    used_.insert(name);
    if (stored.scale != nullptr) used_.insert(stored.scale->name);
    return Status::Ok();
  }
  Status Vector(const std::string& name, std::vector<float>& out) {
    GLINT_ASSIGN_OR_RETURN(out, Tensor(name));
    return Status::Ok();
  }

  // Every checkpoint tensor must have been bound, be a known companion, or be deliberately ignored.
  Status CheckNoLeftovers(const LoadOptions& options) const {
    return CheckNoUnknownTensors(checkpoint_, config_, used_, !options.load_mtp);
  }

 private:
  const Checkpoint& checkpoint_;
  const ModelConfig& config_;
  const std::map<std::string, TensorRegion>& regions_;
  std::map<std::string, TensorSpec> specs_;
  std::set<std::string> used_;
};

Status BindMhc(Binder& b, const std::string& p, const char* site, MhcWeights& w) {
  GLINT_RETURN_IF_ERROR(b.Matrix2D(p + site + "fn", w.fn));
  GLINT_RETURN_IF_ERROR(b.Vector(p + site + "base", w.base));
  return b.Vector(p + site + "scale", w.scale);
}

Status BindKda(Binder& b, const std::string& p, KdaWeights& w) {
  const std::string a = p + "self_attn.";
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "q_proj.weight", w.q_proj));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "k_proj.weight", w.k_proj));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "v_proj.weight", w.v_proj));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "o_proj.weight", w.o_proj));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "f_a_proj.weight", w.f_a_proj));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "f_b_proj.weight", w.f_b_proj));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "g_a_proj.weight", w.g_a_proj));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "g_b_proj.weight", w.g_b_proj));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "b_proj.weight", w.b_proj));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "q_conv1d.weight", w.q_conv));  // [width, 1, K] → [width, K]
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "k_conv1d.weight", w.k_conv));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "v_conv1d.weight", w.v_conv));
  GLINT_RETURN_IF_ERROR(b.Vector(a + "A_log", w.a_log));
  GLINT_RETURN_IF_ERROR(b.Vector(a + "dt_bias", w.dt_bias));
  return b.Vector(a + "o_norm.weight", w.o_norm);
}

Status BindDsa(Binder& b, const std::string& p, DsaWeights& w) {
  const std::string a = p + "self_attn.";
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "q_a_proj.weight", w.q_a_proj));
  GLINT_RETURN_IF_ERROR(b.Vector(a + "q_a_layernorm.weight", w.q_a_layernorm));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "q_b_proj.weight", w.q_b_proj));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "kv_a_proj_with_mqa.weight", w.kv_a_proj));
  GLINT_RETURN_IF_ERROR(b.Vector(a + "kv_a_layernorm.weight", w.kv_a_layernorm));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "kv_b_proj.weight", w.kv_b_proj));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(a + "o_proj.weight", w.o_proj));
  const std::string i = a + "indexer.";
  IndexerWeights& x = w.indexer;
  GLINT_RETURN_IF_ERROR(b.Matrix2D(i + "wq_b.weight", x.wq_b));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(i + "wk.weight", x.wk));
  GLINT_RETURN_IF_ERROR(b.Vector(i + "k_norm.weight", x.k_norm_weight));
  GLINT_RETURN_IF_ERROR(b.Vector(i + "k_norm.bias", x.k_norm_bias));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(i + "weights_proj.weight", x.weights_proj));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(i + "index_kpool_compress_gate", x.compress_gate));
  return b.Matrix2D(i + "index_kpool_compress_ape", x.compress_ape);
}

Status BindMlp(Binder& b, const std::string& p, MlpWeights& w) {
  GLINT_RETURN_IF_ERROR(b.Matrix2D(p + "gate_proj.weight", w.gate_proj));
  GLINT_RETURN_IF_ERROR(b.Matrix2D(p + "up_proj.weight", w.up_proj));
  return b.Matrix2D(p + "down_proj.weight", w.down_proj);
}

Status SkipMlp(Binder& b, const std::string& p) {
  for (const char* part : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}) {
    GLINT_RETURN_IF_ERROR(b.Skip(p + part));
  }
  return Status::Ok();
}

// Experts not in `local` are another rank's: checked, not read, left empty.
Status BindMoe(Binder& b, const ModelConfig& c, const std::string& p, const LocalExperts& local, MoeWeights& w) {
  const std::string m = p + "mlp.";
  GLINT_RETURN_IF_ERROR(b.Matrix2D(m + "gate.weight", w.router));
  GLINT_RETURN_IF_ERROR(b.Vector(m + "gate.e_score_correction_bias", w.e_score_correction_bias));
  w.shared.resize(c.n_shared_experts > 0 ? 1 : 0);
  if (!w.shared.empty()) {
    GLINT_RETURN_IF_ERROR(local.shared ? BindMlp(b, m + "shared_experts.", w.shared[0])
                                       : SkipMlp(b, m + "shared_experts."));
  }
  w.experts.resize(c.n_routed_experts);
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    const std::string expert = m + "experts." + std::to_string(e) + ".";
    GLINT_RETURN_IF_ERROR(local.routed.Holds(e) ? BindMlp(b, expert, w.experts[e]) : SkipMlp(b, expert));
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<float>> DecodeToFloat(const TensorView& view, const TensorView* scale, int64_t block_rows,
                                         int64_t block_cols) {
  return DecodeRegionToFloat(view, scale, block_rows, block_cols, {});
}

Result<std::vector<float>> DecodeRegionToFloat(const TensorView& view, const TensorView* scale, int64_t block_rows,
                                               int64_t block_cols, const TensorRegion& region) {
  const std::vector<int64_t>& shape = view.shape();
  const int64_t rows = shape.empty() ? 1 : shape[0];
  const int64_t cols = rows == 0 ? 0 : view.info->NumElements() / rows;
  const int64_t r0 = region.row_begin, r1 = region.row_end < 0 ? rows : region.row_end;
  const int64_t c0 = region.col_begin, c1 = region.col_end < 0 ? cols : region.col_end;
  if (r0 < 0 || r0 > r1 || r1 > rows || c0 < 0 || c0 > c1 || c1 > cols) {
    return InvalidArgument("tensor '", view.info->name, "' [", rows, ", ", cols, "] has no rows [", r0, ", ", r1,
                           ") × columns [", c0, ", ", c1, ")");
  }
  const int64_t width = c1 - c0;
  std::vector<float> out(static_cast<size_t>((r1 - r0) * width));
  const uint8_t* bytes = view.bytes.data();
  // Element (r, c) of the tensor → out[(r − r0) · width + (c − c0)].
  auto each = [&](auto decode) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = c0; c < c1; ++c) out[(r - r0) * width + (c - c0)] = decode(r * cols + c, r, c);
    }
  };
  switch (view.dtype()) {
    case DType::kF32:
      each([&](int64_t i, int64_t, int64_t) {
        float value;
        std::memcpy(&value, bytes + 4 * i, 4);  // safetensors data need not be 4-aligned
        return value;
      });
      break;
    case DType::kBF16:
      each([&](int64_t i, int64_t, int64_t) {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, 2);
        return Bf16ToFloat(bits);
      });
      break;
    case DType::kF16:
      each([&](int64_t i, int64_t, int64_t) {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, 2);
        return Fp16ToFloat(bits);
      });
      break;
    case DType::kF8E4M3: {
      if (scale == nullptr || shape.size() != 2) {
        return InvalidArgument("FP8 tensor '", view.info->name, "' needs 2-D block scales");
      }
      const int64_t scale_cols = scale->shape()[1];
      const float* table = Fp8E4m3Table();
      // Exact in fp32 too: a 4-bit-significand e4m3 value times an fp32 scale needs ≤ 28 bits, but the product is
      // rounded once to fp32 — the same single rounding HF's dequantization performs.
      each([&](int64_t i, int64_t r, int64_t c) {
        float block_scale;
        std::memcpy(&block_scale, scale->bytes.data() + 4 * ((r / block_rows) * scale_cols + c / block_cols), 4);
        return table[bytes[i]] * block_scale;
      });
      break;
    }
    default:
      return InvalidArgument("tensor '", view.info->name, "' has dtype ", DTypeName(view.dtype()),
                             "; expected a float type");
  }
  return out;
}

Result<ModelWeights> LoadModelWeights(const Checkpoint& checkpoint, const ModelConfig& config,
                                      const LoadOptions& options) {
  Binder b(checkpoint, config, options.regions);
  ModelWeights w;
  const std::string top(kLanguageModelPrefix);
  GLINT_RETURN_IF_ERROR(b.Matrix2D(top + "embed_tokens.weight", w.embed_tokens));
  GLINT_RETURN_IF_ERROR(b.Vector(top + "norm.weight", w.final_norm));
  GLINT_RETURN_IF_ERROR(b.Matrix2D("lm_head.weight", w.lm_head));
  w.layers.resize(config.num_hidden_layers);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const std::string p = LayerPrefix(l);
    LayerWeights& layer = w.layers[l];
    layer.attention_kind = config.attention_kinds[l];
    layer.mlp_kind = config.mlp_kinds[l];
    GLINT_RETURN_IF_ERROR(b.Vector(p + "input_layernorm.weight", layer.input_layernorm));
    GLINT_RETURN_IF_ERROR(b.Vector(p + "post_attention_layernorm.weight", layer.post_attention_layernorm));
    GLINT_RETURN_IF_ERROR(BindMhc(b, p, "hc_attn_", layer.hc_attn));
    GLINT_RETURN_IF_ERROR(BindMhc(b, p, "hc_ffn_", layer.hc_ffn));
    if (layer.attention_kind == AttentionKind::kKda) {
      GLINT_RETURN_IF_ERROR(BindKda(b, p, layer.kda));
    } else {
      GLINT_RETURN_IF_ERROR(BindDsa(b, p, layer.dsa));
    }
    if (layer.mlp_kind == MlpKind::kDense) {
      GLINT_RETURN_IF_ERROR(BindMlp(b, p + "mlp.", layer.mlp));
    } else {
      GLINT_RETURN_IF_ERROR(BindMoe(b, config, p, options.experts, layer.moe));
    }
  }
  if (config.HasMtp() && options.load_mtp) {
    const std::string p = LayerPrefix(config.MtpLayerIndex());
    w.mtp = std::make_unique<MtpWeights>();
    MtpWeights& m = *w.mtp;
    GLINT_RETURN_IF_ERROR(b.Matrix2D(p + "eh_proj.weight", m.eh_proj));
    GLINT_RETURN_IF_ERROR(b.Vector(p + "enorm.weight", m.enorm));
    GLINT_RETURN_IF_ERROR(b.Vector(p + "hnorm.weight", m.hnorm));
    GLINT_RETURN_IF_ERROR(b.Vector(p + "input_layernorm.weight", m.input_layernorm));
    GLINT_RETURN_IF_ERROR(b.Vector(p + "post_attention_layernorm.weight", m.post_attention_layernorm));
    GLINT_RETURN_IF_ERROR(b.Vector(p + "shared_head.norm.weight", m.shared_head_norm));
    GLINT_RETURN_IF_ERROR(BindDsa(b, p, m.dsa));
    GLINT_RETURN_IF_ERROR(BindMoe(b, config, p, options.experts, m.moe));
  }
  GLINT_RETURN_IF_ERROR(b.CheckNoLeftovers(options));
  return w;
}

}  // namespace glint
