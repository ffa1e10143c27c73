#include "cli/distributed.h"

#include <xxhash.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/log.h"
#include "base/table.h"
#include "lockstep/lockstep.h"

namespace glint::cli {
namespace {

std::unique_ptr<Communicator> g_world;
uint64_t g_flags_hash = 0;
bool g_follower_finished = false;
bool g_ranks_agreed_on_error = false;
bool g_leading = false;  // rank 0 past JoinRanks: its LockstepLeader stops the followers when it is destroyed

// What each rank tells the others at start-up (one all-gather of a fixed-size record). The build id comes first so
// that two different binaries, whose records might be laid out differently, are told apart before anything else.
struct RankRecord {
  uint64_t build = 0;    // the glint executable's bytes
  uint64_t flags = 0;    // the command line
  uint64_t config = 0;   // config.json
  uint64_t weights = 0;  // the model directory's files: names, sizes, first 64 KiB (headers)
  uint64_t weight_bytes = 0;
  uint8_t loaded = 0;
  char error[471] = {};  // the load error, truncated
};
static_assert(sizeof(RankRecord) == 512);

// XXH3 of a file's first `limit` bytes (all of it when limit is 0); 0 when it cannot be read.
uint64_t HashFile(const std::string& path, size_t limit) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return 0;
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> buffer(size_t{1} << 20);
  size_t total = 0;
  while (file && (limit == 0 || total < limit)) {
    const size_t want = limit == 0 ? buffer.size() : std::min(buffer.size(), limit - total);
    file.read(buffer.data(), static_cast<std::streamsize>(want));
    const size_t got = static_cast<size_t>(file.gcount());
    if (got == 0) break;
    XXH3_64bits_update(state, buffer.data(), got);
    total += got;
  }
  const uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return hash;
}

// The model directory's identity without reading its weights: each regular file's name, size and first 64 KiB
// (a safetensors or container header lists every tensor's shape and offset).
uint64_t HashModelFiles(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (entry.is_regular_file(error)) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::string summary;
  for (const auto& path : files) {
    summary += StrCat(path.filename().string(), " ", std::filesystem::file_size(path, error), " ",
                      HashFile(path.string(), size_t{64} << 10), "\n");
  }
  return XXH3_64bits(summary.data(), summary.size());
}

RankRecord MakeRecord(const Result<std::unique_ptr<Model>>& loaded, const std::string& dir) {
  RankRecord record;
  record.build = HashFile("/proc/self/exe", 0);
  record.flags = g_flags_hash;
  record.config = HashFile(dir + "/config.json", 0);
  record.weights = HashModelFiles(dir);
  record.loaded = loaded.ok();
  if (loaded.ok()) {
    record.weight_bytes = static_cast<uint64_t>((*loaded)->weight_bytes());
  } else {
    const std::string message = loaded.status().message();
    std::memcpy(record.error, message.data(), std::min(message.size(), sizeof(record.error) - 1));
  }
  return record;
}

// Empty when every rank loaded and matches rank 0; else the message every rank returns.
std::string CompareRecords(const std::vector<RankRecord>& records) {
  std::string failures;
  for (size_t r = 0; r < records.size(); ++r) {
    if (records[r].loaded) continue;
    failures += StrCat(failures.empty() ? "" : "; ", "rank ", r, " could not load its shard: ", records[r].error);
  }
  if (!failures.empty()) return failures + " (every rank stops)";
  std::string differences;
  for (size_t r = 1; r < records.size(); ++r) {
    const RankRecord &mine = records[r], &first = records[0];
    std::vector<std::string> what;
    if (mine.build != first.build) what.push_back("the glint binary");
    if (mine.build == first.build && mine.flags != first.flags) what.push_back("the command-line flags");
    if (mine.build == first.build && mine.config != first.config) what.push_back("the model's config.json");
    if (mine.build == first.build && mine.weights != first.weights) what.push_back("the model's files");
    if (what.empty()) continue;
    std::string list;
    for (size_t i = 0; i < what.size(); ++i) list += (i == 0 ? "" : i + 1 == what.size() ? " and " : ", ") + what[i];
    differences += StrCat(differences.empty() ? "" : "; ", "rank ", r, " differs from rank 0 in ", list);
  }
  if (differences.empty()) return "";
  return differences +
         ": every rank must run the same glint build with the same model and flags "
         "(docs/distributed.md); every rank stops";
}

}  // namespace

Communicator& World() {
  static SingleProcessCommunicator alone;
  return g_world != nullptr ? *g_world : alone;
}

void SetWorld(std::unique_ptr<Communicator> world, int argc, char** argv) {
  g_world = std::move(world);
  std::string line;
  for (int i = 1; i < argc; ++i) line += std::string(argv[i]) + '\0';
  g_flags_hash = XXH3_64bits(line.data(), line.size());
  if (Distributed()) SetLogPrefix(StrCat("rank ", World().rank(), " "));
}

void EndWorld() { g_world.reset(); }

bool Distributed() { return World().size() > 1; }

void AddParallelFlags(CLI::App& command, ParallelFlags& flags) {
  command
      .add_option(
          "--tp", flags.tp,
          "under mpirun: tensor-parallel degree, ranks sharing one copy of attention (KDA, MLA by head) and "
          "the dense MLP and expert columns; both paths (the fast path splits columns in whole int8 scale groups, "
          "docs/distributed.md). Default 1 (attention "
          "replicated on every rank, no collective inside it)")
      ->check(CLI::Range(1, 1 << 16));
  command
      .add_option("--ep", flags.ep,
                  "under mpirun: expert-parallel degree, ranks the routed experts are split over; --tp × --ep "
                  "must equal the number of ranks. Default: the number of ranks (docs/distributed.md)")
      ->check(CLI::Range(1, 1 << 16));
  command.add_flag("--experts-by-id", flags.experts_by_id,
                   "under mpirun with --tp > 1: split the routed experts whole, by id over every rank, while attention "
                   "and the dense MLP stay split by heads and columns over the tp ranks (what vLLM and SGLang call "
                   "expert parallel with tensor-parallel attention; one rank holds the shared expert). Default: every "
                   "expert split by columns over the tp ranks (docs/distributed.md \"Layouts\")");
  command.add_flag("--dp-attention", flags.dp_attention,
                   "under mpirun with --tp 1: each rank runs attention and holds the caches only for the sequences "
                   "rank 0 assigns it; MoE rows are exchanged all-to-all (docs/distributed.md). run, score, "
                   "bench-model and the engine (serve, bench-engine, batch: --memory is then each rank's cache budget, "
                   "and a sequence goes to the rank with the most free cache); not MTP (--speculative), images or "
                   "--expert-memory yet");
  command
      .add_option("--lm-head-split-rows", flags.lm_head_split_rows,
                  "under mpirun with --tp 1 (no --dp-attention): a pass with at most this many rows that want logits "
                  "(decode: one per sequence) computes lm_head split by vocabulary over all ranks, and rank 0 gathers "
                  "the logits; more rows: rank 0 computes it whole. Pays while rows × vocab × 4 bytes cross the link "
                  "faster than a rank reads (N − 1)/N of lm_head (docs/distributed.md \"lm_head\"). 0: never")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
}

Result<ModelParallel> ToModelParallel(const ParallelFlags& flags) {
  if (flags.experts_by_id && flags.tp <= 1) {
    return InvalidArgument(
        "--experts-by-id splits the routed experts whole over the ranks of a --tp > 1 layout; at "
        "--tp 1 (the default) they already are: add --tp N or drop the flag");
  }
  ModelParallel parallel{&World(), flags.tp, flags.ep};
  parallel.dp_attention = flags.dp_attention;
  parallel.whole_experts = flags.experts_by_id;
  parallel.head_split_rows = flags.lm_head_split_rows;
  return parallel;
}

bool FollowerFinished() { return g_follower_finished; }
bool RanksAgreedOnError() { return g_ranks_agreed_on_error; }
bool Leading() { return g_leading; }

const Model& Unwrapped(const Model& model) {
  const auto* leader = dynamic_cast<const LockstepLeader*>(&model);
  return leader != nullptr ? leader->inner() : model;
}

Result<std::unique_ptr<Model>> JoinRanks(Result<std::unique_ptr<Model>> loaded, const std::string& model_dir) {
  if (!Distributed()) return loaded;
  Communicator& comm = World();
  const RankRecord mine = MakeRecord(loaded, model_dir);
  std::vector<RankRecord> records(comm.size());
  GLINT_RETURN_IF_ERROR(comm.AllGather(std::as_bytes(std::span<const RankRecord>(&mine, 1)),
                                       std::as_writable_bytes(std::span<RankRecord>(records))));
  if (const std::string problem = CompareRecords(records); !problem.empty()) {
    g_ranks_agreed_on_error = true;
    return FailedPrecondition(problem);
  }
  std::unique_ptr<Model> model = std::move(loaded).value();
  if (comm.rank() == 0) {
    std::vector<uint64_t> bytes;
    bytes.reserve(records.size());
    for (const RankRecord& record : records) bytes.push_back(record.weight_bytes);
    LogInfo(comm.Describe(), ": ", DescribeShard(model->shard_plan(), model->config()), "\n",
            RenderText(ShardPlanTable(model->shard_plan(), model->config(), bytes)));
    g_leading = true;
    return std::unique_ptr<Model>(std::make_unique<LockstepLeader>(std::move(model), comm));
  }
  LogInfo(DescribeShard(model->shard_plan(), model->config()), "; following rank 0's batch plans");
  // A follower ends when rank 0 says so (or the job is aborted): SIGTERM and SIGINT, which mpirun forwards to
  // every rank, are left to rank 0, whose `glint serve` stops gracefully on them and then stops the followers.
  std::signal(SIGTERM, SIG_IGN);
  std::signal(SIGINT, SIG_IGN);
  GLINT_RETURN_IF_ERROR(RunLockstepFollower(*model, comm));
  g_follower_finished = true;
  return FailedPrecondition("rank ", comm.rank(), " followed rank 0 to the end");
}

}  // namespace glint::cli
