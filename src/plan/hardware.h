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

// `--hardware host`: a server built of this machine's cores, with figures measured on this machine in the same run
// (cli/cmd_plan.cc runs kernels/machine_limits.h and kernels/linear_probe.h; the plan layer only does arithmetic).
struct HostMeasurement {
  int threads = 0;                                     // threads the figures were measured on, one per core
  std::string isa;                                     // the int8 level the products ran at ("amx", "avx512", ...)
  double triad_one_thread = 0, triad_all_threads = 0;  // bytes/s
  double int8_loop_peak = 0;     // ops/s on all threads at `isa` (AMX or VNNI loop); 0: none measurable (AVX2)
  double int8_decode_rate = 0;   // weight bytes/s of a one-token int8 product streamed from memory, all threads
  double int8_prefill_rate = 0;  // ops/s of a prefill-shaped int8 product, all threads
  double bf16_prefill_rate = 0;  // ops/s of a prefill-shaped bf16 product, all threads
  double memory_bytes = 0;       // this machine's RAM
};

struct HostServer {
  HostMeasurement measured;
  int cores_per_socket = 0;     // cores of the projected server per socket
  int sockets = 1;              // one glint rank per socket (docs/distributed.md): a socket is one "chip"
  double socket_bandwidth = 0;  // bytes/s per socket (its memory channels' triad)
  double memory_bytes = 0;      // the whole server's RAM
  double socket_link = 0;       // bytes/s between sockets, both directions summed; needed when sockets > 1
};

// What the projection uses, derived from the measurements and the server's shape.
struct HostFigures {
  double bandwidth_per_socket = 0;  // min(socket_bandwidth, cores × one thread's triad): few cores cannot drain
                                    // a socket's channels
  double int8_peak_per_socket = 0;  // cores × the per-core loop peak (measured with every thread busy, so at the
                                    // all-core clock)
  double bf16_peak_per_socket = 0;  // cores × per-core bf16 product rate ÷ mfu, so that peak × mfu = that rate
  double bandwidth_efficiency = 0;  // int8 decode rate ÷ all-thread triad
  double mfu = 0;                   // int8 prefill rate ÷ int8 loop peak (1 when no loop peak is measurable)
};
// The server's shape (cores, sockets, bandwidth, memory, link) alone, so flags are refused before measuring.
Status ValidateHostShape(const HostServer& server);
Result<HostFigures> DeriveHostFigures(const HostServer& server);

// Adds chip "host-socket" and topology "host" (`sockets` chips). Returns the figures used.
Result<HostFigures> AddHostServer(const HostServer& server, Catalogue& catalogue);

}  // namespace glint::plan
