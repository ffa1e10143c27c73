#include "plan/census_tables.h"

#include <cctype>
#include <set>

namespace glint::plan {
namespace {

std::string DTypeColumnId(DType dtype) {
  std::string id(DTypeName(dtype));
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return id + "_bytes";
}

std::set<DType> WeightDTypes(const Census& census) {
  std::set<DType> dtypes;
  auto collect = [&](const GroupCensus& group) {
    for (const auto& [dtype, bytes] : group.weight_bytes_by_dtype) dtypes.insert(dtype);
  };
  for (const GroupCensus& group : census.groups) collect(group);
  collect(census.unknown);
  return dtypes;
}

}  // namespace

Table GroupTable(const Census& census) {
  Table table;
  table.id = "parameters";
  table.title = census.source == CensusSource::kCheckpoint ? "Parameters and bytes by group (safetensors headers)"
                                                           : "Parameters and bytes by group (from config.json)";
  const std::set<DType> dtypes = WeightDTypes(census);
  table.columns = {{"group", "group", false}, {"tensors", "tensors"}, {"params", "params"}, {"share", "share"}};
  for (DType dtype : dtypes) table.columns.push_back({DTypeColumnId(dtype), std::string(DTypeName(dtype))});
  table.columns.push_back({"scale_bytes", "block scales"});
  table.columns.push_back({"bytes", "bytes"});
  const double total_params = static_cast<double>(census.TotalParams());

  auto add_row = [&](const std::string& label, const GroupCensus& group) {
    std::vector<Cell> row = {label, IntegerCell(group.weight_tensors + group.scale_tensors), IntegerCell(group.params),
                             PercentCell(total_params > 0 ? static_cast<double>(group.params) / total_params : 0)};
    for (DType dtype : dtypes) {
      auto it = group.weight_bytes_by_dtype.find(dtype);
      row.push_back(BytesCell(it == group.weight_bytes_by_dtype.end() ? 0.0 : static_cast<double>(it->second)));
    }
    row.push_back(BytesCell(static_cast<double>(group.scale_bytes)));
    row.push_back(BytesCell(static_cast<double>(group.TotalBytes())));
    table.AddRow(std::move(row));
  };

  GroupCensus total;
  auto accumulate = [&](const GroupCensus& group) {
    total.weight_tensors += group.weight_tensors;
    total.scale_tensors += group.scale_tensors;
    total.params += group.params;
    total.weight_bytes += group.weight_bytes;
    total.scale_bytes += group.scale_bytes;
    for (const auto& [dtype, bytes] : group.weight_bytes_by_dtype) total.weight_bytes_by_dtype[dtype] += bytes;
  };
  for (int g = 0; g < kNumTensorGroups; ++g) {
    add_row(std::string(TensorGroupName(static_cast<TensorGroup>(g))), census.groups[g]);
    accumulate(census.groups[g]);
  }
  if (census.unknown.weight_tensors > 0) {
    add_row("unknown", census.unknown);
    accumulate(census.unknown);
  }
  add_row("total", total);
  if (census.vision_estimated) {
    table.notes.push_back(
        "vision: estimated from vision_config (GLM-OCR ViT layout, BF16); exact only from a checkpoint");
  }
  table.notes.push_back(
      "params count weights only; FP8 block scales (F32 `_scale_inv`) are in 'block scales' and bytes");
  table.notes.push_back("bytes in decimal units (1 GB = 10^9 bytes)");
  return table;
}

Table DTypeTable(const Census& census) {
  Table table;
  table.id = "dtypes";
  table.title = "Bytes by dtype";
  table.columns = {{"dtype", "dtype", false}, {"tensors", "tensors"}, {"elements", "elements"}, {"bytes", "bytes"}};
  DTypeCensus total;
  for (const auto& [dtype, figures] : census.dtypes) {
    table.AddRow({std::string(DTypeName(dtype)), IntegerCell(figures.tensors), IntegerCell(figures.elements),
                  BytesCell(static_cast<double>(figures.bytes))});
    total.tensors += figures.tensors;
    total.elements += figures.elements;
    total.bytes += figures.bytes;
  }
  int64_t scale_tensors = 0;
  uint64_t scale_bytes = 0;
  for (const GroupCensus& group : census.groups) {
    scale_tensors += group.scale_tensors;
    scale_bytes += group.scale_bytes;
  }
  table.AddRow(
      {"total", IntegerCell(total.tensors), IntegerCell(total.elements), BytesCell(static_cast<double>(total.bytes))});
  table.notes.push_back(StrCat("of which FP8 block scales (F32): ", FormatInteger(scale_tensors), " tensors, ",
                               FormatBytes(static_cast<double>(scale_bytes))));
  return table;
}

Table ActiveTable(const Census& census, const ModelConfig& config) {
  Table table;
  table.id = "active";
  table.title = "Total and active parameters per token";
  table.columns = {{"figure", "figure", false}, {"params", "params"}, {"exact", "exact"}};
  auto add = [&](const std::string& label, double params) {
    table.AddRow({label, CountCell(params), IntegerCell(static_cast<int64_t>(params + 0.5))});
  };
  const double all = static_cast<double>(census.TotalParams());
  const double mtp = static_cast<double>(census.group(TensorGroup::kMtp).params);
  const double vision = static_cast<double>(census.group(TensorGroup::kVision).params);
  add("total", all);
  add("total without MTP and vision (text trunk)", all - mtp - vision);
  add("active: trunk", ActiveParams(census, config, {}));
  add("active: trunk, without the embedding lookup", ActiveParams(census, config, {.include_embedding_lookup = false}));
  add("active: trunk + MTP", ActiveParams(census, config, {.include_mtp = true}));
  add("active: trunk + MTP, without the embedding lookup",
      ActiveParams(census, config, {.include_mtp = true, .include_embedding_lookup = false}));
  add("active: trunk + MTP + vision", ActiveParams(census, config, {.include_mtp = true, .include_vision = true}));
  table.notes.push_back(
      StrCat("routed experts count num_experts_per_tok / n_routed_experts = ", config.num_experts_per_tok, "/",
             config.n_routed_experts, " of their parameters (trunk and MTP layer); every other group counts in full"));
  table.notes.push_back("the embedding lookup reads one row of embed_tokens and multiplies nothing");
  return table;
}

Table ProblemTable(const Census& census) {
  Table table;
  table.id = "problems";
  table.title = "Checkpoint vs the tensors the config implies";
  table.columns = {{"kind", "kind", false}, {"tensor", "tensor", false}, {"detail", "detail", false}};
  for (const auto& name : census.unknown_names) {
    table.AddRow({"unknown", name, "no rule of the schema explains this name; counted in group 'unknown'"});
  }
  for (const auto& problem : census.missing) table.AddRow({"missing", problem.name, problem.detail});
  for (const auto& problem : census.shape_mismatches) table.AddRow({"shape", problem.name, problem.detail});
  if (table.rows.empty()) table.notes.push_back("none: every expected tensor is present with its expected shape");
  return table;
}

}  // namespace glint::plan
