// glint bench-expert-io: how fast the routed experts of a container can be read from its drive, the way the expert
// cache reads misses (docs/expert-cache.md "Reads"): whole pseudo-random expert extents with O_DIRECT, at queue
// depths 1..32, through a pool of pread threads and through io_uring from one thread, beside the drive's
// sequential O_DIRECT read in the same run. MB/s, IOPS and the ratio to the sequential read.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "base/file.h"
#include "base/timer.h"
#include "cli/command.h"
#include "io/extent_reader.h"
#include "io/weight_container.h"

namespace glint::cli {
namespace {

struct BenchIoFlags {
  std::string model;
  std::vector<int> depths = {1, 2, 4, 8, 16, 32};
  int64_t mib = 512;  // bytes read per measurement
};

struct Buffer {  // one 4 KiB-aligned read buffer
  explicit Buffer(size_t bytes) : data(static_cast<uint8_t*>(std::aligned_alloc(kExtentAlignment, bytes))) {}
  ~Buffer() { std::free(data); }
  uint8_t* data;
};

struct Figures {
  uint64_t bytes = 0, reads = 0;
  double seconds = 0;
};

// The i-th extent of a reproducible pseudo-random walk (an LCG per stream), as misses of a cache spread.
const ContainerExtent& Pick(const std::vector<ContainerExtent>& extents, uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return extents[(state >> 33) % extents.size()];
}

Result<Figures> PreadRandom(DirectFileReader& reader, const std::vector<ContainerExtent>& extents, uint64_t largest,
                            int threads, uint64_t total) {
  std::vector<Status> errors(threads);
  std::vector<Figures> per(threads);
  Stopwatch watch;
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      Buffer buffer(largest);
      uint64_t state = 0x9e3779b97f4a7c15ull * (t + 1);
      while (per[t].bytes < total / threads && errors[t].ok()) {
        const ContainerExtent& extent = Pick(extents, state);
        errors[t] = reader.Read(extent.offset, std::span<uint8_t>(buffer.data, extent.bytes));
        per[t].bytes += extent.bytes, ++per[t].reads;
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  Figures all{0, 0, watch.Seconds()};
  for (int t = 0; t < threads; ++t) {
    GLINT_RETURN_IF_ERROR(errors[t]);
    all.bytes += per[t].bytes, all.reads += per[t].reads;
  }
  return all;
}

// `extents` read in order when `sequential` (the drive's streaming limit), else pseudo-randomly, `depth` in flight.
Result<Figures> UringReads(UringExtentReader& ring, const std::vector<ContainerExtent>& extents, uint64_t largest,
                           uint64_t total, bool sequential) {
  std::vector<std::unique_ptr<Buffer>> buffers;
  buffers.reserve(ring.depth());
  for (int i = 0; i < ring.depth(); ++i) buffers.push_back(std::make_unique<Buffer>(largest));
  std::vector<int> free_buffers(ring.depth());
  std::iota(free_buffers.begin(), free_buffers.end(), 0);
  uint64_t state = 0x9e3779b97f4a7c15ull, submitted = 0;
  size_t next = 0;
  Figures figures;
  std::vector<UringExtentReader::Completion> done;
  Stopwatch watch;
  while (figures.bytes < total) {
    while (!free_buffers.empty() && submitted < total) {
      const ContainerExtent& extent = sequential ? extents[next++ % extents.size()] : Pick(extents, state);
      const int b = free_buffers.back();
      free_buffers.pop_back();
      GLINT_RETURN_IF_ERROR(ring.Submit(static_cast<uint64_t>(b) << 32 | (extent.bytes >> 12), extent.offset,
                                        std::span<uint8_t>(buffers[b]->data, extent.bytes)));
      submitted += extent.bytes;
    }
    done.clear();
    GLINT_RETURN_IF_ERROR(ring.Wait(done));
    for (const UringExtentReader::Completion& completion : done) {
      GLINT_RETURN_IF_ERROR(completion.status);
      free_buffers.push_back(static_cast<int>(completion.tag >> 32));
      figures.bytes += (completion.tag & 0xffffffffu) << 12, ++figures.reads;
    }
  }
  figures.seconds = watch.Seconds();
  while (ring.in_flight() > 0) {  // reads past the total: drained, not counted
    done.clear();
    GLINT_RETURN_IF_ERROR(ring.Wait(done));
  }
  return figures;
}

// The file cut into 1 MiB extents from its start (the sequential read: the drive's streaming limit).
std::vector<ContainerExtent> SequentialExtents(uint64_t file_bytes) {
  std::vector<ContainerExtent> extents;
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  for (uint64_t offset = 0; offset + kChunk <= file_bytes; offset += kChunk) extents.push_back({"", offset, kChunk});
  return extents;
}

void PrintRow(const char* how, int depth, const Figures& f, double sequential_mbps) {
  const double mbps = f.bytes / f.seconds / 1e6;
  std::printf("| %-6s | %5d | %10.1f | %10.0f | %6.2f |\n", how, depth, mbps, f.reads / f.seconds,
              sequential_mbps > 0 ? mbps / sequential_mbps : 0.0);
}

Status RunBenchExpertIo(const BenchIoFlags& flags) {
  const std::string path = JoinPath(flags.model, kContainerFileName);
  GLINT_ASSIGN_OR_RETURN(ContainerFile container, ContainerFile::Open(path));
  const std::vector<ContainerExtent>& extents = container.extents();
  if (extents.empty()) return InvalidArgument("'", path, "' has no routed-expert extents (a dense model?)");
  uint64_t largest = 0, sum = 0;
  for (const ContainerExtent& extent : extents) largest = std::max(largest, extent.bytes), sum += extent.bytes;
  const uint64_t total = static_cast<uint64_t>(flags.mib) << 20;
  GLINT_ASSIGN_OR_RETURN(std::unique_ptr<DirectFileReader> reader, DirectFileReader::Open(path));
  std::printf("== %s: %zu expert extents, %.3f MB on average, %.3f GB in all; %.0f MiB read per row, O_DIRECT\n",
              path.c_str(), extents.size(), sum / 1e6 / extents.size(), sum / 1e9, static_cast<double>(flags.mib));
  if (sum < 4 * total) {
    std::printf("   (the extents are smaller than 4× the bytes read: the drive's own cache may serve repeats)\n");
  }
  double sequential_mbps = 0;
  {
    GLINT_ASSIGN_OR_RETURN(std::unique_ptr<DirectFileReader> file, DirectFileReader::Open(path));
    GLINT_ASSIGN_OR_RETURN(std::unique_ptr<UringExtentReader> ring, UringExtentReader::Open(std::move(file), 8));
    const std::vector<ContainerExtent> chunks = SequentialExtents(container.size());
    if (!chunks.empty()) {
      GLINT_ASSIGN_OR_RETURN(Figures f, UringReads(*ring, chunks, uint64_t{1} << 20,
                                                   std::min<uint64_t>(total, chunks.size() << 20), true));
      sequential_mbps = f.bytes / f.seconds / 1e6;
    }
  }
  std::printf("== sequential O_DIRECT read (1 MiB blocks, io_uring depth 8): %.1f MB/s (the drive's limit here)\n\n",
              sequential_mbps);
  std::printf("| reader | depth |       MB/s |       IOPS | ÷ seq. |\n|---|---:|---:|---:|---:|\n");
  for (int depth : flags.depths) {
    GLINT_ASSIGN_OR_RETURN(Figures pread, PreadRandom(*reader, extents, largest, depth, total));
    PrintRow("pread", depth, pread, sequential_mbps);
    GLINT_ASSIGN_OR_RETURN(std::unique_ptr<DirectFileReader> file, DirectFileReader::Open(path));
    GLINT_ASSIGN_OR_RETURN(std::unique_ptr<UringExtentReader> ring, UringExtentReader::Open(std::move(file), depth));
    GLINT_ASSIGN_OR_RETURN(Figures uring, UringReads(*ring, extents, largest, total, false));
    PrintRow("uring", depth, uring, sequential_mbps);
  }
  std::printf(
      "\n(pread: `depth` threads each blocking in pread; uring: one thread, `depth` reads in flight. The "
      "page cache is bypassed; run on a quiet machine)\n");
  return Status::Ok();
}

GLINT_REGISTER_COMMAND(
    "bench-expert-io",
    "Benchmark reading routed-expert extents from disk (O_DIRECT): pread threads vs io_uring at queue depths 1..32", 87,
    [](CLI::App& command) -> std::function<Status()> {
      auto flags = std::make_shared<BenchIoFlags>();
      command.add_option("--model", flags->model, "a `glint convert` output directory (model.glint)")
          ->required()
          ->check(CLI::ExistingDirectory);
      command.add_option("--depths", flags->depths, "queue depths (reads in flight)")
          ->delimiter(',')
          ->check(CLI::Range(1, 1024))
          ->capture_default_str();
      command.add_option("--mib", flags->mib, "MiB read per row (and by the sequential read)")
          ->check(CLI::Range(1, 1 << 20))
          ->capture_default_str();
      return [flags] { return RunBenchExpertIo(*flags); };
    });

}  // namespace
}  // namespace glint::cli
