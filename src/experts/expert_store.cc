#include "experts/expert_store.h"

#include <pthread.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <tuple>

#include "base/log.h"
#include "base/timer.h"
#include "packed/fast_convert.h"

namespace glint {
namespace {

// Every routed-expert MoE of the model with the tensor prefix its extents are named by (fast_convert.cc).
std::vector<std::pair<const FastMoeWeights*, std::string>> RoutedMoes(const FastWeights& weights) {
  std::vector<std::pair<const FastMoeWeights*, std::string>> moes;
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    if (weights.layers[l].mlp_kind == MlpKind::kMoe) {
      moes.emplace_back(&weights.layers[l].moe, "layers." + std::to_string(l) + ".moe.");
    }
  }
  if (weights.mtp != nullptr) moes.emplace_back(&weights.mtp->moe, "mtp.moe.");
  return moes;
}

std::vector<const uint8_t*> BlobsOf(const FastMlpWeights& expert) {
  std::vector<const uint8_t*> blobs;
  for (const PackedLinear* m : {&expert.gate_up, &expert.down}) {
    if (m->format == PackedLinear::Format::kInt4) {
      blobs.push_back(m->int4.codes), blobs.push_back(reinterpret_cast<const uint8_t*>(m->int4.scales));
    } else {
      blobs.push_back(m->int8.codes), blobs.push_back(reinterpret_cast<const uint8_t*>(m->int8.scales));
    }
  }
  return blobs;
}

// The reader threads start while the model loads, before `glint serve` blocks SIGTERM/SIGINT for the threads it
// starts: unblocked here, a signal meant for serve's watcher could land on a reader and end the process undrained.
// A reader has no signal to handle: it starts with every signal blocked (inherited, so there is no window).
class SignalsBlockedForNewThreads {
 public:
  SignalsBlockedForNewThreads() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &saved_);
  }
  ~SignalsBlockedForNewThreads() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }

 private:
  sigset_t saved_;
};

}  // namespace

std::string_view ExpertIoName(ExpertIo io) { return io == ExpertIo::kUring ? "uring" : "pread"; }

Result<ExpertIo> ParseExpertIo(std::string_view name) {
  if (name == "pread") return ExpertIo::kPread;
  if (name == "uring") return ExpertIo::kUring;
  return InvalidArgument("--expert-io '", name, "' is not one of pread, uring");
}

FastMlpWeights DiskExpertCache::Rebase(const FastMlpWeights& mapped, const uint8_t* from, uint8_t* to) {
  FastMlpWeights out = mapped;
  auto move = [&](auto* pointer) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(pointer)>>;
    return reinterpret_cast<const T*>(to + (reinterpret_cast<const uint8_t*>(pointer) - from));
  };
  for (PackedLinear* m : {&out.gate_up, &out.down}) {
    m->int8.codes = m->int8.codes ? move(m->int8.codes) : nullptr;
    m->int8.scales = m->int8.scales ? move(m->int8.scales) : nullptr;
    m->int4.codes = m->int4.codes ? move(m->int4.codes) : nullptr;
    m->int4.scales = m->int4.scales ? move(m->int4.scales) : nullptr;
  }
  return out;
}

Result<std::unique_ptr<DiskExpertCache>> DiskExpertCache::Create(
    const FastWeights& weights, const ContainerFile& container, int64_t experts_per_token,
    std::unique_ptr<ExtentReader> reader, const ExpertCacheOptions& options, std::unique_ptr<UringExtentReader> uring) {
  std::unique_ptr<DiskExpertCache> cache(new DiskExpertCache());
  int64_t total_experts = 0;
  for (const auto& [moe, prefix] : RoutedMoes(weights)) {
    Layer layer;
    layer.name = prefix.substr(0, prefix.size() - 1);
    for (size_t e = 0; e < moe->experts.size(); ++e) {
      if (moe->experts[e].gate_up.bytes() == 0) {  // another rank's expert (expert parallelism): never asked for
        layer.experts.emplace_back();
        continue;
      }
      const std::string name = ExpertExtentName(prefix, static_cast<int64_t>(e));
      const ContainerExtent* extent = container.FindExtent(name);
      if (extent == nullptr) {
        return FailedPrecondition("'", container.path(), "' has no extent for routed expert '", name,
                                  "'; re-run `glint convert` to write one");
      }
      Expert expert{extent->offset, extent->bytes, moe->experts[e], *extent};
      for (const uint8_t* blob : BlobsOf(expert.mapped)) {
        const uint64_t offset = container.OffsetOf(blob);
        if (offset < extent->offset || offset >= extent->offset + extent->bytes) {
          return InvalidArgument("routed expert '", name, "' has a tensor outside its extent");
        }
      }
      if (layer.map_base == nullptr) {
        const uint8_t* blob = BlobsOf(expert.mapped)[0];
        layer.map_base = blob - container.OffsetOf(blob);
      }
      cache->slot_bytes_ = std::max(cache->slot_bytes_, extent->bytes);
      cache->routed_bytes_ += extent->bytes;
      layer.experts.push_back(expert);
      ++total_experts;
    }
    cache->layer_of_[moe] = static_cast<int64_t>(cache->layers_.size());
    cache->layers_.push_back(std::move(layer));
  }
  if (cache->layers_.empty()) return InvalidArgument("--expert-memory: this model has no routed experts");
  cache->container_path_ = container.path();
  cache->read_buffer_bytes_ = uring != nullptr ? uring->ring_bytes() : 0;
  const uint64_t minimum = static_cast<uint64_t>(experts_per_token) * cache->slot_bytes_ + cache->read_buffer_bytes_;
  if (options.budget_bytes < minimum) {
    return InvalidArgument("--expert-memory ", options.budget_bytes,
                           " bytes is below one layer's top-k experts: at least ", minimum, " bytes (",
                           experts_per_token, " experts × ", cache->slot_bytes_, " bytes + ", cache->read_buffer_bytes_,
                           " bytes of read buffers, ", (minimum + (uint64_t{1} << 20) - 1) >> 20, "M)");
  }
  // A rank of an expert-parallel run may hold no routed expert at all (2 experts on 3 ranks): no slots, no reads.
  const int64_t slots =
      cache->slot_bytes_ == 0
          ? 0
          : std::min<int64_t>(
                static_cast<int64_t>((options.budget_bytes - cache->read_buffer_bytes_) / cache->slot_bytes_),
                total_experts);
  void* memory = std::aligned_alloc(kExtentAlignment,
                                    slots > 0 ? static_cast<size_t>(slots) * cache->slot_bytes_ : kExtentAlignment);
  if (memory == nullptr) {
    return ResourceExhausted("--expert-memory: cannot allocate ", slots, " expert slots of ", cache->slot_bytes_,
                             " bytes");
  }
  cache->memory_ = {static_cast<uint8_t*>(memory), std::free};
  cache->slots_.resize(slots);
  cache->ranker_.emplace(options.policy, static_cast<int64_t>(cache->layers_.size()), slots);
  for (int64_t s = 0; s < slots; ++s) cache->slots_[s].data = cache->memory_.get() + s * cache->slot_bytes_;
  cache->reader_ = std::move(reader);
  cache->uring_ = std::move(uring);
  const SignalsBlockedForNewThreads blocked;
  if (cache->uring_ != nullptr) {
    cache->readers_.emplace_back([c = cache.get()] { c->UringLoop(); });
  } else {
    for (int r = 0; r < std::max(1, options.readers); ++r)
      cache->readers_.emplace_back([c = cache.get()] { c->ReaderLoop(); });
  }
  return cache;
}

DiskExpertCache::~DiskExpertCache() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  for (std::thread& thread : readers_) thread.join();
}

Status DiskExpertCache::Begin(const FastMoeWeights& moe, std::span<const int32_t> experts,
                              std::span<const int64_t> rows) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto it = layer_of_.find(&moe);
  if (it == layer_of_.end()) return InternalError("expert cache: an MoE layer it does not know");
  if (!wanted_.empty()) return InternalError("expert cache: a pass began before the last one ended");
  if (rows.size() != experts.size())
    return InternalError("expert cache: ", rows.size(), " row counts for ", experts.size(), " experts");
  pass_layer_ = it->second;
  ++passes_;
  for (size_t i = 0; i < experts.size(); ++i) {
    Wanted want{experts[i], rows[i], -1, false, false, Status::Ok()};
    const auto held = slot_of_.find({pass_layer_, experts[i]});
    if (held != slot_of_.end()) {
      Slot& slot = slots_[held->second];
      ++slot.pins;
      UseSlot(slot, rows[i]);
      want.slot = held->second;
      ++stats_.hits;
      if (slot.prefetched) slot.prefetched = false, ++stats_.prefetch_used;
    } else {
      ++stats_.misses;
    }
    wanted_.push_back(std::move(want));
  }
  CancelUnwantedPrefetches();
  Pump(lock);
  return Status::Ok();
}

void DiskExpertCache::CancelUnwantedPrefetches() {
  // A pass's reads must not wait behind guesses it did not need: drop the prefetch reads not yet started.
  for (auto it = read_queue_.begin(); it != read_queue_.end();) {
    Slot& slot = slots_[*it];
    if (!slot.prefetched || slot.pins > 0) {
      ++it;
      continue;
    }
    slot_of_.erase({slot.layer, slot.expert});
    slot.state = SlotState::kEmpty;
    slot.prefetched = false;
    --in_flight_;
    ++stats_.prefetch_cancelled;
    it = read_queue_.erase(it);
  }
}

void DiskExpertCache::Evict(Slot& slot) {
  if (slot.state != SlotState::kReady) return;
  slot_of_.erase({slot.layer, slot.expert});
  if (slot.prefetched) stats_.prefetch_wasted_bytes += layers_[slot.layer].experts[slot.expert].bytes;
  slot.prefetched = false;
}

void DiskExpertCache::Prefetch(const FastMoeWeights& moe, std::span<const int32_t> experts) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto it = layer_of_.find(&moe);
  if (it == layer_of_.end() || !wanted_.empty()) return;  // only between passes, for a layer it holds
  const int64_t layer = it->second;
  // At most half the slots per call, so that one guess cannot flush the cache.
  int64_t budget = static_cast<int64_t>(slots_.size()) / 2;
  bool queued = false;
  for (const int32_t expert : experts) {
    if (budget == 0) break;
    if (expert < 0 || expert >= static_cast<int64_t>(layers_[layer].experts.size())) continue;
    if (slot_of_.count({layer, expert}) != 0) continue;
    const int64_t s = Victim();  // unpinned, not loading (so never this call's own reads), not kept
    if (s < 0) break;
    Slot& slot = slots_[s];
    Evict(slot);
    slot.layer = layer, slot.expert = expert;
    slot.state = SlotState::kLoading;
    slot.pins = 0;
    slot.use = ExpertUse{};  // unused: the first to go if no pass asks for it
    slot.prefetched = true;
    slot_of_[{layer, expert}] = s;
    read_queue_.push_back(s);
    ++in_flight_;
    ++stats_.prefetch_issued;
    --budget;
    queued = true;
  }
  if (queued) queued_.notify_all();
}

void DiskExpertCache::UseSlot(Slot& slot, int64_t rows) {
  if (!ranker_->Use(slot.use, passes_, rows)) return;
  for (Slot& other : slots_) other.use.count /= 2;  // LFU ageing
}

int64_t DiskExpertCache::Victim() const {
  // Ties broken by (layer, expert), as the replay does, so that it predicts the cache exactly.
  int64_t best = -1;
  std::tuple<double, uint64_t, int64_t, int64_t> best_rank;
  for (size_t s = 0; s < slots_.size(); ++s) {
    const Slot& slot = slots_[s];
    if (slot.pins > 0 || slot.state == SlotState::kLoading || slot.kept) continue;
    if (slot.state == SlotState::kEmpty) return static_cast<int64_t>(s);
    const auto [score, last_use] = ranker_->Rank(slot.use, passes_);
    const std::tuple<double, uint64_t, int64_t, int64_t> rank{score, last_use, slot.layer, slot.expert};
    if (best < 0 || rank < best_rank) best = static_cast<int64_t>(s), best_rank = rank;
  }
  return best;
}

void DiskExpertCache::Pump(std::unique_lock<std::mutex>&) {
  bool queued = false;
  for (Wanted& want : wanted_) {
    if (want.slot >= 0 || !want.error.ok() || want.released) continue;
    const int64_t s = Victim();
    if (s < 0) break;
    Slot& slot = slots_[s];
    Evict(slot);
    slot.layer = pass_layer_, slot.expert = want.expert;
    slot.state = SlotState::kLoading;
    slot.pins = 1;
    slot.use = ExpertUse{};
    UseSlot(slot, want.rows);
    slot_of_[{pass_layer_, want.expert}] = s;
    want.slot = s;
    read_queue_.push_back(s);
    ++in_flight_;
    queued = true;
  }
  if (queued) queued_.notify_all();
}

void DiskExpertCache::ReaderLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    queued_.wait(lock, [&] { return stopping_ || !read_queue_.empty(); });
    if (stopping_) return;
    const int64_t s = read_queue_.front();
    read_queue_.pop_front();
    Slot& slot = slots_[s];
    const Expert& expert = layers_[slot.layer].experts[slot.expert];
    lock.unlock();
    Stopwatch watch;
    const std::span<uint8_t> into(slot.data, expert.bytes);
    Status status = ReadExpert(expert, into);
    const bool retried = !status.ok();
    if (retried) status = ReadExpert(expert, into);  // once: a transient error (EIO, a torn read) may pass
    const double seconds = watch.Seconds();
    lock.lock();
    stats_.read_seconds += seconds;
    stats_.retried_reads += retried ? 1 : 0;
    Landed(s, status);
  }
}

Status DiskExpertCache::ReadExpert(const Expert& expert, std::span<uint8_t> into) const {
  GLINT_RETURN_IF_ERROR(reader_->Read(expert.offset, into));
  return VerifyContainerExtent(container_path_, expert.extent, into);
}

void DiskExpertCache::Landed(int64_t s, const Status& status) {
  Slot& slot = slots_[s];
  const Expert& expert = layers_[slot.layer].experts[slot.expert];
  if (status.code() == ErrorCode::kDataLoss) {
    ++stats_.corrupt_reads;
    if (damage_.ok()) {
      damage_ = status;
      LogError("expert cache: ", status.message());
    }
  }
  if (status.ok()) {
    stats_.bytes_read += expert.bytes;
    slot.weights = Rebase(expert.mapped, layers_[slot.layer].map_base + expert.offset, slot.data);
    slot.state = SlotState::kReady;
  } else {  // never handed out: the slot is emptied and the pass that wanted it fails
    ++stats_.failed_reads;
    if (slot.prefetched) ++stats_.prefetch_failed;  // no pass asked for it: nothing fails
    slot.prefetched = false;
    for (Wanted& want : wanted_) {
      if (want.slot != s) continue;
      want.error = status.WithContext(
          StrCat("routed expert ", slot.expert, " of ", layers_[slot.layer].name, " (read failed twice)"));
      want.slot = -1;
    }
    slot_of_.erase({slot.layer, slot.expert});
    slot.state = SlotState::kEmpty;
    slot.pins = 0;
  }
  --in_flight_;
  landed_.notify_all();
}

void DiskExpertCache::UringLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  std::vector<int64_t> retried(slots_.size(), 0);  // per slot: its current read is a retry
  std::vector<UringExtentReader::Completion> done;
  std::vector<int64_t> flying;  // slots submitted and not yet completed
  Status broken;                // the ring failed: every read from then on fails with this
  for (;;) {
    queued_.wait(lock, [&] { return stopping_ || !read_queue_.empty() || !flying.empty(); });
    if (stopping_ && flying.empty()) return;
    while (!stopping_ && !read_queue_.empty() && (static_cast<int>(flying.size()) < uring_->depth() || !broken.ok())) {
      const int64_t s = read_queue_.front();
      read_queue_.pop_front();
      const Expert& expert = layers_[slots_[s].layer].experts[slots_[s].expert];
      const Status submitted =
          broken.ok() ? uring_->Submit(s, expert.offset, std::span<uint8_t>(slots_[s].data, expert.bytes)) : broken;
      if (submitted.ok()) {
        flying.push_back(s);
      } else {
        Landed(s, submitted), retried[s] = 0;
      }
    }
    if (!broken.ok() || flying.empty()) continue;
    lock.unlock();
    Stopwatch watch;
    done.clear();
    const Status waited = uring_->Wait(done);
    // Checked off the lock: a loading slot's layer, expert and bytes change only when it lands.
    for (UringExtentReader::Completion& completion : done) {
      if (!completion.status.ok()) continue;
      const Slot& slot = slots_[static_cast<int64_t>(completion.tag)];
      const Expert& expert = layers_[slot.layer].experts[slot.expert];
      completion.status =
          VerifyContainerExtent(container_path_, expert.extent, std::span<const uint8_t>(slot.data, expert.bytes));
    }
    const double seconds = watch.Seconds();
    lock.lock();
    stats_.read_seconds += seconds;
    if (!waited.ok()) {  // the ring itself failed: the reads in flight and every later one fail with its error
      LogError("expert cache: ", waited.message());
      broken = waited.WithContext("the io_uring expert reader");
      for (int64_t s : flying) Landed(s, broken);
      flying.clear();
      continue;
    }
    for (UringExtentReader::Completion& completion : done) {
      const int64_t s = static_cast<int64_t>(completion.tag);
      flying.erase(std::find(flying.begin(), flying.end(), s));
      if (!completion.status.ok() && retried[s] == 0) {  // once: a transient error (EIO) may pass
        retried[s] = 1;
        ++stats_.retried_reads;
        read_queue_.push_front(s);
        continue;
      }
      retried[s] = 0;
      Landed(s, completion.status);
    }
  }
}

Status DiskExpertCache::NextReady(size_t begin, size_t end, std::vector<size_t>& ready,
                                  std::vector<std::pair<size_t, Status>>& failed, bool wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  end = std::min(end, wanted_.size());
  for (;;) {
    bool waiting = false, loading = false;
    for (size_t i = begin; i < end; ++i) {
      Wanted& want = wanted_[i];
      if (want.handed_out) continue;
      if (!want.error.ok()) {  // reported once, then done with: the caller drops the rows routed to it
        want.handed_out = true;
        failed.emplace_back(i, want.error);
        continue;
      }
      waiting = true;
      if (want.slot < 0) continue;
      if (slots_[want.slot].state == SlotState::kReady) {
        want.handed_out = true;
        ready.push_back(i);
      } else {
        loading = true;
      }
    }
    if (!ready.empty() || !failed.empty() || !waiting || !wait) return Status::Ok();
    if (!loading) {
      Pump(lock);
      bool assigned = false;
      for (size_t i = begin; i < end; ++i) assigned |= !wanted_[i].handed_out && wanted_[i].slot >= 0;
      const bool prefetching =
          std::any_of(slots_.begin(), slots_.end(), [](const Slot& slot) { return slot.state == SlotState::kLoading; });
      if (!assigned && !prefetching) {  // a prefetch read in flight frees its slot when it lands: wait for it
        return InternalError("expert cache: every slot is held by experts of this pass not yet released");
      }
    }
    landed_.wait(lock);
  }
}

const FastMlpWeights& DiskExpertCache::Weights(size_t i) const { return slots_[wanted_[i].slot].weights; }

void DiskExpertCache::Release(size_t i) {
  std::unique_lock<std::mutex> lock(mutex_);
  Wanted& want = wanted_[i];
  if (want.released || want.slot < 0) return;
  want.released = true;
  --slots_[want.slot].pins;
  Pump(lock);
}

void DiskExpertCache::End() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (int64_t s : read_queue_) {  // reads not started: drop them
    Slot& slot = slots_[s];
    slot_of_.erase({slot.layer, slot.expert});
    slot.state = SlotState::kEmpty;
    slot.pins = 0;
    stats_.prefetch_cancelled += slot.prefetched ? 1 : 0;
    slot.prefetched = false;
    --in_flight_;
    for (Wanted& want : wanted_) want.slot = want.slot == s ? -1 : want.slot;
  }
  read_queue_.clear();
  // The pass's own reads (prefetches only run on while nothing waits for them).
  landed_.wait(lock, [&] {
    return std::none_of(wanted_.begin(), wanted_.end(), [&](const Wanted& want) {
      return want.slot >= 0 && slots_[want.slot].state == SlotState::kLoading;
    });
  });
  for (Wanted& want : wanted_) {
    if (want.slot >= 0 && !want.released && slots_[want.slot].pins > 0) --slots_[want.slot].pins;
  }
  wanted_.clear();
  pass_layer_ = -1;
}

Result<double> DiskExpertCache::ProbeReadGbps(uint64_t max_bytes) const {
  std::vector<const Expert*> experts;
  for (const Layer& layer : layers_) {
    for (const Expert& expert : layer.experts) {
      if (expert.bytes > 0) experts.push_back(&expert);  // this rank's (expert parallelism)
    }
  }
  if (experts.empty()) return FailedPrecondition("this rank holds no routed expert to probe");
  std::vector<uint8_t*> buffers;  // empty slots: the probe's reads stay inside the budget
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!wanted_.empty() || in_flight_ > 0) return InternalError("expert cache: the read probe runs before any pass");
    for (const Slot& slot : slots_) {
      if (slot.state == SlotState::kEmpty && static_cast<int>(buffers.size()) < static_cast<int>(readers_.size())) {
        buffers.push_back(slot.data);
      }
    }
  }
  if (buffers.empty()) return FailedPrecondition("expert cache: no empty slot for the read probe");
  const int threads = static_cast<int>(buffers.size());
  const uint64_t per_thread = std::max<uint64_t>(max_bytes / threads, slot_bytes_);
  std::vector<Status> errors(threads);
  std::vector<uint64_t> bytes(threads, 0);
  Stopwatch watch;
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      uint64_t state = 0x9e3779b97f4a7c15ull * (t + 1);
      while (bytes[t] < per_thread && errors[t].ok()) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;  // an LCG: reproducible spread of extents
        const Expert& expert = *experts[(state >> 33) % experts.size()];
        errors[t] = reader_->Read(expert.offset, std::span<uint8_t>(buffers[t], expert.bytes));
        bytes[t] += expert.bytes;
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  const double seconds = watch.Seconds();
  uint64_t total = 0;
  for (int t = 0; t < threads; ++t) {
    GLINT_RETURN_IF_ERROR(errors[t].WithContext("the expert read probe"));
    total += bytes[t];
  }
  return total / seconds / 1e9;
}

ExpertCacheStats DiskExpertCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

Status DiskExpertCache::damage() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return damage_;
}

Result<int64_t> DiskExpertCache::KeepHot(std::span<const std::pair<int64_t, int64_t>> hot) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!wanted_.empty()) return InternalError("expert cache: KeepHot during a pass");
  const int64_t limit = static_cast<int64_t>(slots_.size()) / 2;  // the other half stays with the policy
  int64_t kept = 0;
  for (const auto& [layer, expert] : hot) {
    if (kept >= limit) break;
    if (layer < 0 || layer >= static_cast<int64_t>(layers_.size()) || expert < 0 ||
        expert >= static_cast<int64_t>(layers_[layer].experts.size())) {
      return InvalidArgument("--expert-profile: expert ", expert, " of MoE layer ", layer, " is not in this model");
    }
    if (slot_of_.count({layer, expert}) != 0) continue;
    if (layers_[layer].experts[expert].bytes == 0) continue;  // another rank's (expert parallelism)
    const int64_t s = Victim();
    if (s < 0) break;
    Slot& slot = slots_[s];
    Evict(slot);
    const Expert& e = layers_[layer].experts[expert];
    GLINT_RETURN_IF_ERROR(
        ReadExpert(e, std::span<uint8_t>(slot.data, e.bytes))
            .WithContext(StrCat("--expert-profile: routed expert ", expert, " of ", layers_[layer].name)));
    slot.layer = layer, slot.expert = expert;
    slot.weights = Rebase(e.mapped, layers_[layer].map_base + e.offset, slot.data);
    slot.state = SlotState::kReady;
    slot.kept = true;
    slot_of_[{layer, expert}] = s;
    ++kept;
  }
  return kept;
}

int64_t DiskExpertCache::kept_slots() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::count_if(slots_.begin(), slots_.end(), [](const Slot& slot) { return slot.kept; });
}

int64_t DiskExpertCache::pinned_slots() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::count_if(slots_.begin(), slots_.end(), [](const Slot& slot) { return slot.pins > 0; });
}

int64_t DiskExpertCache::ready_slots() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::count_if(slots_.begin(), slots_.end(), [](const Slot& slot) { return slot.state == SlotState::kReady; });
}

void DiskExpertCache::ResetStats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = ExpertCacheStats{};
}

}  // namespace glint
