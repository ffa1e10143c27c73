// The fast tower's packed weights as container entries (docs/vision.md "In a container"): what `glint convert`
// writes and what a container load views in place.
//
// Names, all under "vision.": patch_embed, blocks.{i}.{qkv,proj,gate,up,down}, downsample, merger.{proj,gate,up,
// down} are linear layers of kind "bf16" (dims [rows, cols], blob: Bf16Layout values) or "int8" (dims [rows, cols,
// group], blobs: codes, scales), each with "<name>.bias" (kind "f32", [rows]) when the layer has a bias;
// blocks.{i}.{norm1,norm2,q_norm,k_norm}, post_layernorm, merger.norm_weight, merger.norm_bias are "f32" vectors.
// The downsample is stored with its columns already in the fast tower's (position in merge block, channel) order,
// so the stored matrices are exactly the ones FastVisionTower::Create packs and a container load is bit-identical.
#include <cstring>

#include "vision/tower_fast.h"

namespace glint {

template <typename Tower, typename LinearFn, typename VectorFn>
void FastVisionTower::VisitTensors(Tower& t, LinearFn linear, VectorFn vector) {
  const VisionConfig& c = t.config_;
  const int64_t h = c.hidden_size, i = c.intermediate_size, o = c.out_hidden_size;
  const int64_t pi = c.projection_intermediate_size, d = c.HeadDim();
  const bool bias = c.attention_bias;
  linear("vision.patch_embed", t.patch_embed_, h, c.PatchValues(), true);
  for (size_t b = 0; b < t.blocks_.size(); ++b) {
    auto& block = t.blocks_[b];
    const std::string p = "vision.blocks." + std::to_string(b) + ".";
    vector(p + "norm1", block.norm1, h);
    vector(p + "norm2", block.norm2, h);
    vector(p + "q_norm", block.q_norm, d);
    vector(p + "k_norm", block.k_norm, d);
    linear(p + "qkv", block.qkv, 3 * h, h, bias);
    linear(p + "proj", block.proj, h, h, bias);
    linear(p + "gate", block.gate, i, h, bias);
    linear(p + "up", block.up, i, h, bias);
    linear(p + "down", block.down, h, i, bias);
  }
  vector("vision.post_layernorm", t.post_layernorm_, h);
  linear("vision.downsample", t.downsample_, o, h * c.MergeArea(), true);
  linear("vision.merger.proj", t.merger_proj_, o, o, false);
  vector("vision.merger.norm_weight", t.merger_norm_weight_, o);
  vector("vision.merger.norm_bias", t.merger_norm_bias_, o);
  linear("vision.merger.gate", t.merger_gate_, pi, o, false);
  linear("vision.merger.up", t.merger_up_, pi, o, false);
  linear("vision.merger.down", t.merger_down_, o, pi, false);
}

namespace {

std::span<const uint8_t> BytesOf(const void* data, uint64_t bytes) {
  return {static_cast<const uint8_t*>(data), static_cast<size_t>(bytes)};
}

ContainerEntry F32Entry(const std::string& name, const std::vector<float>& values) {
  return {name, "f32", {static_cast<int64_t>(values.size())}, {BytesOf(values.data(), 4 * values.size())}};
}

std::string DimsText(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

// A stored entry of `kind` with `dims` and blobs of exactly `bytes`; errors name the entry and the fix.
Result<const ContainerEntry*> FindChecked(const std::function<const ContainerEntry*(const std::string&)>& find,
                                          const std::string& name, const std::string& kind,
                                          const std::vector<int64_t>& dims, const std::vector<uint64_t>& bytes) {
  const ContainerEntry* e = find(name);
  if (e == nullptr) {
    return InvalidArgument("container entry '", name, "' of the vision tower is missing; re-run `glint convert`");
  }
  bool sizes_match = e->blobs.size() == bytes.size();
  for (size_t b = 0; sizes_match && b < bytes.size(); ++b) sizes_match = e->blobs[b].size() == bytes[b];
  if (e->kind != kind || e->dims != dims || !sizes_match) {
    return InvalidArgument("container entry '", name, "' is '", e->kind, "' ", DimsText(e->dims), " with ",
                           e->blobs.size(), " blobs; the vision_config implies '", kind, "' ", DimsText(dims),
                           " (was the container converted from another model?)");
  }
  return e;
}

}  // namespace

std::vector<ContainerEntry> FastVisionTower::StoredTensors() const {
  std::vector<ContainerEntry> entries;
  const bool int8 = options_.format == VisionWeightFormat::kInt8;
  auto linear = [&](const std::string& name, const PackedLinear& l, int64_t, int64_t, bool has_bias) {
    if (int8) {
      const Int8Layout& layout = l.int8_view.layout;
      entries.push_back({name,
                         "int8",
                         {layout.rows, layout.cols, layout.group},
                         {BytesOf(l.int8_view.codes, layout.code_bytes()),
                          BytesOf(l.int8_view.scales, 4 * static_cast<uint64_t>(layout.scale_count()))}});
    } else {
      const Bf16Layout& layout = l.bf16_view.layout;
      entries.push_back({name,
                         "bf16",
                         {layout.rows, layout.cols},
                         {BytesOf(l.bf16_view.values, 2 * static_cast<uint64_t>(layout.value_count()))}});
    }
    if (has_bias) entries.push_back(F32Entry(name + ".bias", l.bias));
  };
  auto vector = [&](const std::string& name, const std::vector<float>& values, int64_t) {
    entries.push_back(F32Entry(name, values));
  };
  VisitTensors(*this, linear, vector);
  return entries;
}

Result<FastVisionTower> FastVisionTower::FromStored(
    const VisionConfig& config, const FastVisionOptions& options,
    const std::function<const ContainerEntry*(const std::string&)>& find, std::shared_ptr<const void> storage) {
  if (!IsaSupported(options.isa))
    return InvalidArgument("kernel level ", IsaName(options.isa), " is not supported here");
  const ContainerEntry* first = find("vision.patch_embed");
  if (first == nullptr) {
    return InvalidArgument(
        "the container holds no vision tower (no entry 'vision.patch_embed'); re-run `glint "
        "convert` on a checkpoint with model.visual.* tensors");
  }
  FastVisionTower t;
  t.config_ = config;
  t.options_ = options;
  t.options_.format = first->kind == "int8" ? VisionWeightFormat::kInt8 : VisionWeightFormat::kBf16;
  t.bf16_ = &GetBf16Kernels(options.isa);
  t.int8_ = &GetInt8Kernels(options.isa);
  t.blocks_.resize(static_cast<size_t>(config.depth));
  t.storage_ = std::move(storage);
  Status status = Status::Ok();
  auto vector = [&](const std::string& name, std::vector<float>& values, int64_t size) {
    if (!status.ok()) return;
    Result<const ContainerEntry*> e = FindChecked(find, name, "f32", {size}, {4 * static_cast<uint64_t>(size)});
    if (!e.ok()) {
      status = e.status();
      return;
    }
    values.resize(static_cast<size_t>(size));
    std::memcpy(values.data(), (*e)->blobs[0].data(), 4 * values.size());
  };
  auto linear = [&](const std::string& name, PackedLinear& l, int64_t rows, int64_t cols, bool has_bias) {
    if (!status.ok()) return;
    l.rows = rows;
    l.cols = cols;
    if (t.options_.format == VisionWeightFormat::kInt8) {
      const ContainerEntry* raw = find(name);
      const Int8Layout layout{rows, cols, raw != nullptr && raw->dims.size() == 3 ? raw->dims[2] : 0};
      status = ValidateInt8Layout(layout).WithContext(StrCat("container entry '", name, "'"));
      if (!status.ok()) return;
      Result<const ContainerEntry*> e =
          FindChecked(find, name, "int8", {rows, cols, layout.group},
                      {static_cast<uint64_t>(layout.code_bytes()), 4 * static_cast<uint64_t>(layout.scale_count())});
      if (!e.ok()) {
        status = e.status();
        return;
      }
      l.int8_view = {layout, (*e)->blobs[0].data(), reinterpret_cast<const float*>((*e)->blobs[1].data())};
    } else {
      const Bf16Layout layout{rows, cols};
      Result<const ContainerEntry*> e =
          FindChecked(find, name, "bf16", {rows, cols}, {2 * static_cast<uint64_t>(layout.value_count())});
      if (!e.ok()) {
        status = e.status();
        return;
      }
      l.bf16_view = {layout, reinterpret_cast<const uint16_t*>((*e)->blobs[0].data())};
    }
    if (has_bias) vector(name + ".bias", l.bias, rows);
  };
  VisitTensors(t, linear, vector);
  GLINT_RETURN_IF_ERROR(status);
  return t;
}

}  // namespace glint
