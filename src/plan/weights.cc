#include "plan/weights.h"

#include <cctype>
#include <cmath>
#include <unordered_map>

#include "io/census.h"

namespace glint::plan {
namespace {

constexpr std::string_view kScaleSuffix = "_scale_inv";

bool Contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

void SetFlags(WeightTensor& tensor, const ModelConfig& config) {
  const std::string_view name = tensor.name;
  tensor.routed_expert = Contains(name, ".mlp.experts.");
  tensor.shared_expert = Contains(name, ".mlp.shared_experts.");
  tensor.router = name.ends_with(".mlp.gate.weight") || name.ends_with(".mlp.gate.e_score_correction_bias");
  tensor.mtp = name.starts_with(LayerPrefix(config.MtpLayerIndex())) && config.HasMtp();
  tensor.embed_lookup = name == std::string(kLanguageModelPrefix) + "embed_tokens.weight";
}

DType StoredDType(TensorStorage storage, const ModelConfig& config) {
  switch (storage) {
    case TensorStorage::kFp8Block:
      return config.fp8 ? DType::kF8E4M3 : DType::kBF16;
    case TensorStorage::kBf16:
      return DType::kBF16;
    case TensorStorage::kF32:
      return DType::kF32;
  }
  return DType::kBF16;
}

bool KeptBf16InC(const WeightTensor& tensor) {
  if (tensor.shape.size() < 2 || tensor.router) return true;  // norms, biases, router
  if (!tensor.group) return false;                            // unknown matrices: quantised like the rest
  switch (*tensor.group) {
    case TensorGroup::kEmbedding:
    case TensorGroup::kVision:
    case TensorGroup::kRouterMhcNorms:
      return true;
    default:
      return false;
  }
}

ComputeDType ComputeOf(WeightFormat format) {
  switch (format) {
    case WeightFormat::kFp8Block:
      return ComputeDType::kFp8;
    case WeightFormat::kInt8:
    case WeightFormat::kInt4:
      return ComputeDType::kInt8;  // W8A8 / W4A8 (design.md §4)
    default:
      return ComputeDType::kBf16;
  }
}

}  // namespace

std::string_view SchemeLetter(Scheme scheme) {
  switch (scheme) {
    case Scheme::kRelease:
      return "R";
    case Scheme::kA:
      return "A";
    case Scheme::kB:
      return "B";
    case Scheme::kC:
      return "C";
    case Scheme::kD:
      return "D";
    case Scheme::kE:
      return "E";
  }
  return "?";
}

std::string_view SchemeDescription(Scheme scheme) {
  switch (scheme) {
    case Scheme::kRelease:
      return "as released (FP8 block-128 where stored FP8, rest as stored)";
    case Scheme::kA:
      return "all bf16";
    case Scheme::kB:
      return "MoE int8, rest bf16";
    case Scheme::kC:
      return "all int8 except embeddings, vision, router, mHC, norms (bf16)";
    case Scheme::kD:
      return "MoE int4 with group scales, rest as C";
    case Scheme::kE:
      return "routed experts int4 (W4A8, glint --experts int4), shared experts int8, rest as C";
  }
  return "?";
}

const std::vector<Scheme>& AllSchemes() {
  static const std::vector<Scheme> schemes = {Scheme::kRelease, Scheme::kA, Scheme::kB,
                                              Scheme::kC,       Scheme::kD, Scheme::kE};
  return schemes;
}

Result<Scheme> ParseScheme(std::string_view name) {
  for (Scheme scheme : AllSchemes()) {
    if (name.size() == 1 && std::toupper(static_cast<unsigned char>(name[0])) == SchemeLetter(scheme)[0]) {
      return scheme;
    }
  }
  return InvalidArgument("unknown scheme '", name,
                         "'; expected R (as released), A (all bf16), B (MoE int8), C (int8 except embeddings, vision, "
                         "router, mHC, norms), D (MoE int4, rest as C) or E (routed experts int4, rest as C)");
}

int64_t WeightTensor::Elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

WeightSet WeightsFromConfig(const ModelConfig& config) {
  WeightSet set;
  std::vector<TensorSpec> specs = ExpectedTensors(config);
  for (TensorSpec& spec : VisionTowerTensors(config.vision)) specs.push_back(std::move(spec));
  for (const TensorSpec& spec : specs) {
    WeightTensor tensor;
    tensor.name = spec.name;
    tensor.shape = spec.shape;
    tensor.group = spec.group;
    tensor.stored = StoredDType(spec.storage, config);
    const uint64_t elements = static_cast<uint64_t>(tensor.Elements());
    tensor.stored_bytes = elements * DTypeSize(tensor.stored);
    if (tensor.stored == DType::kF8E4M3) {
      const auto scale = ScaleShape(spec.shape, config.fp8_block_rows, config.fp8_block_cols);
      tensor.stored_bytes += static_cast<uint64_t>(scale[0] * scale[1]) * 4;  // F32 block scales
    }
    SetFlags(tensor, config);
    set.tensors.push_back(std::move(tensor));
  }
  return set;
}

WeightSet WeightsFromCheckpoint(const Checkpoint& checkpoint, const ModelConfig& config) {
  WeightSet set;
  set.from_checkpoint = true;
  std::unordered_map<std::string_view, TensorGroup> groups;
  const std::vector<TensorSpec> specs = ExpectedTensors(config);
  for (const TensorSpec& spec : specs) groups.emplace(spec.name, spec.group);
  std::unordered_map<std::string, size_t> index;
  // Weights first, then fold each `_scale_inv` into its tensor.
  for (const TensorInfo& info : checkpoint.tensors()) {
    if (std::string_view(info.name).ends_with(kScaleSuffix)) continue;
    WeightTensor tensor;
    tensor.name = info.name;
    tensor.shape = info.shape;
    tensor.stored = info.dtype;
    tensor.stored_bytes = info.NumBytes();
    if (auto it = groups.find(info.name); it != groups.end()) {
      tensor.group = it->second;
    } else if (IsVisionTensorName(info.name)) {
      tensor.group = TensorGroup::kVision;
    }
    SetFlags(tensor, config);
    index[tensor.name] = set.tensors.size();
    set.tensors.push_back(std::move(tensor));
  }
  for (const TensorInfo& info : checkpoint.tensors()) {
    const std::string_view name = info.name;
    if (!name.ends_with(kScaleSuffix)) continue;
    auto it = index.find(std::string(name.substr(0, name.size() - kScaleSuffix.size())));
    if (it != index.end()) {
      set.tensors[it->second].stored_bytes += info.NumBytes();
    } else {
      // A scale without its tensor: keep its bytes in the footprint as an unknown tensor.
      WeightTensor orphan;
      orphan.name = info.name;
      orphan.shape = info.shape;
      orphan.stored = info.dtype;
      orphan.stored_bytes = info.NumBytes();
      set.tensors.push_back(std::move(orphan));
    }
  }
  return set;
}

WeightFormat FormatUnder(Scheme scheme, const WeightTensor& tensor) {
  if (tensor.stored == DType::kF32) return WeightFormat::kF32;
  const bool moe = tensor.routed_expert || tensor.shared_expert;
  switch (scheme) {
    case Scheme::kRelease:
      return tensor.stored == DType::kF8E4M3 ? WeightFormat::kFp8Block : WeightFormat::kBf16;
    case Scheme::kA:
      return WeightFormat::kBf16;
    case Scheme::kB:
      return moe ? WeightFormat::kInt8 : WeightFormat::kBf16;
    case Scheme::kC:
      return KeptBf16InC(tensor) ? WeightFormat::kBf16 : WeightFormat::kInt8;
    case Scheme::kD:
      if (moe) return WeightFormat::kInt4;
      return KeptBf16InC(tensor) ? WeightFormat::kBf16 : WeightFormat::kInt8;
    case Scheme::kE:
      if (tensor.routed_expert) return WeightFormat::kInt4;
      if (tensor.shared_expert) return WeightFormat::kInt8;
      return KeptBf16InC(tensor) ? WeightFormat::kBf16 : WeightFormat::kInt8;
  }
  return WeightFormat::kBf16;
}

TensorBytes BytesUnder(WeightFormat format, const WeightTensor& tensor, const Assumptions& assumptions) {
  const double elements = static_cast<double>(tensor.Elements());
  const double k = tensor.shape.empty() ? 1.0 : static_cast<double>(tensor.shape.back());
  const double rows = k > 0 ? elements / k : 0;
  auto groups_per_row = [&](double group_size) { return std::ceil(k / group_size); };
  switch (format) {
    case WeightFormat::kF32:
      return {elements * 4, 0};
    case WeightFormat::kBf16:
      return {elements * 2, 0};
    case WeightFormat::kFp8Block: {
      // As stored: the checkpoint (or config census) already counts payload + F32 block scales.
      const double payload = elements;
      return {payload, static_cast<double>(tensor.stored_bytes) - payload};
    }
    case WeightFormat::kInt8:
      return {elements,
              rows * groups_per_row(assumptions.Get("int8_group_size")) * assumptions.Get("quant_scale_bytes")};
    case WeightFormat::kInt4:
      return {elements / 2, rows * groups_per_row(assumptions.Get("int4_group_size")) *
                                (assumptions.Get("quant_scale_bytes") + assumptions.Get("int4_zero_point_bytes"))};
  }
  return {};
}

SchemeFootprint Footprint(Scheme scheme, const WeightSet& weights, const ModelConfig& config,
                          const Assumptions& assumptions) {
  SchemeFootprint footprint;
  footprint.scheme = scheme;
  const double routed_fraction =
      static_cast<double>(config.num_experts_per_tok) / static_cast<double>(config.n_routed_experts);
  for (const WeightTensor& tensor : weights.tensors) {
    const WeightFormat format = FormatUnder(scheme, tensor);
    const TensorBytes bytes = BytesUnder(format, tensor, assumptions);
    footprint.all.payload += bytes.payload;
    footprint.all.metadata += bytes.metadata;
    if (tensor.group) {
      footprint.group_bytes[static_cast<int>(*tensor.group)] += bytes.Total();
    } else {
      footprint.unknown_bytes += bytes.Total();
    }
    const bool vision = tensor.group == TensorGroup::kVision;
    if (tensor.routed_expert) {
      footprint.routed_bytes += bytes.Total();
      if (!tensor.mtp) footprint.routed_trunk_bytes += bytes.Total();
    } else {
      footprint.other_bytes += bytes.Total();
      if (!tensor.mtp && !vision && !tensor.embed_lookup) footprint.decode_dense_bytes += bytes.Total();
    }
    // Matmul work of one trunk token: 2 FLOPs per weight of every matrix it multiplies.
    if (!tensor.mtp && !vision && !tensor.embed_lookup && tensor.shape.size() >= 2) {
      const double fraction = tensor.routed_expert ? routed_fraction : 1.0;
      footprint.matmul_flops_per_token[ComputeOf(format)] += 2.0 * static_cast<double>(tensor.Elements()) * fraction;
    }
  }
  return footprint;
}

}  // namespace glint::plan
