#include "packed/fast_tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "quant/int4_matrix.h"

namespace glint {
namespace {

using Slices = std::map<std::string, FastSlice>;

IndexRange Range(int64_t begin, int64_t end) { return {begin, end}; }
FastSlice Rows(std::vector<IndexRange> rows) { return {std::move(rows), {0, -1}}; }
FastSlice Columns(int64_t begin, int64_t end) { return {{}, {begin, end}}; }

// KDA heads [h0, h1) of width-W projections (d = head_dim): see the header.
void KdaSlices(const std::string& p, const IndexRange& heads, const ModelConfig& c, Slices& slices) {
  const int64_t d = c.kda_head_dim, width = c.KdaWidth(), b = heads.begin * d, e = heads.end * d;
  slices[p + "qkv"] = Rows({Range(b, e), Range(width + b, width + e), Range(2 * width + b, 2 * width + e)});
  slices[p + "gates_in"] = Rows({Range(0, 2 * d), Range(2 * d + heads.begin, 2 * d + heads.end)});
  for (const char* name : {"f_b", "g_b", "q_conv", "k_conv", "v_conv", "dt_bias"}) slices[p + name] = Rows({{b, e}});
  slices[p + "a_log"] = Rows({heads});
  slices[p + "o_proj"] = Columns(b, e);
}

void MlaSlices(const std::string& p, const IndexRange& heads, const ModelConfig& c, Slices& slices) {
  const int64_t qk = c.qk_head_dim, rank = c.kv_lora_rank, v = c.v_head_dim;
  slices[p + "q_b"] = Rows({Range(heads.begin * qk, heads.end * qk)});
  slices[p + "k_absorb"] = Rows({Range(heads.begin * rank, heads.end * rank)});
  slices[p + "v_up"] = Rows({Range(heads.begin * v, heads.end * v)});
  slices[p + "o_proj"] = Columns(heads.begin * v, heads.end * v);
}

// An MLP of width F by columns [c0, c1): gate_up stacks gate rows [0, F) and up rows [F, 2F).
void MlpSlices(const std::string& p, const IndexRange& columns, int64_t width, Slices& slices) {
  slices[p + "gate_up"] = Rows({columns, Range(width + columns.begin, width + columns.end)});
  slices[p + "down"] = Columns(columns.begin, columns.end);
}

void MoeSlices(const std::string& p, const ShardPlan& plan, const ModelConfig& c, Slices& slices) {
  if (!plan.experts_by_columns) return;
  const TensorSlices& s = plan.slices();
  for (int64_t e = plan.experts().begin; e < std::min(plan.experts().end, c.n_routed_experts); ++e) {
    MlpSlices(p + "experts." + std::to_string(e) + ".", s.expert_columns, c.moe_intermediate_size, slices);
  }
  if (c.n_shared_experts > 0 && plan.holds_shared_expert())
    MlpSlices(p + "shared.", s.shared_columns, c.SharedIntermediate(), slices);
}

// The geometry shared by the packed formats (quant/int8_matrix.h, int4_matrix.h, bf16_matrix.h): rows in blocks
// of 16; a block is `lines` 64-byte lines, each 16 rows × 4 bytes holding `col_step` columns; int8 and int4 have
// one fp32 scale per row and K-group, laid out [block][group][16 rows].
struct Packed {
  int64_t rows = 0, cols = 0;
  int64_t group = 0;     // K-group (0: bf16, no scales)
  int64_t col_step = 0;  // columns per line: int8 4, int4 8, bf16 2
  int64_t pad = 0;       // columns are padded to a multiple of this: the group, or 16 for bf16
  uint8_t zero = 0;      // a zero code's byte

  int64_t row_blocks() const { return (rows + kInt8RowBlock - 1) / kInt8RowBlock; }
  int64_t padded_cols() const { return (cols + pad - 1) / pad * pad; }
  int64_t block_bytes() const { return padded_cols() / col_step * 64; }
  int64_t groups() const { return group > 0 ? padded_cols() / group : 0; }
  uint64_t code_bytes() const { return static_cast<uint64_t>(row_blocks() * block_bytes()); }
  uint64_t scale_bytes() const { return static_cast<uint64_t>(row_blocks() * groups() * kInt8RowBlock) * 4; }
};

Result<Packed> PackedOf(const std::string& name, const StoredTensor& t) {
  const bool quantized = t.kind == "int8" || t.kind == "int4";
  if ((!quantized && t.kind != "bf16") || t.dims.size() != (quantized ? 3u : 2u) ||
      t.blobs.size() != (quantized ? 2u : 1u)) {
    return InvalidArgument("tensor '", name, "' (", t.kind, ") cannot be sliced for tensor parallelism");
  }
  Packed p{t.dims[0],
           t.dims[1],
           quantized ? t.dims[2] : 0,
           t.kind == "int8"   ? 4
           : t.kind == "int4" ? 8
                              : 2,
           quantized ? t.dims[2] : 16,
           static_cast<uint8_t>(t.kind == "int8" ? kInt8CodeBias : 0)};
  if (t.kind == "int4") p.zero = kInt4ZeroByte;
  if (p.group < 0 || p.pad <= 0 || t.blobs[0].size() != p.code_bytes() ||
      (quantized && t.blobs[1].size() != p.scale_bytes())) {
    return InvalidArgument("tensor '", name, "' has blobs of the wrong size for its dims");
  }
  return p;
}

// A tensor in blobs the source owns, and those blobs writable.
struct OwnedTensor {
  StoredTensor tensor;
  std::vector<uint8_t*> blobs;
};

// Owned blobs of these sizes, the first (codes) set to the format's zero, the others (scales) to 0.
OwnedTensor OwnedLike(FastWeightSource& source, const StoredTensor& from, std::vector<int64_t> dims,
                      const std::vector<uint64_t>& bytes, uint8_t zero) {
  OwnedTensor out{{from.kind, std::move(dims), {}}, {}};
  for (size_t i = 0; i < bytes.size(); ++i) {
    AlignedBuffer& buffer = source.Own(AlignedBuffer(std::max<uint64_t>(bytes[i], 1)));
    std::memset(buffer.data(), i == 0 ? zero : 0, bytes[i]);
    out.tensor.blobs.emplace_back(buffer.data(), bytes[i]);
    out.blobs.push_back(buffer.data());
  }
  return out;
}

// Row `from` of `in` to row `to` of `out` (same columns): its 4 bytes in every line and its scale in every group; a
// whole 16-row block at once when both rows start one and 16 rows remain.
int64_t CopyRows(const Packed& p, const StoredTensor& in, int64_t from, int64_t to, int64_t remaining,
                 OwnedTensor& out) {
  uint8_t* codes = out.blobs[0];
  float* scales = p.group > 0 ? reinterpret_cast<float*>(out.blobs[1]) : nullptr;
  const float* in_scales = p.group > 0 ? reinterpret_cast<const float*>(in.blobs[1].data()) : nullptr;
  const int64_t block_bytes = p.block_bytes(), groups = p.groups(), lines = block_bytes / 64;
  if (from % kInt8RowBlock == 0 && to % kInt8RowBlock == 0 && remaining >= kInt8RowBlock) {
    std::memcpy(codes + to / kInt8RowBlock * block_bytes, in.blobs[0].data() + from / kInt8RowBlock * block_bytes,
                block_bytes);
    if (scales != nullptr) {
      std::memcpy(scales + to / kInt8RowBlock * groups * kInt8RowBlock,
                  in_scales + from / kInt8RowBlock * groups * kInt8RowBlock, groups * kInt8RowBlock * 4);
    }
    return kInt8RowBlock;
  }
  const int64_t in_block = from / kInt8RowBlock, in_lane = from % kInt8RowBlock;
  const int64_t out_block = to / kInt8RowBlock, out_lane = to % kInt8RowBlock;
  for (int64_t line = 0; line < lines; ++line) {
    std::memcpy(codes + out_block * block_bytes + line * 64 + out_lane * 4,
                in.blobs[0].data() + in_block * block_bytes + line * 64 + in_lane * 4, 4);
  }
  for (int64_t g = 0; g < groups; ++g) {
    scales[(out_block * groups + g) * kInt8RowBlock + out_lane] =
        in_scales[(in_block * groups + g) * kInt8RowBlock + in_lane];
  }
  return 1;
}

Result<StoredTensor> PackedRows(FastWeightSource& source, const std::string& name, const StoredTensor& t,
                                const std::vector<IndexRange>& ranges) {
  GLINT_ASSIGN_OR_RETURN(const Packed p, PackedOf(name, t));
  Packed local = p;
  local.rows = 0;
  for (const IndexRange& r : ranges) {
    if (r.begin < 0 || r.end > p.rows || r.begin > r.end) {
      return InvalidArgument("tensor '", name, "' has ", p.rows, " rows; its slice needs rows ", r.begin, "–", r.end);
    }
    local.rows += r.count();
  }
  std::vector<int64_t> dims = t.dims;
  dims[0] = local.rows;
  const IndexRange& first = ranges.front();
  if (ranges.size() == 1 && first.begin % kInt8RowBlock == 0 &&
      (first.end % kInt8RowBlock == 0 || first.end == p.rows)) {
    // A view: the rank's row blocks, nothing copied.
    StoredTensor view{
        t.kind, dims, {t.blobs[0].subspan(first.begin / kInt8RowBlock * p.block_bytes(), local.code_bytes())}};
    if (p.group > 0) {
      view.blobs.push_back(
          t.blobs[1].subspan(first.begin / kInt8RowBlock * p.groups() * kInt8RowBlock * 4, local.scale_bytes()));
    }
    return view;
  }
  std::vector<uint64_t> bytes = {local.code_bytes()};
  if (p.group > 0) bytes.push_back(local.scale_bytes());
  OwnedTensor out = OwnedLike(source, t, dims, bytes, p.zero);
  int64_t to = 0;
  for (const IndexRange& r : ranges) {
    for (int64_t from = r.begin; from < r.end;) {
      const int64_t copied = CopyRows(p, t, from, to, r.end - from, out);
      from += copied, to += copied;
    }
  }
  return std::move(out.tensor);
}

// Columns [c0, c1) of every row: per 16-row block, one contiguous run of lines and of group scales.
Result<StoredTensor> PackedColumns(FastWeightSource& source, const std::string& name, const StoredTensor& t,
                                   const IndexRange& columns) {
  GLINT_ASSIGN_OR_RETURN(const Packed p, PackedOf(name, t));
  const int64_t c0 = columns.begin, c1 = columns.end;
  if (c0 < 0 || c1 > p.cols || c0 >= c1 || c0 % p.pad != 0 || (c1 != p.cols && c1 % p.pad != 0)) {
    return InvalidArgument("tensor '", name, "' (", p.cols, " columns in groups of ", p.pad,
                           ") cannot be split at columns ", c0, "–", c1,
                           ": a column slice must start and end on a group boundary");
  }
  Packed local = p;
  local.cols = c1 - c0;
  std::vector<int64_t> dims = t.dims;
  dims[1] = local.cols;
  std::vector<uint64_t> bytes = {local.code_bytes()};
  if (p.group > 0) bytes.push_back(local.scale_bytes());
  OwnedTensor out = OwnedLike(source, t, dims, bytes, p.zero);
  uint8_t* codes = out.blobs[0];
  const int64_t line0 = c0 / p.col_step, group0 = p.group > 0 ? c0 / p.group : 0;
  for (int64_t block = 0; block < p.row_blocks(); ++block) {
    std::memcpy(codes + block * local.block_bytes(), t.blobs[0].data() + block * p.block_bytes() + line0 * 64,
                local.block_bytes());
    if (p.group == 0) continue;
    std::memcpy(out.blobs[1] + block * local.groups() * kInt8RowBlock * 4,
                t.blobs[1].data() + (block * p.groups() + group0) * kInt8RowBlock * 4,
                local.groups() * kInt8RowBlock * 4);
  }
  return std::move(out.tensor);
}

// Rows of an f32 tensor (dims[0] rows of the product of the other dims): a view when one range lands on 64 bytes.
Result<StoredTensor> F32Rows(FastWeightSource& source, const std::string& name, const StoredTensor& t,
                             const std::vector<IndexRange>& ranges) {
  if (t.dims.empty() || t.blobs.size() != 1) return InvalidArgument("tensor '", name, "' cannot be sliced");
  const int64_t rows = t.dims[0];
  const uint64_t row_bytes = rows == 0 ? 0 : t.blobs[0].size() / rows;
  std::vector<int64_t> dims = t.dims;
  dims[0] = 0;
  for (const IndexRange& r : ranges) {
    if (r.begin < 0 || r.end > rows || r.begin > r.end) {
      return InvalidArgument("tensor '", name, "' has ", rows, " rows; its slice needs rows ", r.begin, "–", r.end);
    }
    dims[0] += r.count();
  }
  if (ranges.size() == 1 && ranges[0].begin * row_bytes % 64 == 0) {
    return StoredTensor{t.kind, dims, {t.blobs[0].subspan(ranges[0].begin * row_bytes, dims[0] * row_bytes)}};
  }
  OwnedTensor out = OwnedLike(source, t, dims, {dims[0] * row_bytes}, 0);
  uint8_t* to = out.blobs[0];
  for (const IndexRange& r : ranges) {
    std::memcpy(to, t.blobs[0].data() + r.begin * row_bytes, r.count() * row_bytes);
    to += r.count() * row_bytes;
  }
  return std::move(out.tensor);
}

// A slice copied out of a mapped container leaves the pages it was read from mapped into this process, so the
// rank's RSS would count those bytes twice (the copy and the file pages) — ≈ 2× its shard for the experts, whose
// [gate; up] and down slices are all copies. Drop them right after each copy, so the peak stays one tensor above
// the shard (docs/distributed.md "The fast path"). A view (same bytes) keeps its pages.
Status ReleaseCopiedPages(const FastWeightSource& source, const StoredTensor& from, const StoredTensor& cut) {
  const ContainerFile* container = source.container();
  if (container == nullptr) return Status::Ok();
  for (size_t b = 0; b < from.blobs.size(); ++b) {
    const bool copied = b >= cut.blobs.size() || !container->Holds(cut.blobs[b]);
    if (copied && container->Holds(from.blobs[b])) GLINT_RETURN_IF_ERROR(container->Release(from.blobs[b]));
  }
  return Status::Ok();
}

}  // namespace

std::map<std::string, FastSlice> FastTensorSlices(const ModelConfig& config, const ShardPlan& plan) {
  Slices slices;
  if (!plan.tensor_parallel()) return slices;
  const TensorSlices& s = plan.slices();
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    if (config.attention_kinds[l] == AttentionKind::kKda && plan.kda_split)
      KdaSlices(p + "kda.", s.kda_heads, config, slices);
    if (config.attention_kinds[l] == AttentionKind::kDsa && plan.mla_split)
      MlaSlices(p + "dsa.", s.mla_heads, config, slices);
    if (config.mlp_kinds[l] == MlpKind::kDense && plan.mlp_split) {
      MlpSlices(p + "mlp.", s.mlp_columns, config.intermediate_size, slices);
    }
    if (config.mlp_kinds[l] == MlpKind::kMoe) MoeSlices(p + "moe.", plan, config, slices);
  }
  if (config.HasMtp()) {
    if (plan.mla_split) MlaSlices("mtp.dsa.", s.mla_heads, config, slices);
    MoeSlices("mtp.moe.", plan, config, slices);
  }
  return slices;
}

Status SliceFastSource(FastWeightSource& source, const std::map<std::string, FastSlice>& slices) {
  for (const auto& [name, slice] : slices) {
    const StoredTensor* stored = source.Find(name);
    if (stored == nullptr) continue;  // not in this source (e.g. no MTP layer); binding names what is missing
    const StoredTensor t = *stored;
    Result<StoredTensor> cut = slice.columns.end >= 0 ? PackedColumns(source, name, t, slice.columns)
                               : t.kind == "f32"      ? F32Rows(source, name, t, slice.rows)
                                                      : PackedRows(source, name, t, slice.rows);
    if (!cut.ok()) return cut.status().WithContext("slicing the weights for tensor parallelism");
    GLINT_RETURN_IF_ERROR(ReleaseCopiedPages(source, t, *cut));
    source.Add(name, std::move(cut).value());
  }
  return Status::Ok();
}

int64_t SourceColumnGroup(const FastWeightSource& source) {
  int64_t group = 1;
  for (const auto& [name, t] : source.tensors()) {
    if ((t.kind == "int8" || t.kind == "int4") && t.dims.size() == 3 && t.dims[2] > 0)
      group = std::lcm(group, t.dims[2]);
  }
  return group;
}

int64_t ConvertColumnGroup(int64_t group, int64_t int4_group) {
  return int4_group > 0 ? std::lcm(group, int4_group) : group;
}

}  // namespace glint
