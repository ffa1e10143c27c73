// The hardware catalogue (data/hardware.json, embedded in the binary; `--catalogue FILE` replaces it): chips with
// memory, bandwidth, dense peak per dtype and interconnect, each figure with its public source; and topologies
// (N chips of one kind). A CPU server is a one-"chip" topology built from --memory and --bandwidth.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace glint::plan {

// Matrix-multiply dtypes a chip may run natively.
enum class ComputeDType { kBf16, kFp8, kInt8 };
std::string_view ComputeDTypeName(ComputeDType dtype);  // "bf16", "fp8", "int8"

// One figure in SI base units (bytes, bytes/s, operations/s) and where it comes from.
struct Figure {
  double value = 0;
  std::string source;  // URL, or "--memory flag" etc.
  std::string note;
};

struct Chip {
  std::string name;
  std::string description;
  Figure memory_bytes;
  Figure memory_bandwidth;              // bytes/s
  std::map<ComputeDType, Figure> peak;  // dense operations/s; absent = no native matrix path
  std::string interconnect_name;
  Figure interconnect_bandwidth;  // bytes/s, both directions summed; 0 for a single machine
  bool is_cpu = false;

  // The rate for weights stored as `dtype`: its native peak when that beats bf16, else bf16 (the weights are
  // upcast). Returns the dtype actually used too.
  std::pair<ComputeDType, double> EffectivePeak(ComputeDType dtype) const;
};

struct Topology {
  std::string name;
  std::string chip;  // Chip::name
  int chips = 0;
  std::string note;
};

struct Catalogue {
  std::string source;  // "embedded data/hardware.json" or the --catalogue path
  std::vector<Chip> chips;
  std::vector<Topology> topologies;

  const Chip* FindChip(std::string_view name) const;
  const Topology* FindTopology(std::string_view name) const;
  std::string TopologyNames() const;  // "v6e-4, v6e-8, ..." for error messages
};

// Parses and validates a catalogue: units known, values positive, every topology's chip defined, names unique,
// every figure with a source.
Result<Catalogue> ParseCatalogue(std::string_view json_text, std::string_view source);

// The catalogue compiled into the binary.
Result<Catalogue> EmbeddedCatalogue();

// A CPU server as a one-chip topology named "cpu". Peaks are optional (prefill figures need them).
struct CpuServer {
  double memory_bytes = 0;
  double bandwidth = 0;                        // bytes/s
  std::optional<double> bf16_peak, int8_peak;  // operations/s
};
Status AddCpuServer(const CpuServer& server, Catalogue& catalogue);

}  // namespace glint::plan
