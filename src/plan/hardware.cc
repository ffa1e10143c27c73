#include "plan/hardware.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "base/table.h"
#include "plan/embedded.h"

namespace glint::plan {
namespace {

using Json = nlohmann::json;

// Multipliers to SI base units for the units the catalogue may use.
std::optional<double> UnitScale(std::string_view unit) {
  if (unit == "GB") return 1e9;
  if (unit == "GiB") return 1073741824.0;
  if (unit == "TB") return 1e12;
  if (unit == "GB/s") return 1e9;
  if (unit == "TB/s") return 1e12;
  if (unit == "TFLOPS" || unit == "TOPS") return 1e12;
  if (unit == "PFLOPS" || unit == "POPS") return 1e15;
  return std::nullopt;
}

Result<Figure> ReadFigure(const Json& object, const std::string& context,
                          std::initializer_list<std::string_view> units) {
  if (!object.is_object()) return InvalidArgument(context, ": expected an object {value, unit, source}");
  if (!object.contains("value") || !object["value"].is_number()) {
    return InvalidArgument(context, ": missing numeric 'value'");
  }
  if (!object.contains("unit") || !object["unit"].is_string()) return InvalidArgument(context, ": missing 'unit'");
  if (!object.contains("source") || !object["source"].is_string() || object["source"].get<std::string>().empty()) {
    return InvalidArgument(context, ": missing 'source' (every figure cites where it comes from)");
  }
  const std::string unit = object["unit"].get<std::string>();
  bool allowed = false;
  std::string allowed_text;
  for (std::string_view u : units) {
    allowed = allowed || unit == u;
    allowed_text += (allowed_text.empty() ? "" : ", ") + std::string(u);
  }
  const std::optional<double> scale = UnitScale(unit);
  if (!allowed || !scale) return InvalidArgument(context, ": unit '", unit, "'; expected one of ", allowed_text);
  const double value = object["value"].get<double>();
  if (!(value > 0)) return InvalidArgument(context, ": value ", value, " must be positive");
  Figure figure;
  figure.value = value * *scale;
  figure.source = object["source"].get<std::string>();
  if (object.contains("note") && object["note"].is_string()) figure.note = object["note"].get<std::string>();
  return figure;
}

Result<std::string> ReadName(const Json& object, const char* key, const std::string& context) {
  if (!object.contains(key) || !object[key].is_string() || object[key].get<std::string>().empty()) {
    return InvalidArgument(context, ": missing '", key, "'");
  }
  return object[key].get<std::string>();
}

Result<Chip> ReadChip(const Json& object, const std::string& context) {
  if (!object.is_object()) return InvalidArgument(context, ": expected an object");
  Chip chip;
  GLINT_ASSIGN_OR_RETURN(chip.name, ReadName(object, "name", context));
  const std::string where = context + " '" + chip.name + "'";
  if (object.contains("description") && object["description"].is_string()) {
    chip.description = object["description"].get<std::string>();
  }
  if (!object.contains("memory")) return InvalidArgument(where, ": missing 'memory'");
  GLINT_ASSIGN_OR_RETURN(chip.memory_bytes, ReadFigure(object["memory"], where + " memory", {"GB", "GiB", "TB"}));
  if (!object.contains("memory_bandwidth")) return InvalidArgument(where, ": missing 'memory_bandwidth'");
  GLINT_ASSIGN_OR_RETURN(chip.memory_bandwidth,
                         ReadFigure(object["memory_bandwidth"], where + " memory_bandwidth", {"GB/s", "TB/s"}));
  if (!object.contains("peak") || !object["peak"].is_object()) return InvalidArgument(where, ": missing 'peak'");
  for (const auto& [key, value] : object["peak"].items()) {
    ComputeDType dtype;
    if (key == "bf16") {
      dtype = ComputeDType::kBf16;
    } else if (key == "fp8") {
      dtype = ComputeDType::kFp8;
    } else if (key == "int8") {
      dtype = ComputeDType::kInt8;
    } else {
      return InvalidArgument(where, ": peak '", key, "'; expected bf16, fp8 or int8");
    }
    GLINT_ASSIGN_OR_RETURN(chip.peak[dtype],
                           ReadFigure(value, StrCat(where, " peak ", key), {"TFLOPS", "TOPS", "PFLOPS", "POPS"}));
  }
  if (!chip.peak.contains(ComputeDType::kBf16)) return InvalidArgument(where, ": missing peak 'bf16'");
  if (!object.contains("interconnect")) return InvalidArgument(where, ": missing 'interconnect'");
  const Json& link = object["interconnect"];
  GLINT_ASSIGN_OR_RETURN(chip.interconnect_bandwidth, ReadFigure(link, where + " interconnect", {"GB/s", "TB/s"}));
  if (link.contains("name") && link["name"].is_string()) chip.interconnect_name = link["name"].get<std::string>();
  return chip;
}

}  // namespace

std::string_view ComputeDTypeName(ComputeDType dtype) {
  switch (dtype) {
    case ComputeDType::kBf16:
      return "bf16";
    case ComputeDType::kFp8:
      return "fp8";
    case ComputeDType::kInt8:
      return "int8";
  }
  return "?";
}

std::pair<ComputeDType, double> Chip::EffectivePeak(ComputeDType dtype) const {
  const double bf16 = peak.at(ComputeDType::kBf16).value;
  auto it = peak.find(dtype);
  if (it != peak.end() && it->second.value > bf16) return {dtype, it->second.value};
  return {ComputeDType::kBf16, bf16};
}

const Chip* Catalogue::FindChip(std::string_view name) const {
  for (const Chip& chip : chips) {
    if (chip.name == name) return &chip;
  }
  return nullptr;
}

const Topology* Catalogue::FindTopology(std::string_view name) const {
  for (const Topology& topology : topologies) {
    if (topology.name == name) return &topology;
  }
  return nullptr;
}

std::string Catalogue::TopologyNames() const {
  std::string names;
  for (const Topology& topology : topologies) names += (names.empty() ? "" : ", ") + topology.name;
  return names;
}

Result<Catalogue> ParseCatalogue(std::string_view json_text, std::string_view source) {
  const std::string context(source);
  const Json root = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return InvalidArgument(context, ": not a JSON object");
  Catalogue catalogue;
  catalogue.source = context;
  if (!root.contains("chips") || !root["chips"].is_array() || root["chips"].empty()) {
    return InvalidArgument(context, ": missing a non-empty 'chips' list");
  }
  std::set<std::string> names;
  for (const Json& object : root["chips"]) {
    GLINT_ASSIGN_OR_RETURN(Chip chip, ReadChip(object, context + ": chip"));
    if (!names.insert(chip.name).second) return InvalidArgument(context, ": chip '", chip.name, "' defined twice");
    catalogue.chips.push_back(std::move(chip));
  }
  if (!root.contains("topologies") || !root["topologies"].is_array() || root["topologies"].empty()) {
    return InvalidArgument(context, ": missing a non-empty 'topologies' list");
  }
  std::set<std::string> topology_names;
  for (const Json& object : root["topologies"]) {
    if (!object.is_object()) return InvalidArgument(context, ": topology: expected an object");
    Topology topology;
    GLINT_ASSIGN_OR_RETURN(topology.name, ReadName(object, "name", context + ": topology"));
    const std::string where = context + ": topology '" + topology.name + "'";
    GLINT_ASSIGN_OR_RETURN(topology.chip, ReadName(object, "chip", where));
    if (catalogue.FindChip(topology.chip) == nullptr) {
      return InvalidArgument(where, ": chip '", topology.chip, "' is not in 'chips'");
    }
    if (!object.contains("chips") || !object["chips"].is_number_integer() || object["chips"].get<int64_t>() < 1 ||
        object["chips"].get<int64_t>() > 65536) {
      return InvalidArgument(where, ": 'chips' must be an integer from 1 to 65536");
    }
    topology.chips = static_cast<int>(object["chips"].get<int64_t>());
    if (object.contains("note") && object["note"].is_string()) topology.note = object["note"].get<std::string>();
    if (topology.name == "cpu") return InvalidArgument(where, ": the name 'cpu' is reserved for --memory/--bandwidth");
    if (!topology_names.insert(topology.name).second) return InvalidArgument(where, ": defined twice");
    catalogue.topologies.push_back(std::move(topology));
  }
  return catalogue;
}

Result<Catalogue> EmbeddedCatalogue() { return ParseCatalogue(HardwareCatalogueJson(), "embedded data/hardware.json"); }

Status AddCpuServer(const CpuServer& server, Catalogue& catalogue) {
  if (!(server.memory_bytes > 0)) return InvalidArgument("--memory must be a positive number of GB");
  if (!(server.bandwidth > 0)) return InvalidArgument("--bandwidth must be a positive number of GB/s");
  Chip chip;
  chip.name = "cpu-server";
  chip.description = "CPU server described by --memory and --bandwidth";
  chip.is_cpu = true;
  chip.memory_bytes = {server.memory_bytes, "--memory", ""};
  chip.memory_bandwidth = {server.bandwidth, "--bandwidth", ""};
  // Without a peak the prefill rows say so; bf16 must exist for EffectivePeak, so a missing peak is recorded as a
  // zero rate and reported as "not given".
  chip.peak[ComputeDType::kBf16] = {server.bf16_peak.value_or(0), server.bf16_peak ? "--cpu-bf16-tflops" : "", ""};
  if (server.int8_peak) chip.peak[ComputeDType::kInt8] = {*server.int8_peak, "--cpu-int8-tops", ""};
  chip.interconnect_name = "none (one machine)";
  catalogue.chips.push_back(std::move(chip));
  catalogue.topologies.push_back({"cpu", "cpu-server", 1, "one machine: no collectives"});
  return Status::Ok();
}

Status ValidateHostShape(const HostServer& server) {
  if (server.cores_per_socket < 1 || server.cores_per_socket > 4096) {
    return InvalidArgument("--host-cores ", server.cores_per_socket, " must be in [1, 4096] (cores per socket)");
  }
  if (server.sockets < 1 || server.sockets > 64) {
    return InvalidArgument("--host-sockets ", server.sockets, " must be in [1, 64]");
  }
  if (!(server.socket_bandwidth > 0)) return InvalidArgument("--socket-bandwidth must be a positive number of GB/s");
  if (!(server.memory_bytes > 0)) return InvalidArgument("--memory must be a positive number of GB");
  if (server.sockets > 1 && !(server.socket_link > 0)) {
    return InvalidArgument("--host-sockets ", server.sockets,
                           " needs --socket-link GB/s: the bandwidth between sockets (both directions summed), "
                           "which the collectives of one rank per socket cross");
  }
  return Status::Ok();
}

Result<HostFigures> DeriveHostFigures(const HostServer& server) {
  const HostMeasurement& m = server.measured;
  if (m.threads < 1 || !(m.triad_one_thread > 0) || !(m.triad_all_threads > 0) || !(m.int8_decode_rate > 0) ||
      !(m.int8_prefill_rate > 0) || !(m.bf16_prefill_rate > 0)) {
    return InvalidArgument("the host measurements are incomplete (threads ", m.threads,
                           "): every bandwidth and product rate must be positive");
  }
  GLINT_RETURN_IF_ERROR(ValidateHostShape(server));
  const double cores = server.cores_per_socket;
  HostFigures f;
  f.bandwidth_per_socket = std::min(server.socket_bandwidth, cores * m.triad_one_thread);
  f.bandwidth_efficiency = std::min(1.0, m.int8_decode_rate / m.triad_all_threads);
  const double loop_peak_per_core = m.int8_loop_peak > 0 ? m.int8_loop_peak / m.threads : 0;
  const double prefill_per_core = m.int8_prefill_rate / m.threads;
  // Without a loop peak (no VNNI/AMX to probe) the achieved rate is the peak and mfu is 1: the projection is the
  // same, only the split between the two is unknown.
  f.mfu = loop_peak_per_core > 0 ? std::min(1.0, prefill_per_core / loop_peak_per_core) : 1.0;
  f.int8_peak_per_socket = cores * (loop_peak_per_core > 0 ? loop_peak_per_core : prefill_per_core);
  f.bf16_peak_per_socket = cores * (m.bf16_prefill_rate / m.threads) / f.mfu;
  return f;
}

Result<HostFigures> AddHostServer(const HostServer& server, Catalogue& catalogue) {
  GLINT_ASSIGN_OR_RETURN(const HostFigures f, DeriveHostFigures(server));
  const HostMeasurement& m = server.measured;
  const std::string measured = StrCat("measured on this machine (", m.threads, " threads, ", m.isa, ")");
  Chip chip;
  chip.name = "host-socket";
  chip.description = StrCat("one socket of ", server.cores_per_socket, " of this machine's cores");
  chip.is_cpu = true;
  chip.memory_bytes = {server.memory_bytes / server.sockets, "--memory ÷ --host-sockets", ""};
  chip.memory_bandwidth = {
      f.bandwidth_per_socket,
      StrCat("min(--socket-bandwidth, cores × one-thread triad ", FormatFixed(m.triad_one_thread / 1e9, 1), " GB/s)"),
      measured};
  chip.peak[ComputeDType::kInt8] = {f.int8_peak_per_socket, "cores × per-core int8 loop peak", measured};
  chip.peak[ComputeDType::kBf16] = {f.bf16_peak_per_socket, "cores × per-core bf16 product rate ÷ mfu", measured};
  if (server.sockets > 1) {
    chip.interconnect_name = "socket link";
    chip.interconnect_bandwidth = {server.socket_link, "--socket-link", ""};
  } else {
    chip.interconnect_name = "none (one socket)";
  }
  catalogue.chips.push_back(std::move(chip));
  catalogue.topologies.push_back({"host", "host-socket", server.sockets,
                                  StrCat(server.sockets, " socket(s) × ", server.cores_per_socket,
                                         " cores of this machine, one glint rank per socket")});
  return f;
}

}  // namespace glint::plan
