#include "engine/scheduler.h"

#include <algorithm>

namespace glint {

Scheduler::Scheduler(CacheManager& memory, const SchedulerOptions& options)
    : Scheduler(std::vector<CacheManager*>{&memory}, options) {}

Scheduler::Scheduler(std::vector<CacheManager*> partitions, const SchedulerOptions& options)
    : partitions_(std::move(partitions)), memory_(*partitions_.at(0)), options_(options) {
  GLINT_CHECK(options.max_batch_tokens > 0 && options.watermark_blocks >= 0);
  for (const CacheManager* p : partitions_) {
    GLINT_CHECK(p->options().block_tokens == memory_.options().block_tokens &&
                p->prefix_caching() == memory_.prefix_caching() &&
                p->options().checkpoint_interval == memory_.options().checkpoint_interval)
        << "cache partitions of different shapes";
  }
}

SequenceInfo& Scheduler::Mutable(SequenceId id) {
  auto found = sequences_.find(id);
  GLINT_CHECK(found != sequences_.end()) << "unknown sequence " << id;
  return found->second;
}

const SequenceInfo& Scheduler::Get(SequenceId id) const {
  auto found = sequences_.find(id);
  GLINT_CHECK(found != sequences_.end()) << "unknown sequence " << id;
  return found->second;
}

SequenceInfo& Scheduler::NewSequence(SequenceId id, std::vector<int32_t> prompt, int64_t arrival,
                                     std::vector<int32_t> keys, SequencePriority priority) {
  GLINT_CHECK(!Contains(id) && !prompt.empty() && (keys.empty() || keys.size() == prompt.size())) << "sequence " << id;
  SequenceInfo& sequence = sequences_[id];
  sequence.id = id;
  sequence.arrival = arrival;
  sequence.prompt_length = static_cast<int64_t>(prompt.size());
  sequence.tokens = std::move(prompt);
  sequence.keys = std::move(keys);
  sequence.priority = priority;
  return sequence;
}

void Scheduler::Add(SequenceId id, std::vector<int32_t> prompt, int64_t arrival, std::vector<int32_t> keys,
                    SequencePriority priority) {
  waiting_.insert(KeyOf(NewSequence(id, std::move(prompt), arrival, std::move(keys), priority)));
}

void Scheduler::AddChild(SequenceId id, SequenceId parent, int64_t arrival) {
  const SequenceInfo& source = Get(parent);
  GLINT_CHECK(!Contains(id)) << "sequence " << id;
  SequenceInfo& sequence = sequences_[id];
  sequence.id = id;
  sequence.arrival = arrival;
  sequence.prompt_length = source.prompt_length;
  sequence.tokens.assign(source.tokens.begin(), source.tokens.begin() + source.prompt_length);
  if (!source.keys.empty()) sequence.keys.assign(source.keys.begin(), source.keys.begin() + source.prompt_length);
  sequence.status = SequenceStatus::kWaitingForParent;
  sequence.parent = parent;
  sequence.priority = source.priority;
  children_.insert(KeyOf(sequence));
}

std::span<const int32_t> Scheduler::Keys(SequenceId id) const {
  const SequenceInfo& sequence = Get(id);
  return sequence.keys.empty() ? std::span<const int32_t>(sequence.tokens) : std::span<const int32_t>(sequence.keys);
}

int64_t Scheduler::ImageTokens(SequenceId id, int64_t start, int64_t& count, int64_t budget) const {
  return image_cost_ ? image_cost_(id, start, count, budget) : 0;
}

std::vector<SequenceId> Scheduler::Children(SequenceId parent) const {
  std::vector<SequenceId> ids;
  for (const auto& [priority, arrival, id] : children_) {
    if (Get(id).parent == parent) ids.push_back(id);
  }
  return ids;
}

int64_t Scheduler::Coverable(const SequenceInfo& sequence) const {
  const CacheManager& memory = MemoryOf(sequence);
  const int64_t blocks = static_cast<int64_t>(memory.BlockTable(sequence.id).size()) + memory.block_pool().num_free();
  return std::max<int64_t>(blocks * memory.options().block_tokens - sequence.computed, 0);
}

bool Scheduler::AnyFreeSlot() const {
  return std::any_of(partitions_.begin(), partitions_.end(),
                     [](const CacheManager* p) { return p->slot_pool().num_free() > 0; });
}

SequenceId Scheduler::NewestRunningIn(int partition) const {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (Get(std::get<2>(*it)).partition == partition) return std::get<2>(*it);
  }
  return -1;
}

void Scheduler::Preempt(SequenceId id, StepPlan& plan, int64_t& budget) {
  SequenceInfo& sequence = Mutable(id);
  MemoryOf(sequence).Free(id);
  running_.erase(KeyOf(sequence));
  sequence.status = SequenceStatus::kWaiting;
  sequence.computed = 0;
  sequence.drafts = 0;
  ++sequence.preemptions;
  ++preemptions_;
  waiting_.insert(KeyOf(sequence));
  plan.preempted.push_back(id);
  // A sequence scheduled earlier in this step gives its chunk back.
  auto chunk =
      std::find_if(plan.chunks.begin(), plan.chunks.end(), [id](const ScheduledChunk& c) { return c.id == id; });
  if (chunk != plan.chunks.end()) {
    budget += chunk->count + chunk->draft + chunk->image_tokens;
    plan.tokens -= chunk->count + chunk->draft;
    plan.chunks.erase(chunk);
  }
}

void Scheduler::ScheduleRunning(SequencePriority priority, bool decodes, StepPlan& plan, int64_t& budget) {
  const std::vector<OrderKey> order(running_.begin(), running_.end());  // preemption edits running_
  for (const OrderKey& key : order) {
    if (budget == 0) return;
    if (std::get<0>(key) != priority || running_.count(key) == 0) continue;  // or preempted earlier in this step
    const SequenceId id = std::get<2>(key);
    const SequenceInfo& sequence = Get(id);
    const int64_t remaining = static_cast<int64_t>(sequence.tokens.size()) - sequence.computed;
    if (decodes != (remaining == 1)) continue;
    int64_t count = std::min(remaining, budget);
    bool preempted_self = false;
    while (Coverable(sequence) < 1) {  // not even one token's block: make room
      // The newest of its partition (batch ones first): only memory freed there makes room for it.
      const SequenceId victim = NewestRunningIn(sequence.partition);
      Preempt(victim, plan, budget);
      if (victim == id) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) continue;
    count = std::min(count, Coverable(sequence));  // a prefill chunk shrinks to the free blocks
    const int64_t image_tokens = ImageTokens(id, sequence.computed, count, budget);
    if (count == 0) continue;  // it starts at an image the tower cannot run within this step's budget
    // Drafted tokens ride along with a decode as far as there is room for them (the first ones: each is verified
    // after those before it); they never preempt anyone.
    const int64_t draft =
        decodes ? std::max<int64_t>(0, std::min({sequence.drafts, budget - count, Coverable(sequence) - count})) : 0;
    CacheManager& memory = MemoryOf(sequence);
    const bool reserved = memory.Reserve(id, sequence.computed + count + draft);
    GLINT_CHECK(reserved) << "Coverable said there were blocks";
    plan.chunks.push_back({id, sequence.computed, count,
                           sequence.computed + count == static_cast<int64_t>(sequence.tokens.size()),
                           memory.TakeCheckpoints(id, Keys(id), sequence.computed + count), draft, 0, image_tokens});
    plan.tokens += count + draft;
    budget -= count + draft + image_tokens;
  }
}

bool Scheduler::PrefixInFlight(const SequenceInfo& waiting, std::span<const int32_t> keys, int64_t cached) const {
  const int64_t interval = memory_.options().checkpoint_interval;
  if (!memory_.prefix_caching() || interval <= 0) return false;
  for (const OrderKey& key : running_) {
    if (std::get<0>(key) > waiting.priority) break;  // running_ is ordered by priority: the rest are lower
    const SequenceInfo& leader = Get(std::get<2>(key));
    // Past its prompt: what it shares is cached already, or never will be.
    if (leader.computed >= leader.prompt_length) continue;
    const std::span<const int32_t> theirs = Keys(leader.id).first(static_cast<size_t>(leader.prompt_length));
    const auto mismatch = std::mismatch(keys.begin(), keys.end(), theirs.begin(), theirs.end()).first;
    const int64_t shared = mismatch - keys.begin();
    // The leader still computes the shared part, and finishing it will cache at least one checkpoint more than
    // the cache holds now (a hit resumes at a checkpoint).
    if (leader.computed < shared && shared - cached >= interval) return true;
  }
  return false;
}

int64_t Scheduler::AdmissionFit(int partition, const PrefixMatch& match) const {
  const CacheManager& memory = *partitions_[partition];
  int64_t reclaimed = 0;  // matched blocks in the free queue are no longer free once taken
  for (int32_t block : match.blocks) reclaimed += memory.block_pool().ref_count(block) == 0 ? 1 : 0;
  // The watermark keeps room for the partition's running sequences to grow; with none running there it would only
  // block the head.
  const int64_t watermark = NewestRunningIn(partition) < 0 ? 0 : options_.watermark_blocks;
  const int64_t available = memory.block_pool().num_free() - reclaimed - watermark;
  return (static_cast<int64_t>(match.blocks.size()) + available) * memory.options().block_tokens - match.tokens;
}

int Scheduler::ChoosePartition(std::span<const int32_t> keys, int64_t budget, PrefixMatch& match) const {
  const int64_t length = static_cast<int64_t>(keys.size());
  std::vector<PrefixMatch> matches(partitions_.size());
  int hit = -1, roomiest = -1, longest = -1;
  int64_t roomiest_free = -1;
  for (int p = 0; p < num_partitions(); ++p) {
    const CacheManager& memory = *partitions_[p];
    if (memory.slot_pool().num_free() == 0) continue;
    matches[p] = memory.FindPrefix(keys);
    if (longest < 0 || matches[p].tokens > matches[longest].tokens) longest = p;
    if (std::min({length - matches[p].tokens, budget, AdmissionFit(p, matches[p])}) < 1) continue;  // no room
    if (matches[p].tokens > 0 && (hit < 0 || matches[p].tokens > matches[hit].tokens)) hit = p;
    const int64_t free = memory.slot_pool().num_free() * memory.options().slot_bytes +
                         memory.block_pool().num_free() * memory.options().block_bytes;
    if (free > roomiest_free) roomiest = p, roomiest_free = free;  // strictly more: ties to the lowest
  }
  const int chosen = hit >= 0 ? hit : roomiest;
  // No room anywhere: the longest match still says whether the prompt is being computed already (PrefixInFlight).
  const int shown = chosen >= 0 ? chosen : longest;
  if (shown >= 0) match = std::move(matches[shown]);
  return chosen;
}

void Scheduler::Admit(SequencePriority priority, StepPlan& plan, int64_t& budget) {
  // Each waiting sequence looked at costs a prefix lookup (and a disk-tier read): passing over deferred ones is
  // bounded, so a long queue behind one shared prompt (a batch file) costs a few lookups a step, not the queue.
  constexpr int kMaxDeferredPerStep = 8;
  int deferred = 0;
  for (auto next = waiting_.begin(); budget > 0 && next != waiting_.end() && std::get<0>(*next) == priority;) {
    const SequenceId id = std::get<2>(*next);
    SequenceInfo& sequence = Mutable(id);
    if (!AnyFreeSlot()) return;
    const std::span<const int32_t> keys = Keys(id);
    for (CacheManager* p : partitions_) p->LoadPrefixFromDisk(keys);  // a no-op without the disk tier
    PrefixMatch match;
    const int partition = ChoosePartition(keys, budget, match);
    // A sequence whose prompt starts with what another one is computing now waits for it to be cached rather than
    // computing it too (a step's time on a CPU grows with its tokens: two copies of a shared system prompt cost
    // twice, and the second copy would not start sooner). Those behind it may go first.
    if (PrefixInFlight(sequence, keys, match.tokens)) {
      if (++deferred == kMaxDeferredPerStep) return;
      ++next;
      continue;
    }
    if (partition < 0) return;  // head of the line does not fit: nobody behind it goes first
    const int64_t remaining = static_cast<int64_t>(sequence.tokens.size()) - match.tokens;
    int64_t count = std::min({remaining, budget, AdmissionFit(partition, match)});
    const int64_t image_tokens = ImageTokens(id, match.tokens, count, budget);
    if (count < 1) return;
    CacheManager& memory = *partitions_[partition];
    const bool admitted = memory.Admit(id, keys, match, match.tokens + count);
    GLINT_CHECK(admitted) << "the fit said there was memory";
    sequence.partition = partition;
    next = waiting_.erase(next);
    running_.insert(KeyOf(sequence));
    sequence.status = SequenceStatus::kRunning;
    sequence.computed = match.tokens;
    if (!sequence.admitted_before) sequence.prefix_hit_tokens = match.tokens;
    sequence.admitted_before = true;
    plan.admitted.push_back(id);
    plan.chunks.push_back({id, match.tokens, count,
                           match.tokens + count == static_cast<int64_t>(sequence.tokens.size()),
                           memory.TakeCheckpoints(id, keys, match.tokens + count), 0, 0, image_tokens});
    plan.tokens += count;
    budget -= count + image_tokens;
  }
}

void Scheduler::YieldSlotToOnline(StepPlan& plan, int64_t& budget) {
  if (waiting_.empty() || running_.empty() || AnyFreeSlot()) return;
  if (std::get<0>(*waiting_.begin()) != SequencePriority::kOnline) return;
  const OrderKey newest = *std::prev(running_.end());
  if (std::get<0>(newest) != SequencePriority::kBatch) return;
  Preempt(std::get<2>(newest), plan, budget);
}

bool Scheduler::OnlinePresent() const {
  const auto online = [](const auto& set) {
    return !set.empty() && std::get<0>(*set.begin()) == SequencePriority::kOnline;
  };
  return online(running_) || online(waiting_);
}

StepPlan Scheduler::Schedule() {
  StepPlan plan;
  int64_t budget = options_.max_batch_tokens;
  YieldSlotToOnline(plan, budget);
  const size_t yielded = plan.preempted.size();
  // Online sequences take the budget first (their decodes, prefill chunks and admissions), batch ones get the
  // rest. A step that had to preempt for memory admits nobody (memory is short); a slot yielded to an online
  // request is taken by it in this same step.
  ScheduleRunning(SequencePriority::kOnline, /*decodes=*/true, plan, budget);
  const size_t online_decodes = plan.chunks.size();
  ScheduleRunning(SequencePriority::kOnline, /*decodes=*/false, plan, budget);
  if (plan.preempted.size() == yielded) Admit(SequencePriority::kOnline, plan, budget);
  // A step that computes an online prompt is that request's time to first token: batch sequences only decode in
  // it (a token each), rather than filling the budget the prompt left with their own prefill, which would make
  // the step — and the online TTFT — as long as a full-budget step (docs/batch.md "Priority").
  const bool online_prefill = plan.chunks.size() > online_decodes;
  ScheduleRunning(SequencePriority::kBatch, /*decodes=*/true, plan, budget);
  if (online_prefill) return plan;
  // On a CPU a step's time grows with its tokens: a full budget of batch prefill would make every online decode
  // step, and the step a newly arrived online request waits for, that long.
  if (OnlinePresent()) budget = std::min(budget, options_.batch_prefill_beside_online);
  ScheduleRunning(SequencePriority::kBatch, /*decodes=*/false, plan, budget);
  if (plan.preempted.size() == yielded) Admit(SequencePriority::kBatch, plan, budget);
  return plan;
}

void Scheduler::Complete(const StepPlan& plan) {
  for (const ScheduledChunk& chunk : plan.chunks) {
    SequenceInfo& sequence = Mutable(chunk.id);
    GLINT_CHECK(sequence.status == SequenceStatus::kRunning && sequence.computed == chunk.start &&
                chunk.accepted >= 0 && chunk.accepted <= chunk.draft)
        << "sequence " << chunk.id << " changed between Schedule and Complete";
    sequence.computed += chunk.count + chunk.accepted;
    CacheManager& memory = MemoryOf(sequence);
    // With key_next_token a position's key holds the token after it. An export ends at its prompt with no token
    // drawn (the engine that imports the state draws it): its last position is committed there, not here.
    const int64_t known = static_cast<int64_t>(Keys(chunk.id).size()) - memory.KeyExtra();
    GLINT_CHECK(known >= sequence.computed || static_cast<int64_t>(sequence.tokens.size()) == sequence.prompt_length)
        << "sequence " << chunk.id << " computed " << sequence.computed << " positions with no token after them";
    memory.Commit(chunk.id, Keys(chunk.id), std::min(sequence.computed, known));
  }
}

void Scheduler::AppendToken(SequenceId id, int32_t token) {
  SequenceInfo& sequence = Mutable(id);
  sequence.tokens.push_back(token);
  if (!sequence.keys.empty()) sequence.keys.push_back(token);  // generated tokens key as themselves
}

void Scheduler::SetDrafts(SequenceId id, int64_t drafts) {
  SequenceInfo& sequence = Mutable(id);
  GLINT_CHECK(drafts >= 0 && (drafts == 0 || sequence.status == SequenceStatus::kRunning))
      << drafts << " drafts for a sequence not running";
  sequence.drafts = drafts;
}

bool Scheduler::Fork(SequenceId child_id) {
  SequenceInfo& child = Mutable(child_id);
  GLINT_CHECK(child.status == SequenceStatus::kWaitingForParent) << "sequence " << child_id << " is not a child";
  const SequenceInfo& parent = Get(child.parent);
  GLINT_CHECK(parent.status == SequenceStatus::kRunning && parent.computed == parent.prompt_length)
      << "the parent of " << child_id << " has not just computed its prompt";
  children_.erase(KeyOf(child));
  child.parent = -1;
  child.partition = parent.partition;  // it shares the parent's blocks: in the parent's partition or not at all
  if (MemoryOf(parent).Fork(parent.id, child_id)) {
    child.status = SequenceStatus::kRunning;
    child.computed = parent.computed;
    child.admitted_before = true;
    running_.insert(KeyOf(child));
    return true;
  }
  child.status = SequenceStatus::kWaiting;
  child.partition = 0;  // chosen at its admission
  waiting_.insert(KeyOf(child));
  return false;
}

void Scheduler::Finish(SequenceId id) {
  SequenceInfo& sequence = Mutable(id);
  if (MemoryOf(sequence).IsLive(id)) MemoryOf(sequence).Free(id);
  running_.erase(KeyOf(sequence));
  waiting_.erase(KeyOf(sequence));
  children_.erase(KeyOf(sequence));
  sequences_.erase(id);
}

bool Scheduler::Lease(SequenceId id, int64_t tokens) {
  GLINT_CHECK(!Contains(id) && leased_.count(id) == 0 && tokens > 0) << "sequence " << id;
  if (!memory_.Admit(id, {}, PrefixMatch{}, tokens)) return false;
  leased_.insert(id);
  return true;
}

void Scheduler::Import(SequenceId id, std::vector<int32_t> prompt, int64_t arrival, std::vector<int32_t> keys,
                       SequencePriority priority) {
  GLINT_CHECK(leased_.count(id) != 0) << "sequence " << id << " is not leased";
  leased_.erase(id);
  SequenceInfo& sequence = NewSequence(id, std::move(prompt), arrival, std::move(keys), priority);
  sequence.status = SequenceStatus::kRunning;
  sequence.computed = sequence.prompt_length;
  sequence.admitted_before = true;
  running_.insert(KeyOf(sequence));
}

void Scheduler::ReleaseLease(SequenceId id) {
  if (leased_.erase(id) != 0) memory_.Free(id);
}

Status Scheduler::CheckIntegrity() const {
  if (running_.size() + waiting_.size() + children_.size() != sequences_.size()) {
    return InternalError("scheduler: ", running_.size(), " running + ", waiting_.size(), " waiting + ",
                         children_.size(), " children != ", sequences_.size(), " sequences");
  }
  const auto check = [&](const Order& order, SequenceStatus status) -> Status {
    for (const auto& [priority, arrival, id] : order) {
      auto found = sequences_.find(id);
      if (found == sequences_.end() || found->second.arrival != arrival || found->second.priority != priority ||
          found->second.status != status) {
        return InternalError("scheduler: sequence ", id, " is listed in the wrong state");
      }
      const SequenceInfo& s = found->second;
      if (s.partition < 0 || s.partition >= num_partitions()) {
        return InternalError("scheduler: sequence ", id, " is in partition ", s.partition);
      }
      const CacheManager& memory = MemoryOf(s);
      const bool live = memory.IsLive(id);
      if (live != (status == SequenceStatus::kRunning)) {
        return InternalError("scheduler: sequence ", id, " live=", live, " in state ", static_cast<int>(status));
      }
      if (live && (memory.Committed(id) != s.computed || s.computed >= static_cast<int64_t>(s.tokens.size()))) {
        return InternalError("scheduler: sequence ", id, " computed ", s.computed, " of ", s.tokens.size(),
                             " tokens, memory committed ", memory.Committed(id));
      }
      if (!live && (s.computed != 0 || s.drafts > 0)) {
        return InternalError("scheduler: waiting sequence ", id, " has computed tokens or a draft");
      }
      if (s.drafts > 0 && s.computed + 1 != static_cast<int64_t>(s.tokens.size())) {
        return InternalError("scheduler: sequence ", id, " has a draft but is not decoding");
      }
      if (status == SequenceStatus::kWaitingForParent && !Contains(s.parent)) {
        return InternalError("scheduler: sequence ", id, " waits for a parent that is gone");
      }
    }
    return Status::Ok();
  };
  GLINT_RETURN_IF_ERROR(check(running_, SequenceStatus::kRunning));
  GLINT_RETURN_IF_ERROR(check(waiting_, SequenceStatus::kWaiting));
  GLINT_RETURN_IF_ERROR(check(children_, SequenceStatus::kWaitingForParent));
  for (SequenceId id : leased_) {
    if (!memory_.IsLive(id) || Contains(id)) return InternalError("scheduler: leased sequence ", id, " is not held");
  }
  int64_t live = 0;  // a sequence live in its partition is live in no other: the total counts each once
  for (const CacheManager* p : partitions_) live += p->num_live();
  if (live != num_running() + num_leased()) {
    return InternalError("scheduler: ", live, " live sequences in memory, ", num_running(), " running and ",
                         num_leased(), " leased");
  }
  for (const CacheManager* p : partitions_) GLINT_RETURN_IF_ERROR(p->CheckIntegrity());
  return Status::Ok();
}

}  // namespace glint
