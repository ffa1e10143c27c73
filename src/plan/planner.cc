#include "plan/planner.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "base/file.h"
#include "io/safetensors.h"
#include "plan/census_tables.h"
#include "plan/embedded.h"
#include "plan/expert_cache.h"
#include "plan/roofline.h"
#include "plan/state.h"

namespace glint::plan {
namespace {

constexpr int64_t kIndexerContexts[] = {8192, 32768, 131072, 1048576};

bool HasCheckpointFiles(const std::string& dir) {
  return PathExists(JoinPath(dir, "model.safetensors.index.json")) || PathExists(JoinPath(dir, "model.safetensors"));
}

Status ResolveHardware(const PlanRequest& request, PlanInputs& inputs) {
  if (request.catalogue_path.empty()) {
    GLINT_ASSIGN_OR_RETURN(inputs.catalogue, EmbeddedCatalogue());
  } else {
    GLINT_ASSIGN_OR_RETURN(std::string text, ReadFile(request.catalogue_path, size_t{16} << 20));
    GLINT_ASSIGN_OR_RETURN(inputs.catalogue, ParseCatalogue(text, request.catalogue_path));
  }
  if (request.cpu) GLINT_RETURN_IF_ERROR(AddCpuServer(*request.cpu, inputs.catalogue));
  const bool host_asked = std::find(request.hardware.begin(), request.hardware.end(), "host") != request.hardware.end();
  if (host_asked && !request.host) {
    return InvalidArgument("hardware 'host' needs this machine's measurements (glint plan --hardware host takes them)");
  }
  if (host_asked && request.hardware.size() > 1) {
    // The measured fractions replace bandwidth_efficiency and mfu, which would then misdescribe the other chips.
    return InvalidArgument(
        "--hardware host projects with fractions measured on this machine and cannot be combined "
        "with other hardware; run glint plan once per kind");
  }
  if (request.host) {
    GLINT_ASSIGN_OR_RETURN(inputs.host_figures, AddHostServer(*request.host, inputs.catalogue));
    inputs.host = request.host;
    inputs.expert_memory_gbps = inputs.host_figures->bandwidth_per_socket * request.host->sockets / 1e9;
  }
  if (request.hardware.empty()) {
    inputs.topologies = inputs.catalogue.topologies;
    return Status::Ok();
  }
  for (const std::string& name : request.hardware) {
    if (name == "cpu" && !request.cpu) {
      return InvalidArgument("hardware 'cpu' needs --memory GB and --bandwidth GB/s to describe the server");
    }
    const Topology* topology = inputs.catalogue.FindTopology(name);
    if (topology == nullptr) {
      return InvalidArgument("unknown hardware '", name, "'; known: ", inputs.catalogue.TopologyNames(),
                             request.cpu ? "" : " (and cpu, with --memory and --bandwidth)");
    }
    inputs.topologies.push_back(*topology);
  }
  return Status::Ok();
}

std::string Yes(bool value) { return value ? "yes" : "no"; }

// ---- Tables ---------------------------------------------------------------------------------------------------

Table AssumptionTable(const Assumptions& assumptions) {
  Table table;
  table.id = "assumptions";
  table.title = "Assumptions (override with --assume NAME=VALUE)";
  table.columns = {{"name", "name", false},
                   {"value", "value"},
                   {"unit", "unit", false},
                   {"default", "default"},
                   {"meaning", "meaning", false}};
  for (const Assumption& a : assumptions.all()) {
    const int decimals = a.integer ? 0 : 2;
    table.AddRow({a.name, FixedCell(a.value, decimals), a.unit,
                  a.value == a.default_value ? Cell("") : FixedCell(a.default_value, decimals), a.meaning});
  }
  table.notes.push_back("'default' is shown only where an override changed the value");
  return table;
}

Table HardwareTable(const PlanInputs& in) {
  Table table;
  table.id = "hardware";
  table.title = StrCat("Hardware (", in.catalogue.source, ")");
  table.columns = {
      {"topology", "topology", false}, {"chips", "chips"},    {"chip", "chip", false}, {"memory", "memory/chip"},
      {"bandwidth", "GB/s/chip"},      {"bf16", "bf16 TF/s"}, {"fp8", "fp8 TF/s"},     {"int8", "int8 TOP/s"},
      {"interconnect", "link GB/s"}};
  std::vector<const Chip*> cited;
  for (const Topology& topology : in.topologies) {
    const Chip* chip = in.catalogue.FindChip(topology.chip);
    auto peak = [&](ComputeDType dtype) -> Cell {
      auto it = chip->peak.find(dtype);
      if (it == chip->peak.end() || !(it->second.value > 0)) return Cell("—");
      return FixedCell(it->second.value / 1e12, 0);
    };
    table.AddRow(
        {topology.name, IntegerCell(topology.chips), chip->name, BytesCell(chip->memory_bytes.value),
         FixedCell(chip->memory_bandwidth.value / 1e9, 0), peak(ComputeDType::kBf16), peak(ComputeDType::kFp8),
         peak(ComputeDType::kInt8),
         chip->interconnect_bandwidth.value > 0 ? FixedCell(chip->interconnect_bandwidth.value / 1e9, 0) : Cell("—")});
    if (std::find(cited.begin(), cited.end(), chip) == cited.end()) cited.push_back(chip);
  }
  table.notes.push_back("dense peaks (no sparsity); '—' = no native path (such weights compute upcast to bf16)");
  for (const Chip* chip : cited) {
    std::vector<std::string> sources;
    auto cite = [&](const Figure& figure) {
      if (!figure.source.empty() && std::find(sources.begin(), sources.end(), figure.source) == sources.end()) {
        sources.push_back(figure.source);
      }
    };
    cite(chip->memory_bytes);
    cite(chip->memory_bandwidth);
    for (const auto& [dtype, figure] : chip->peak) cite(figure);
    cite(chip->interconnect_bandwidth);
    std::string line = chip->name + ": ";
    for (size_t i = 0; i < sources.size(); ++i) line += (i ? ", " : "") + sources[i];
    table.notes.push_back(line);
  }
  return table;
}

Table SchemeTable(const PlanInputs& in, const std::vector<SchemeFootprint>& footprints) {
  Table table;
  table.id = "schemes";
  table.title = "Weights under each quantisation scheme (all chips together)";
  table.columns = {{"scheme", "scheme", false},     {"description", "description", false}, {"bytes", "weights"},
                   {"metadata", "of which scales"}, {"bytes_per_param", "bytes/param"},    {"routed", "routed experts"},
                   {"other", "everything else"}};
  const double params = static_cast<double>(in.census.TotalParams());
  for (const SchemeFootprint& f : footprints) {
    table.AddRow({std::string(SchemeLetter(f.scheme)), std::string(SchemeDescription(f.scheme)),
                  BytesCell(f.all.Total()), BytesCell(f.all.metadata), FixedCell(f.all.Total() / params, 3),
                  BytesCell(f.routed_bytes), BytesCell(f.other_bytes)});
  }
  const Assumptions& a = in.assumptions;
  table.notes.push_back(
      "R: FP8 e4m3 payload + one F32 scale per 128x128 block (as stored); F32 tensors stay F32 in "
      "every scheme; 1-D tensors (norms, biases) are never quantised");
  table.notes.push_back(StrCat("int8: 1 byte/weight + one ", a.Get("quant_scale_bytes"),
                               "-byte scale per output row and ", a.Get("int8_group_size"),
                               " inputs (int8_group_size, quant_scale_bytes)"));
  table.notes.push_back(StrCat("int4: 0.5 byte/weight + one ", a.Get("quant_scale_bytes"), "-byte scale",
                               a.Get("int4_zero_point_bytes") > 0 ? " and zero point" : "", " per output row and ",
                               a.Get("int4_group_size"), " inputs (int4_group_size, int4_zero_point_bytes)"));
  table.notes.push_back("MoE = routed + shared experts (trunk and MTP layer)");
  return table;
}

Table MemoryTable(const PlanInputs& in, const std::vector<SchemeFootprint>& footprints, const StateModel& state) {
  Table table;
  table.id = "memory";
  table.title = StrCat("Memory per chip (threshold ", FormatPercent(in.assumptions.Get("memory_threshold")),
                       "; sequences of ", FormatInteger(in.context), " tokens that fit in the room left)");
  table.columns = {{"topology", "topology", false},
                   {"scheme", "scheme", false},
                   {"capacity", "memory/chip"},
                   {"weights", "weights/chip"},
                   {"usage", "usage"},
                   {"over", "over threshold", false},
                   {"cache_room", "cache room/chip"},
                   {"sequences", "sequences"},
                   {"fits_concurrency", StrCat("fits ", in.concurrency, " seqs"), false}};
  const double threshold = in.assumptions.Get("memory_threshold");
  for (const Topology& topology : in.topologies) {
    const Chip* chip = in.catalogue.FindChip(topology.chip);
    const int n = topology.chips;
    const double capacity = chip->memory_bytes.value;
    const double per_sequence = state.PerSequencePerChip(in.context, n);
    for (const SchemeFootprint& f : footprints) {
      const double weights = WeightsPerChip(f, in.config, n);
      const double usage = weights / capacity;
      const double room = threshold * capacity - weights;
      const double sequences = room > 0 ? std::floor(room / per_sequence) : 0;
      table.AddRow({topology.name, std::string(SchemeLetter(f.scheme)), BytesCell(capacity), BytesCell(weights),
                    PercentCell(usage), usage > threshold ? Cell(usage > 1 ? "DOES NOT FIT" : "OVER") : Cell(""),
                    room > 0 ? BytesCell(room) : Cell("none", 0.0), IntegerCell(static_cast<int64_t>(sequences)),
                    Yes(sequences >= in.concurrency)});
    }
  }
  table.notes.push_back(
      "weights/chip = non-expert weights / chips + ceil(E / chips) experts of every MoE layer "
      "(tensor parallel + expert parallel); vision and MTP weights resident");
  table.notes.push_back(StrCat("per sequence per chip at ", FormatInteger(in.context),
                               " tokens: latent + pooled keys (replicated on every chip) + KDA state and conv "
                               "windows / min(chips, KDA heads)"));
  table.notes.push_back("cache room = memory_threshold x capacity - weights");
  return table;
}

Table StateTable(const PlanInputs& in, const StateModel& state) {
  const ModelConfig& c = in.config;
  const Assumptions& a = in.assumptions;
  Table table;
  table.id = "state";
  table.title =
      StrCat("Per-sequence state (", state.cache_layers, " DSA layers with caches, ", state.kda_layers, " KDA layers)");
  table.columns = {{"item", "item", false},
                   {"storage", "storage", false},
                   {"per_token", "bytes/token"},
                   {"per_sequence", StrCat("per seq @", FormatInteger(in.context))},
                   {"total", StrCat("x ", in.concurrency, " seqs")},
                   {"used", "used", false}};
  const double context = static_cast<double>(in.context);
  const double layers = state.cache_layers;
  const int latent_used = static_cast<int>(a.Get("cache_latent_bytes"));
  auto per_token_row = [&](const std::string& item, const std::string& storage, double per_token_layer, bool used) {
    const double per_token = per_token_layer * layers;
    table.AddRow({item, storage, BytesCell(per_token), BytesCell(per_token * context),
                  BytesCell(per_token * context * in.concurrency), used ? "yes" : ""});
  };
  if (latent_used == 4) {
    per_token_row(StrCat("MLA latent (", c.kv_lora_rank, " values)"), "fp32", LatentBytesPerTokenLayer(c, a, 4), true);
  }
  per_token_row(StrCat("MLA latent (", c.kv_lora_rank, " values)"), "bf16", LatentBytesPerTokenLayer(c, a, 2),
                latent_used == 2);
  per_token_row(StrCat("MLA latent (", c.kv_lora_rank, " values)"),
                a.Get("cache_fp8_group_size") >= c.kv_lora_rank
                    ? std::string("fp8/int8 + f32 scale per row")
                    : StrCat("fp8 + f32 scale/", a.Get("cache_fp8_group_size")),
                LatentBytesPerTokenLayer(c, a, 1), latent_used == 1);
  per_token_row(StrCat("indexer pooled keys (", c.index_head_dim, " per ", c.index_kpool, " tokens)"),
                a.Get("cache_index_key_bytes") == 2 ? "bf16" : StrCat(a.Get("cache_index_key_bytes"), " B"),
                state.index_key_per_token_layer, true);
  auto fixed_row = [&](const std::string& item, const std::string& storage, double per_sequence, bool used) {
    table.AddRow({item, storage, Cell("—"), BytesCell(per_sequence), BytesCell(per_sequence * in.concurrency),
                  used ? "yes" : ""});
  };
  const double kda_values = state.kda_layers * static_cast<double>(c.kda_num_heads * c.kda_head_dim * c.kda_head_dim);
  const double state_bytes = a.Get("kda_state_bytes");
  fixed_row(StrCat("KDA state (", c.kda_num_heads, " x ", c.kda_head_dim, " x ", c.kda_head_dim, " per layer)"), "fp32",
            kda_values * 4, state_bytes == 4);
  fixed_row(StrCat("KDA state (", c.kda_num_heads, " x ", c.kda_head_dim, " x ", c.kda_head_dim, " per layer)"), "bf16",
            kda_values * 2, state_bytes == 2);
  const double conv_values = state.kda_layers * 3.0 * static_cast<double>(c.KdaWidth() * (c.kda_conv_kernel - 1));
  const double conv_bytes = a.Get("conv_state_bytes");
  fixed_row(StrCat("KDA conv windows (3 x ", c.KdaWidth(), " x ", c.kda_conv_kernel - 1, " per layer)"), "bf16",
            conv_values * 2, conv_bytes == 2);
  fixed_row(StrCat("KDA conv windows (3 x ", c.KdaWidth(), " x ", c.kda_conv_kernel - 1, " per layer)"), "fp32",
            conv_values * 4, conv_bytes == 4);
  fixed_row(StrCat("indexer filling pool (", c.index_kpool - 1, " raw key+gate rows per layer)"), "bf16",
            state.index_tail, true);
  table.AddRow({"total (rows marked 'used')", "", BytesCell(state.PerToken()), BytesCell(state.PerSequence(in.context)),
                BytesCell(state.PerSequence(in.context) * in.concurrency), ""});
  table.notes.push_back(
      StrCat("DSA caches count ", state.trunk_dsa_layers, " trunk layers",
             state.cache_layers > state.trunk_dsa_layers ? " + the MTP layer (cache_mtp_layer = 1)" : "",
             "; the mHC streams are transient (not cached)"));
  table.notes.push_back(StrCat("a decode step attends at most ", c.DenseRegimeTokens(),
                               " tokens per DSA layer (index_topk + index_kpool - 1) but the indexer scores every "
                               "pool: its keys are read whole"));
  return table;
}

Table RooflineTable(const PlanInputs& in, const std::vector<SchemeFootprint>& footprints, const StateModel& state) {
  Table table;
  table.id = "roofline";
  table.title = StrCat("Roofline at ", FormatInteger(in.context), " tokens of context (decode at batch 1 and ",
                       in.concurrency, "; prefill of a ", FormatInteger(in.context), "-token prompt)");
  const int hot = BatchForExpertsHot(in.config);
  table.columns = {{"topology", "topology", false},
                   {"scheme", "scheme", false},
                   {"fits", "fits", false},
                   {"b1_step", "b=1 step"},
                   {"b1_tokens_per_s", "b=1 tok/s"},
                   {"b1_collectives", "b=1 collectives"},
                   {"b1_bound", "b=1 bound", false},
                   {"bn_step", StrCat("b=", in.concurrency, " step")},
                   {"bn_tokens_per_s", StrCat("b=", in.concurrency, " tok/s")},
                   {"hot_step", StrCat("b=", hot, " step")},
                   {"hot_tokens_per_s", StrCat("b=", hot, " tok/s")},
                   {"hot_bound", StrCat("b=", hot, " bound"), false},
                   {"prefill_tokens_per_s", "prefill tok/s"},
                   {"prefill_dtypes", "prefill dtypes", false}};
  const Assumptions& a = in.assumptions;
  for (const Topology& topology : in.topologies) {
    const Chip* chip = in.catalogue.FindChip(topology.chip);
    for (const SchemeFootprint& f : footprints) {
      const RooflineInputs inputs{&in.config, &f, &state, &a, chip, topology.chips};
      const DecodeEstimate one = EstimateDecode(inputs, 1, in.context);
      const DecodeEstimate many = EstimateDecode(inputs, in.concurrency, in.context);
      const DecodeEstimate all_hot = EstimateDecode(inputs, hot, in.context);
      const PrefillEstimate prefill = EstimatePrefill(inputs, in.context);
      const double usage = WeightsPerChip(f, in.config, topology.chips) / chip->memory_bytes.value;
      const std::string fits = usage > 1 ? "no" : usage > a.Get("memory_threshold") ? "over threshold" : "yes";
      table.AddRow({topology.name, std::string(SchemeLetter(f.scheme)), fits, SecondsCell(one.step),
                    FixedCell(one.tokens_per_s, 1), SecondsCell(one.t_collective), one.bound, SecondsCell(many.step),
                    FixedCell(many.tokens_per_s, 0), SecondsCell(all_hot.step), FixedCell(all_hot.tokens_per_s, 0),
                    all_hot.bound,
                    prefill.tokens_per_s > 0 ? FixedCell(prefill.tokens_per_s, 0) : Cell("n/a (no peak)"),
                    prefill.dtypes});
    }
  }
  table.notes.push_back(
      "fits: weights/chip within memory_threshold x memory ('no': they exceed the memory; the "
      "figures then describe a machine that does not exist)");
  table.notes.push_back(
      StrCat("step = max(bytes / (bandwidth x bandwidth_efficiency), FLOPs / (peak x mfu)) + "
             "collectives; bandwidth_efficiency = ",
             a.Get("bandwidth_efficiency"), ", mfu = ", a.Get("mfu")));
  table.notes.push_back(
      StrCat("decode reads the non-expert weights (no MTP, vision or embedding table) split over the "
             "chips, and the experts the batch touches: E(1 - (1 - k/E)^b) distinct, spread at "
             "best over the chips; plus every sequence's caches at the full context. b = ",
             hot,
             " is the smallest batch touching 99% of the experts (all experts hot); whether its "
             "caches fit is the memory table's question"));
  table.notes.push_back(
      StrCat("collectives per step: ", CollectivesPerDecodeStep(in.config, 2),
             " (all-reduce per attention and dense MLP, 2 all-to-all per MoE layer, embedding and logits) x ",
             a.Get("collective_latency_us"), " µs + bytes / (link x ", a.Get("interconnect_direction_fraction"),
             "); all-reduce payload = b x hidden x collective_width_multiple (", a.Get("collective_width_multiple"),
             ") x activation_bytes — mHC streams are replicated "
             "and mixed locally; set collective_width_multiple = hc_mult (",
             in.config.hc_mult, ") to model reducing the widened residual"));
  table.notes.push_back(
      "bound 'collectives': the fixed collective cost exceeds the bandwidth (and compute) time, "
      "so more chips do not make a step faster");
  table.notes.push_back(
      "prefill dtypes: stored→used; a stored dtype falls back to bf16 where the chip has no faster "
      "native path (fp8 on v6e runs at the bf16 rate, TPU7x has no int8, B300 int8 is slower than "
      "bf16); attention, indexer and KDA recurrence compute in bf16");
  return table;
}

Table HostMeasurementTable(const HostServer& server, const HostFigures& f) {
  const HostMeasurement& m = server.measured;
  Table table;
  table.id = "host_measurements";
  table.title = StrCat("This machine, measured in this run (", m.threads, " threads, int8 products at ", m.isa,
                       ") and the server projected from it");
  table.columns = {{"figure", "figure", false}, {"value", "value"}, {"used_as", "used as", false}};
  const auto gbps = [](double v) { return Cell(StrCat(FormatFixed(v / 1e9, 1), " GB/s"), v); };
  const auto gops = [](double v) { return Cell(StrCat(FormatFixed(v / 1e9, 0), " GOPS"), v); };
  table.AddRow({"triad, one thread", gbps(m.triad_one_thread), "per-core bandwidth"});
  table.AddRow({"triad, all threads", gbps(m.triad_all_threads), "bandwidth_efficiency's denominator"});
  table.AddRow({"int8 loop peak, all threads", m.int8_loop_peak > 0 ? gops(m.int8_loop_peak) : Cell("none"),
                m.int8_loop_peak > 0 ? "per-core int8 peak" : "no VNNI/AMX loop: the product rate is the peak"});
  table.AddRow({"int8 decode product (1 token, from memory)", gbps(m.int8_decode_rate), "bandwidth_efficiency"});
  table.AddRow({"int8 prefill product", gops(m.int8_prefill_rate), "mfu"});
  table.AddRow({"bf16 prefill product", gops(m.bf16_prefill_rate), "bf16 rate"});
  table.AddRow({"bandwidth_efficiency", Cell(FormatFixed(f.bandwidth_efficiency, 2), f.bandwidth_efficiency),
                "decode product ÷ all-thread triad"});
  table.AddRow({"mfu", Cell(FormatFixed(f.mfu, 2), f.mfu), "prefill product ÷ loop peak"});
  table.AddRow({"server",
                Cell(StrCat(server.sockets, " × ", server.cores_per_socket, " cores"),
                     static_cast<double>(server.sockets * server.cores_per_socket)),
                "--host-sockets × --host-cores"});
  table.AddRow(
      {"bandwidth per socket", gbps(f.bandwidth_per_socket), "min(--socket-bandwidth, cores × one-thread triad)"});
  table.AddRow({"int8 peak per socket", gops(f.int8_peak_per_socket), "cores × per-core peak"});
  table.AddRow({"memory", Cell(FormatBytes(server.memory_bytes), server.memory_bytes),
                "--host-memory (whole server; default: this machine's RAM)"});
  table.notes.push_back(
      "bandwidth_efficiency and mfu are set from these measurements unless --assume overrides them; the roofline "
      "and the projection below use them");
  table.notes.push_back(
      "per-core figures are the all-thread figures ÷ threads (cores share the clock they run at when all are busy); "
      "this assumes the projected server's cores are this machine's");
  return table;
}

// Decode at batch 1..64 and prefill, int8 (C) and int4-expert (E) weights: glint's two CPU formats.
Table HostProjectionTable(const PlanInputs& in, const std::vector<SchemeFootprint>& footprints,
                          const StateModel& state) {
  static constexpr int kBatches[] = {1, 2, 4, 8, 16, 32, 64};
  Table table;
  table.id = "host_projection";
  table.title =
      StrCat("Projection onto the host server (", in.host->sockets, " × ", in.host->cores_per_socket,
             " cores): decode tokens/s by batch at ", FormatInteger(in.context), " tokens of context, and prefill");
  table.columns = {{"scheme", "scheme", false}, {"fits", "fits", false}};
  for (int batch : kBatches) table.columns.push_back({StrCat("b", batch), StrCat("b=", batch, " tok/s")});
  table.columns.push_back({"prefill_512", "prefill 512 tok/s"});
  table.columns.push_back({"prefill_context", StrCat("prefill ", FormatInteger(in.context), " tok/s")});
  const Chip* chip = in.catalogue.FindChip("host-socket");
  const Assumptions& a = in.assumptions;
  for (const SchemeFootprint& f : footprints) {
    if (f.scheme != Scheme::kC && f.scheme != Scheme::kE) continue;
    const RooflineInputs inputs{&in.config, &f, &state, &a, chip, in.host->sockets};
    const double usage = WeightsPerChip(f, in.config, in.host->sockets) / chip->memory_bytes.value;
    std::vector<Cell> row = {std::string(SchemeLetter(f.scheme)), usage > 1                           ? "no"
                                                                  : usage > a.Get("memory_threshold") ? "over threshold"
                                                                                                      : "yes"};
    for (int batch : kBatches) row.push_back(FixedCell(EstimateDecode(inputs, batch, in.context).tokens_per_s, 1));
    row.push_back(FixedCell(EstimatePrefill(inputs, 512).tokens_per_s, 0));
    row.push_back(FixedCell(EstimatePrefill(inputs, in.context).tokens_per_s, 0));
    table.AddRow(std::move(row));
  }
  if (table.rows.empty()) table.notes.push_back("no row: the projection shows schemes C and E; --scheme chose another");
  table.notes.push_back(
      "C: int8 weights (glint's default); E: int4 routed experts (--experts int4). Same model as the roofline table "
      "(step = max(bytes ÷ (bandwidth × bandwidth_efficiency), FLOPs ÷ (peak × mfu)) + collectives), on the host's "
      "measured figures");
  table.notes.push_back(
      "fits 'no': the weights exceed --memory; run the experts from disk (glint plan's expert-cache table) or add "
      "sockets/machines");
  return table;
}

// Prefill/decode disaggregation (docs/disaggregation.md): what one request's state costs on the link between a
// prefill and a decode server — the fixed part (KDA state, conv windows, the indexer's filling pool) plus the MLA
// latents and pooled keys of every prompt token, the same state the transfer plane moves — beside the prefill it
// replaces, on the host's projection (scheme C, int8) when --hardware host gives one.
Table DisaggregationTable(const PlanInputs& in, const std::vector<SchemeFootprint>& footprints,
                          const StateModel& state) {
  static constexpr int kLinksGbit[] = {1, 10, 25, 100};
  Table table;
  table.id = "disaggregation";
  table.title = "Prefill/decode disaggregation: one request's state on the link between the servers";
  table.columns = {{"prompt", "prompt tokens"}, {"state", "state"}};
  for (int gbit : kLinksGbit) table.columns.push_back({StrCat("link_", gbit), StrCat(gbit, " Gb/s")});
  std::optional<RooflineInputs> host;
  const Chip* chip = in.catalogue.FindChip("host-socket");
  const auto int8 = std::find_if(footprints.begin(), footprints.end(),
                                 [](const SchemeFootprint& f) { return f.scheme == Scheme::kC; });
  if (in.host && in.host_figures && chip != nullptr && int8 != footprints.end()) {
    host = RooflineInputs{&in.config, &*int8, &state, &in.assumptions, chip, in.host->sockets};
    table.columns.push_back({"prefill", "host prefill"});
    table.columns.push_back({"ratio_10", "10 Gb/s ÷ prefill"});
    table.columns.push_back({"ratio_25", "25 Gb/s ÷ prefill"});
  }
  std::vector<int64_t> prompts = {1024, 8192};
  if (in.context > 0 && in.context != 1024 && in.context != 8192) prompts.push_back(in.context);
  std::sort(prompts.begin(), prompts.end());
  const auto link_seconds = [](double bytes, double gbit) { return bytes * 8 / (gbit * 1e9); };
  for (const int64_t prompt : prompts) {
    const double bytes = state.PerSequence(prompt);
    std::vector<Cell> row = {IntegerCell(prompt), BytesCell(bytes)};
    for (int gbit : kLinksGbit) row.push_back(SecondsCell(link_seconds(bytes, gbit)));
    if (host) {
      const double rate = EstimatePrefill(*host, prompt).tokens_per_s;
      const double prefill = rate > 0 ? static_cast<double>(prompt) / rate : 0;
      row.push_back(prefill > 0 ? SecondsCell(prefill) : Cell("n/a"));
      for (int gbit : {10, 25}) {
        row.push_back(prefill > 0 ? PercentCell(link_seconds(bytes, gbit) / prefill) : Cell("n/a"));
      }
    }
    table.AddRow(std::move(row));
  }
  table.notes.push_back(StrCat("state = ", FormatBytes(state.Fixed()), " a request whatever its length (KDA state ",
                               FormatBytes(state.kda_state), ", conv windows ", FormatBytes(state.conv_state),
                               ", the indexer's filling pool ", FormatBytes(state.index_tail), ") + ",
                               FormatBytes(state.PerToken()),
                               " a prompt token (MLA latents and pooled keys of every cached DSA layer), at the "
                               "state table's storage; link times at the line rate (TCP carries ≈ 90–95 % of it)"));
  if (host) {
    const double rate = EstimatePrefill(*host, 512).tokens_per_s;
    for (int gbit : {10, 25}) {
      table.notes.push_back(StrCat("local prefill pays below ≈ ",
                                   FormatInteger(static_cast<int64_t>(link_seconds(state.Fixed(), gbit) * rate)),
                                   " tokens at ", gbit,
                                   " Gb/s: the fixed state's link time × the host's 512-token "
                                   "prefill rate (the router's and decode server's --local-prefill-below)"));
    }
  } else {
    table.notes.push_back(
        "--hardware host adds the host's prefill time beside the link's, and the local-prefill "
        "threshold");
  }
  return table;
}

Table IndexerTable(const PlanInputs& in, const SchemeFootprint& footprint) {
  const ModelConfig& c = in.config;
  Table table;
  table.id = "indexer";
  table.title = "DSA indexer vs sparse attention per decoded token (all trunk DSA layers)";
  table.columns = {{"context", "context", false},          {"selected", "selected tokens"},
                   {"attention_flops", "attention FLOPs"}, {"indexer_flops", "indexer FLOPs"},
                   {"ratio", "indexer/attention"},         {"share", "indexer share of model FLOPs"},
                   {"latent_bytes", "latent read"},        {"key_bytes", "pooled keys read"}};
  std::vector<int64_t> contexts(std::begin(kIndexerContexts), std::end(kIndexerContexts));
  if (std::find(contexts.begin(), contexts.end(), in.context) == contexts.end()) contexts.push_back(in.context);
  std::sort(contexts.begin(), contexts.end());
  double matmul = 0;
  for (const auto& [dtype, flops] : footprint.matmul_flops_per_token) matmul += flops;
  const double dsa = c.NumLayersOf(AttentionKind::kDsa);
  const double kda = c.NumLayersOf(AttentionKind::kKda);
  const StateModel state = BuildStateModel(c, in.assumptions);
  for (int64_t context : contexts) {
    const double visible = static_cast<double>(context);
    const double attention = dsa * DecodeAttentionFlops(c, visible);
    const double scoring = dsa * IndexerScoreFlops(c, VisiblePools(c, visible));
    const double projections = dsa * IndexerProjectionFlops(c);
    const double indexer = scoring + projections;
    // The model's FLOPs per token: weight matmuls (indexer projections included) + attention + scoring + KDA.
    const double total = matmul + attention + scoring + kda * KdaRecurrenceFlops(c);
    const double pool_key_bytes = state.index_key_per_token_layer * static_cast<double>(c.index_kpool);
    table.AddRow(
        {StrCat(context >= 1048576 ? FormatInteger(context / 1048576) + "M" : FormatInteger(context / 1024) + "K", " (",
                FormatInteger(context), ")"),
         IntegerCell(static_cast<int64_t>(SelectedTokens(c, visible))), CountCell(attention), CountCell(indexer),
         FixedCell(indexer / attention, 2), PercentCell(indexer / total),
         BytesCell(dsa * SelectedTokens(c, visible) * state.latent_per_token_layer),
         BytesCell(dsa * VisiblePools(c, visible) * pool_key_bytes)});
  }
  table.notes.push_back(StrCat("attention: absorbed MLA over the kv_lora_rank (", c.kv_lora_rank,
                               ")-wide latent, 4 x heads x kv_lora_rank FLOPs per selected token per layer"));
  table.notes.push_back(
      StrCat("indexer: projections (", FormatCount(IndexerProjectionFlops(c)),
             " FLOPs per layer) + 2 x (index_head_dim + 1) x index_n_heads FLOPs per visible pool of ", c.index_kpool,
             " tokens — linear in context while attention stops growing at ", c.DenseRegimeTokens(), " tokens"));
  table.notes.push_back(StrCat("model FLOPs per token: 2 x active weights (scheme ", SchemeLetter(footprint.scheme),
                               ", no MTP, vision or embedding lookup) + attention + indexer scoring + KDA recurrence"));
  return table;
}

}  // namespace

Result<PlanInputs> ResolvePlanForConfig(const ModelConfig& config, std::string model_source,
                                        const PlanRequest& request) {
  PlanInputs inputs;
  inputs.config = config;
  inputs.model_source = std::move(model_source);
  inputs.census = CensusFromConfig(config);
  inputs.weights = WeightsFromConfig(config);
  if (request.context < 1 || request.context > (int64_t{1} << 32)) {
    return InvalidArgument("--context ", request.context, " is out of range; expected 1 to 4294967296 tokens");
  }
  if (request.concurrency < 1 || request.concurrency > 1000000) {
    return InvalidArgument("--concurrency ", request.concurrency, " is out of range; expected 1 to 1000000");
  }
  inputs.context = request.context;
  inputs.concurrency = request.concurrency;
  inputs.assumptions = request.assumptions;
  for (double value : request.expert_ram_gb) {
    if (!(value > 0)) return InvalidArgument("--expert-ram ", value, " GB: expected a positive size");
  }
  for (double value : request.disk_gbps) {
    if (!(value > 0)) return InvalidArgument("--disk-bandwidth ", value, " GB/s: expected a positive bandwidth");
  }
  if (request.expert_hit_rate && !(*request.expert_hit_rate >= 0 && *request.expert_hit_rate <= 1)) {
    return InvalidArgument("--expert-hit-rate ", *request.expert_hit_rate, ": expected a fraction in [0, 1]");
  }
  inputs.expert_ram_gb = request.expert_ram_gb;
  inputs.disk_gbps = request.disk_gbps;
  inputs.expert_hit_rate = request.expert_hit_rate;
  if (request.cpu) inputs.expert_memory_gbps = request.cpu->bandwidth / 1e9;
  if (request.scheme) {
    inputs.schemes = {*request.scheme};
  } else {
    inputs.schemes = AllSchemes();
  }
  GLINT_RETURN_IF_ERROR(ResolveHardware(request, inputs));
  return inputs;
}

Result<PlanInputs> ResolvePlan(const PlanRequest& request) {
  if (request.model.empty()) {
    GLINT_ASSIGN_OR_RETURN(ModelConfig config,
                           ParseModelConfig(ReleaseConfigJson(), "embedded data/glm-5.3-flash-config.json"));
    return ResolvePlanForConfig(config, "embedded release config (data/glm-5.3-flash-config.json), no checkpoint",
                                request);
  }
  if (!PathExists(request.model)) {
    return NotFound("--model '", request.model, "' does not exist; expected a model directory or a config.json");
  }
  const bool dir = IsDirectory(request.model);
  if (dir && !PathExists(JoinPath(request.model, "config.json"))) {
    return NotFound("--model '", request.model, "' has no config.json");
  }
  GLINT_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(request.model));
  if (!dir || !HasCheckpointFiles(request.model)) {
    return ResolvePlanForConfig(config, StrCat(request.model, dir ? "/config.json" : "", " (config only)"), request);
  }
  GLINT_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(request.model));
  GLINT_ASSIGN_OR_RETURN(PlanInputs inputs,
                         ResolvePlanForConfig(config,
                                              StrCat(request.model, "/config.json + safetensors headers (",
                                                     checkpoint.shard_paths().size(), " file(s); data not read)"),
                                              request));
  inputs.census = CensusFromCheckpoint(checkpoint, config);
  inputs.weights = WeightsFromCheckpoint(checkpoint, config);
  return inputs;
}

Report BuildPlanReport(const PlanInputs& in) {
  const ModelConfig& c = in.config;
  Report report;
  report.title = "glint plan";
  report.preamble.push_back(StrCat("model: ", in.model_source));
  report.preamble.push_back(StrCat(c.num_hidden_layers, " layers (", c.NumLayersOf(AttentionKind::kKda), " KDA, ",
                                   c.NumLayersOf(AttentionKind::kDsa), " DSA), hidden ", c.hidden_size, ", ",
                                   c.n_routed_experts, " routed experts top-", c.num_experts_per_tok, " + ",
                                   c.n_shared_experts, " shared, ", c.HasMtp() ? "MTP layer, " : "", "hc_mult ",
                                   c.hc_mult));
  report.preamble.push_back(
      StrCat("context ", FormatInteger(in.context), " tokens, concurrency ", in.concurrency, " sequences"));
  report.preamble.push_back(
      "parallel layout: non-expert weights tensor-parallel over all chips, routed experts "
      "expert-parallel; one model replica per topology");

  std::vector<SchemeFootprint> footprints;
  for (Scheme scheme : in.schemes) footprints.push_back(Footprint(scheme, in.weights, c, in.assumptions));
  const StateModel state = BuildStateModel(c, in.assumptions);

  report.tables.push_back(AssumptionTable(in.assumptions));
  report.tables.push_back(GroupTable(in.census));
  report.tables.push_back(DTypeTable(in.census));
  report.tables.push_back(ActiveTable(in.census, c));
  if (in.census.source == CensusSource::kCheckpoint) report.tables.push_back(ProblemTable(in.census));
  report.tables.push_back(SchemeTable(in, footprints));
  report.tables.push_back(MemoryTable(in, footprints, state));
  report.tables.push_back(StateTable(in, state));
  report.tables.push_back(RooflineTable(in, footprints, state));
  report.tables.push_back(IndexerTable(in, footprints.front()));
  report.tables.push_back(HardwareTable(in));
  if (in.host && in.host_figures) {
    report.tables.push_back(HostMeasurementTable(*in.host, *in.host_figures));
    report.tables.push_back(HostProjectionTable(in, footprints, state));
  }
  report.tables.push_back(DisaggregationTable(in, footprints, state));
  if (!in.expert_ram_gb.empty() && !in.disk_gbps.empty()) {
    report.tables.push_back(
        ExpertCacheTable(in, in.expert_ram_gb, in.disk_gbps, in.expert_memory_gbps, in.expert_hit_rate));
  }
  return report;
}

}  // namespace glint::plan
