#include "packed/fast_convert.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>

#include "io/checkpoint_schema.h"
#include "model/weights.h"
#include "quant/formats.h"
#include "quant/requantize.h"

namespace glint {
namespace {

// The checkpoint rules of the fp32 loader (model/weights.h), applied without decoding anything.
Status CheckCheckpoint(const Checkpoint& checkpoint, const ModelConfig& c, bool with_mtp) {
  std::set<std::string> used;
  for (const TensorSpec& spec : ExpectedTensors(c)) {
    if (!with_mtp && c.HasMtp() && spec.layer == c.MtpLayerIndex()) continue;
    GLINT_ASSIGN_OR_RETURN(const CheckedTensor stored, CheckStoredTensor(checkpoint, c, spec));
    used.insert(spec.name);
    if (stored.scale != nullptr) used.insert(stored.scale->name);
  }
  return CheckNoUnknownTensors(checkpoint, c, used, !with_mtp);
}

// A row source over a (validated) checkpoint tensor, rows = shape[0], cols = the product of the rest.
RowSource SourceOf(const Checkpoint& checkpoint, const ModelConfig& c, const std::string& name) {
  const TensorInfo* info = checkpoint.Find(name);
  const TensorView view = checkpoint.ViewOf(*info);
  int64_t cols = 1;
  for (size_t i = 1; i < info->shape.size(); ++i) cols *= info->shape[i];
  const int64_t rows = info->shape.empty() ? 1 : info->shape[0];
  switch (info->dtype) {
    case DType::kF8E4M3: {
      const TensorView scale = checkpoint.ViewOf(*checkpoint.Find(name + "_scale_inv"));
      return Fp8BlockSource(view.bytes.data(), scale.bytes.data(), rows, cols, c.fp8_block_rows, c.fp8_block_cols);
    }
    case DType::kBF16:
      return Bf16Source(view.bytes.data(), rows, cols);
    case DType::kF16:
      return F16Source(view.bytes.data(), rows, cols);
    default:
      return F32Source(view.bytes.data(), rows, cols);
  }
}

// A source over an fp32 matrix computed on first use and shared by the sources made from it (kv_b_proj).
struct SharedMatrix {
  std::function<Status(std::vector<float>&)> compute;
  std::shared_ptr<std::vector<float>> values;
  std::shared_ptr<std::mutex> mutex = std::make_shared<std::mutex>();
  Result<const std::vector<float>*> Get() {
    std::lock_guard<std::mutex> lock(*mutex);
    if (!values) {
      auto computed = std::make_shared<std::vector<float>>();
      GLINT_RETURN_IF_ERROR(compute(*computed));
      values = computed;
    }
    return values.get();
  }
};

// Rows `ranges` of `source`, stacked in order.
RowSource RowsOf(const RowSource& source, const std::vector<IndexRange>& ranges) {
  int64_t rows = 0;
  for (const IndexRange& r : ranges) rows += r.count();
  // Calls `read_run(source row, count, destination row offset)` for the runs covering rows [begin, begin + count).
  auto runs = [ranges](int64_t begin, int64_t count, const std::function<Status(int64_t, int64_t, int64_t)>& read_run) {
    int64_t first = 0;  // local row of the current range's first row
    for (const IndexRange& r : ranges) {
      const int64_t lo = std::max(begin, first), hi = std::min(begin + count, first + r.count());
      if (lo < hi) GLINT_RETURN_IF_ERROR(read_run(r.begin + lo - first, hi - lo, lo - begin));
      first += r.count();
    }
    return Status::Ok();
  };
  RowSource out{rows, source.cols, {}, {}};
  out.read = [source, runs](int64_t begin, int64_t count, float* values) {
    return runs(begin, count,
                [&](int64_t from, int64_t n, int64_t at) { return source.read(from, n, values + at * source.cols); });
  };
  if (source.read_bf16) {
    out.read_bf16 = [source, runs](int64_t begin, int64_t count, uint16_t* values) {
      return runs(begin, count, [&](int64_t from, int64_t n, int64_t at) {
        return source.read_bf16(from, n, values + at * source.cols);
      });
    };
  }
  return out;
}

// Columns [c0, c1) of every row of `source` (whole rows are decoded, then cut).
RowSource ColumnsOf(const RowSource& source, IndexRange columns) {
  RowSource out{source.rows, columns.count(), {}, {}};
  out.read = [source, columns](int64_t begin, int64_t count, float* values) -> Status {
    std::vector<float> rows(count * source.cols);
    GLINT_RETURN_IF_ERROR(source.read(begin, count, rows.data()));
    for (int64_t r = 0; r < count; ++r) {
      std::memcpy(values + r * columns.count(), rows.data() + r * source.cols + columns.begin,
                  columns.count() * sizeof(float));
    }
    return Status::Ok();
  };
  return out;
}

class Planner {
 public:
  Planner(const Checkpoint& checkpoint, const ModelConfig& c, const FastConvertOptions& options)
      : checkpoint_(checkpoint), c_(c), options_(options) {}

  std::vector<PlannedTensor> plan;

  // The rank's slice of fast tensor `name` (options.slices), or all of `source`.
  RowSource Cut(const std::string& name, RowSource source) const {
    const auto slice = options_.slices.find(name);
    if (slice == options_.slices.end()) return source;
    if (slice->second.columns.end >= 0) return ColumnsOf(source, slice->second.columns);
    return RowsOf(source, slice->second.rows);
  }

  void Int8(const std::string& name, RowSource whole) {
    const RowSource source = Cut(name, std::move(whole));
    Quantized(name, "int8", Int8Layout{source.rows, source.cols, options_.group}, static_cast<uint8_t>(kInt8CodeBias),
              source, QuantizeInt8Block);
  }

  void Int4(const std::string& name, RowSource whole) {
    const RowSource source = Cut(name, std::move(whole));
    Quantized(name, "int4", Int4Layout{source.rows, source.cols, options_.int4_group}, kInt4ZeroByte, source,
              QuantizeInt4Block);
  }

  // A quantised matrix (int8 or int4 codes + fp32 scales per row and group): codes start as the format's zero, then
  // every band of kInt8RowBlock rows is read from `source` and quantised by `quantize`, in parallel.
  template <typename Layout, typename QuantizeBlock>
  void Quantized(const std::string& name, const char* kind, Layout layout, uint8_t zero_byte, const RowSource& source,
                 QuantizeBlock quantize) {
    PlannedTensor t{name,
                    kind,
                    {layout.rows, layout.cols, layout.group},
                    {static_cast<uint64_t>(layout.code_bytes()), static_cast<uint64_t>(layout.scale_count()) * 4},
                    {}};
    t.fill = [layout, source, zero_byte, quantize](std::vector<std::span<uint8_t>>& blobs, WorkerPool& pool) -> Status {
      uint8_t* codes = blobs[0].data();
      float* scales = reinterpret_cast<float*>(blobs[1].data());
      std::fill_n(codes, blobs[0].size(), zero_byte);
      std::vector<Status> errors(pool.size());
      std::vector<std::vector<float>> rows(pool.size(), std::vector<float>(kInt8RowBlock * layout.cols));
      pool.ParallelFor(layout.row_blocks(), 16, [&](int64_t begin, int64_t end, int worker) {
        for (int64_t block = begin; block < end && errors[worker].ok(); ++block) {
          const int64_t first = block * kInt8RowBlock, n = std::min(kInt8RowBlock, layout.rows - first);
          Status status = source.read(first, n, rows[worker].data());
          if (status.ok()) status = quantize(rows[worker].data(), n, block, layout, codes, scales);
          if (!status.ok()) errors[worker] = status;
        }
      });
      for (const Status& error : errors) GLINT_RETURN_IF_ERROR(error);
      return Status::Ok();
    };
    plan.push_back(std::move(t));
  }

  // A routed expert's matrix in the requested expert format.
  void Expert(const std::string& name, const std::vector<std::string>& parts) {
    if (options_.experts == ExpertWeights::kInt8) return Int8(name, parts);
    std::vector<RowSource> sources;
    sources.reserve(sources.size() + parts.size());
    for (const std::string& part : parts) sources.push_back(SourceOf(checkpoint_, c_, part));
    Int4(name, ConcatRows(std::move(sources)).value());
  }

  void Int8(const std::string& name, const std::vector<std::string>& parts) {
    std::vector<RowSource> sources;
    sources.reserve(sources.size() + parts.size());
    for (const std::string& part : parts) sources.push_back(SourceOf(checkpoint_, c_, part));
    Int8(name, ConcatRows(std::move(sources)).value());  // parts share cols by the validated schema
  }

  void Bf16(const std::string& name, const std::vector<std::string>& parts) {
    std::vector<RowSource> sources;
    sources.reserve(sources.size() + parts.size());
    for (const std::string& part : parts) sources.push_back(SourceOf(checkpoint_, c_, part));
    const RowSource source = Cut(name, ConcatRows(std::move(sources)).value());
    const Bf16Layout layout{source.rows, source.cols};
    PlannedTensor t{name, "bf16", {layout.rows, layout.cols}, {static_cast<uint64_t>(layout.value_count()) * 2}, {}};
    t.fill = [layout, source](std::vector<std::span<uint8_t>>& blobs, WorkerPool&) -> Status {
      return PackBf16Into(source, layout, reinterpret_cast<uint16_t*>(blobs[0].data()));
    };
    plan.push_back(std::move(t));
  }

  void F32(const std::string& name, const std::string& tensor, std::vector<int64_t> dims) {
    const RowSource source = Cut(name, SourceOf(checkpoint_, c_, tensor));
    if (options_.slices.count(name) != 0) dims[0] = source.rows;  // a tensor-parallel row slice
    PlannedTensor t{name, "f32", dims, {static_cast<uint64_t>(source.rows * source.cols) * 4}, {}};
    t.fill = [source](std::vector<std::span<uint8_t>>& blobs, WorkerPool&) -> Status {
      return source.read(0, source.rows, reinterpret_cast<float*>(blobs[0].data()));
    };
    plan.push_back(std::move(t));
  }

  void Embedding(const std::string& name, const std::string& tensor) {
    const RowSource source = SourceOf(checkpoint_, c_, tensor);
    const bool bf16 = checkpoint_.Find(tensor)->dtype == DType::kBF16;
    PlannedTensor t{name,
                    bf16 ? "rows_bf16" : "rows_f32",
                    {source.rows, source.cols},
                    {static_cast<uint64_t>(source.rows * source.cols) * (bf16 ? 2 : 4)},
                    {}};
    t.fill = [source, bf16](std::vector<std::span<uint8_t>>& blobs, WorkerPool&) -> Status {
      if (bf16) return source.read_bf16(0, source.rows, reinterpret_cast<uint16_t*>(blobs[0].data()));
      return source.read(0, source.rows, reinterpret_cast<float*>(blobs[0].data()));
    };
    plan.push_back(std::move(t));
  }

  void Mhc(const std::string& p, const std::string& src, const char* site) {
    const int64_t mix = (2 + c_.hc_mult) * c_.hc_mult;
    F32(p + "fn", src + site + "fn", {mix, c_.hc_mult * c_.hidden_size});
    F32(p + "base", src + site + "base", {mix});
    F32(p + "scale", src + site + "scale", {3});
  }

  void Kda(const std::string& p, const std::string& src) {
    const std::string a = src + "self_attn.";
    const int64_t width = c_.KdaWidth(), d = c_.kda_head_dim;
    Int8(p + "qkv", {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"});
    Bf16(p + "gates_in", {a + "f_a_proj.weight", a + "g_a_proj.weight", a + "b_proj.weight"});
    Bf16(p + "f_b", {a + "f_b_proj.weight"});
    Bf16(p + "g_b", {a + "g_b_proj.weight"});
    Int8(p + "o_proj", {a + "o_proj.weight"});
    F32(p + "q_conv", a + "q_conv1d.weight", {width, c_.kda_conv_kernel});
    F32(p + "k_conv", a + "k_conv1d.weight", {width, c_.kda_conv_kernel});
    F32(p + "v_conv", a + "v_conv1d.weight", {width, c_.kda_conv_kernel});
    F32(p + "a_log", a + "A_log", {c_.kda_num_heads});
    F32(p + "dt_bias", a + "dt_bias", {width});
    F32(p + "o_norm", a + "o_norm.weight", {d});
  }

  void Dsa(const std::string& p, const std::string& src) {
    const std::string a = src + "self_attn.", i = a + "indexer.";
    const int64_t heads = c_.num_attention_heads, qk = c_.qk_head_dim, v = c_.v_head_dim, rank = c_.kv_lora_rank;
    Int8(p + "qa_kva", {a + "q_a_proj.weight", a + "kv_a_proj_with_mqa.weight"});
    F32(p + "q_a_norm", a + "q_a_layernorm.weight", {c_.q_lora_rank});
    F32(p + "kv_a_norm", a + "kv_a_layernorm.weight", {rank});
    Int8(p + "q_b", {a + "q_b_proj.weight"});
    // kv_b_proj [heads·(qk + v), rank]: head h's rows are Wk_h [qk, rank] then Wv_h [v, rank].
    SharedMatrix kv_b;
    const RowSource kv_b_source = SourceOf(checkpoint_, c_, a + "kv_b_proj.weight");
    kv_b.compute = [kv_b_source](std::vector<float>& out) {
      out.resize(kv_b_source.rows * kv_b_source.cols);
      return kv_b_source.read(0, kv_b_source.rows, out.data());
    };
    RowSource k_absorb{heads * rank, qk, {}, {}};
    k_absorb.read = [kv_b, qk, v, rank](int64_t begin, int64_t count, float* out) mutable -> Status {
      GLINT_ASSIGN_OR_RETURN(const std::vector<float>* w, kv_b.Get());
      for (int64_t row = begin; row < begin + count; ++row) {  // row h·rank + r of stack_h Wk_hᵀ
        const int64_t h = row / rank, r = row % rank;
        for (int64_t col = 0; col < qk; ++col) out[(row - begin) * qk + col] = (*w)[(h * (qk + v) + col) * rank + r];
      }
      return Status::Ok();
    };
    RowSource v_up{heads * v, rank, {}, {}};
    v_up.read = [kv_b, qk, v, rank](int64_t begin, int64_t count, float* out) mutable -> Status {
      GLINT_ASSIGN_OR_RETURN(const std::vector<float>* w, kv_b.Get());
      for (int64_t row = begin; row < begin + count; ++row) {  // row h·v + j of stack_h Wv_h
        const int64_t h = row / v, j = row % v;
        std::memcpy(out + (row - begin) * rank, w->data() + (h * (qk + v) + qk + j) * rank, rank * sizeof(float));
      }
      return Status::Ok();
    };
    Int8(p + "k_absorb", k_absorb);
    Int8(p + "v_up", v_up);
    Int8(p + "o_proj", {a + "o_proj.weight"});
    Bf16(p + "index_in", {i + "wk.weight", i + "index_kpool_compress_gate", i + "weights_proj.weight"});
    Bf16(p + "index_q", {i + "wq_b.weight"});
    F32(p + "k_norm_weight", i + "k_norm.weight", {c_.index_head_dim});
    F32(p + "k_norm_bias", i + "k_norm.bias", {c_.index_head_dim});
    F32(p + "ape", i + "index_kpool_compress_ape", {c_.index_kpool, c_.index_head_dim});
  }

  void Mlp(const std::string& p, const std::string& src) {
    Int8(p + "gate_up", {src + "gate_proj.weight", src + "up_proj.weight"});
    Int8(p + "down", {src + "down_proj.weight"});
  }

  void Moe(const std::string& p, const std::string& src) {
    const std::string m = src + "mlp.";
    Bf16(p + "router", {m + "gate.weight"});
    F32(p + "bias", m + "gate.e_score_correction_bias", {c_.n_routed_experts});
    for (int64_t e = 0; e < c_.n_routed_experts; ++e) {
      if (!options_.local.routed.Holds(e)) continue;  // another rank's (CheckCheckpoint validated it)
      const std::string dst = p + "experts." + std::to_string(e) + ".", src = m + "experts." + std::to_string(e) + ".";
      Expert(dst + "gate_up", {src + "gate_proj.weight", src + "up_proj.weight"});
      Expert(dst + "down", {src + "down_proj.weight"});
      const std::string extent = ExpertExtentName(p, e);
      plan[plan.size() - 2].extent = extent;
      plan[plan.size() - 1].extent = extent;
    }
    if (c_.n_shared_experts > 0 && options_.local.shared) Mlp(p + "shared.", m + "shared_experts.");
  }

 private:
  const Checkpoint& checkpoint_;
  const ModelConfig& c_;
  FastConvertOptions options_;
};

}  // namespace

std::string ExpertExtentName(const std::string& moe_prefix, int64_t expert) {
  return moe_prefix + "experts." + std::to_string(expert);
}

Result<std::vector<PlannedTensor>> PlanFastWeights(const Checkpoint& checkpoint, const ModelConfig& c,
                                                   const FastConvertOptions& options) {
  GLINT_RETURN_IF_ERROR(ValidateInt8Layout({1, 1, options.group}).WithContext("--group"));
  if (options.experts == ExpertWeights::kInt4) {
    GLINT_RETURN_IF_ERROR(ValidateInt4Layout({1, 1, options.int4_group}).WithContext("--int4-group"));
  }
  GLINT_RETURN_IF_ERROR(CheckCheckpoint(checkpoint, c, options.with_mtp));
  // Absorbed MLA splits kv_b_proj per head into 16-row blocks; the stacked matrices need whole blocks per head.
  if (c.kv_lora_rank % kInt8RowBlock != 0 || c.v_head_dim % kInt8RowBlock != 0) {
    return Unimplemented("the fast path needs kv_lora_rank and v_head_dim to be multiples of 16 (got ", c.kv_lora_rank,
                         " and ", c.v_head_dim, ")");
  }
  Planner p(checkpoint, c, options);
  const std::string top = std::string(kLanguageModelPrefix);
  p.Embedding("embed", top + "embed_tokens.weight");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string dst = "layers." + std::to_string(l) + ".", src = LayerPrefix(l);
    p.F32(dst + "attn_norm", src + "input_layernorm.weight", {c.hidden_size});
    p.F32(dst + "ffn_norm", src + "post_attention_layernorm.weight", {c.hidden_size});
    p.Mhc(dst + "hc_attn.", src, "hc_attn_");
    p.Mhc(dst + "hc_ffn.", src, "hc_ffn_");
    if (c.attention_kinds[l] == AttentionKind::kKda) {
      p.Kda(dst + "kda.", src);
    } else {
      p.Dsa(dst + "dsa.", src);
    }
    if (c.mlp_kinds[l] == MlpKind::kDense) {
      p.Mlp(dst + "mlp.", src + "mlp.");
    } else {
      p.Moe(dst + "moe.", src);
    }
  }
  if (options.with_mtp && c.HasMtp()) {
    const std::string src = LayerPrefix(c.MtpLayerIndex());
    p.Int8("mtp.eh_proj", {src + "eh_proj.weight"});
    p.F32("mtp.enorm", src + "enorm.weight", {c.hidden_size});
    p.F32("mtp.hnorm", src + "hnorm.weight", {c.hidden_size});
    p.F32("mtp.attn_norm", src + "input_layernorm.weight", {c.hidden_size});
    p.F32("mtp.ffn_norm", src + "post_attention_layernorm.weight", {c.hidden_size});
    p.F32("mtp.head_norm", src + "shared_head.norm.weight", {c.hidden_size});
    p.Dsa("mtp.dsa.", src);
    p.Moe("mtp.moe.", src);
  }
  p.F32("final_norm", top + "norm.weight", {c.hidden_size});
  if (options.lm_head) p.Int8("lm_head", {"lm_head.weight"});
  return std::move(p.plan);
}

Status MaterializeFastWeights(const std::vector<PlannedTensor>& plan, WorkerPool& pool, FastWeightSource& out,
                              const ConvertProgressFn& progress) {
  ConvertProgress report;
  for (const PlannedTensor& t : plan) {
    for (uint64_t bytes : t.blob_bytes) report.total_bytes += bytes;
  }
  for (const PlannedTensor& t : plan) {
    StoredTensor stored{t.kind, t.dims, {}};
    std::vector<std::span<uint8_t>> blobs;
    for (uint64_t bytes : t.blob_bytes) {
      AlignedBuffer& buffer = out.Own(AlignedBuffer(bytes));
      blobs.emplace_back(buffer.data(), bytes);
      stored.blobs.emplace_back(buffer.data(), bytes);
      report.done_bytes += bytes;
    }
    GLINT_RETURN_IF_ERROR(t.fill(blobs, pool).WithContext(StrCat("converting '", t.name, "'")));
    out.Add(t.name, std::move(stored));
    report.tensor = t.name;
    if (progress) progress(report);
  }
  return Status::Ok();
}

Status WriteFastContainer(const std::vector<PlannedTensor>& plan, WorkerPool& pool, const std::string& path,
                          std::map<std::string, std::string> metadata, const ConvertProgressFn& progress) {
  std::vector<ContainerEntrySpec> specs;
  ConvertProgress report;
  for (const PlannedTensor& t : plan) {
    specs.push_back({t.name, t.kind, t.dims, t.blob_bytes, t.extent});
    for (uint64_t bytes : t.blob_bytes) report.total_bytes += bytes;
  }
  GLINT_ASSIGN_OR_RETURN(auto writer, ContainerWriter::Create(path, std::move(specs), std::move(metadata)));
  for (const PlannedTensor& t : plan) {
    std::vector<AlignedBuffer> buffers;
    std::vector<std::span<uint8_t>> blobs;
    for (uint64_t bytes : t.blob_bytes) {
      buffers.emplace_back(bytes);
      blobs.emplace_back(buffers.back().data(), bytes);
    }
    GLINT_RETURN_IF_ERROR(t.fill(blobs, pool).WithContext(StrCat("converting '", t.name, "'")));
    for (const auto& blob : blobs) {
      GLINT_RETURN_IF_ERROR(writer->WriteNextBlob(blob));
      report.done_bytes += blob.size();
    }
    report.tensor = t.name;
    if (progress) progress(report);
  }
  return writer->Finish();
}

Result<FastWeightSource> SourceFromContainer(std::unique_ptr<ContainerFile> container) {
  FastWeightSource source;
  for (const ContainerEntry& entry : container->entries())
    source.Add(entry.name, {entry.kind, entry.dims, entry.blobs});
  source.SetContainer(std::move(container));
  return source;
}

}  // namespace glint
