#include "bench/workload.h"

#include <algorithm>
#include <cmath>

namespace glint::bench {
namespace {

constexpr uint64_t kArrivalStream = 0x41'52'52'49'56'41'4c'53;  // "ARRIVALS": a stream of its own per level
constexpr int64_t kFractionSteps = 1'000'000;                   // resolution of --long-fraction

struct Ranges {
  LengthRange input;
  LengthRange output;
};

class Planner {
 public:
  Planner(const BenchConfig& config, const Ranges& ranges, PromptFactory& prompts, const std::atomic<bool>& stop)
      : config_(config), ranges_(ranges), prompts_(prompts), stop_(stop) {}

  Result<SessionPlan> RandomSession(Rng& rng) {
    GLINT_RETURN_IF_ERROR(CheckStop());
    TurnPlan turn;
    // Drawn only when long prompts are asked for, so that runs without them keep their prompts for a seed.
    const bool long_prompt =
        config_.long_input_len > 0 && static_cast<double>(rng.UniformInt(0, kFractionSteps - 1)) <
                                          config_.long_fraction * static_cast<double>(kFractionSteps);
    const int64_t length = long_prompt ? config_.long_input_len : rng.Sample(ranges_.input);
    turn.max_tokens = rng.Sample(ranges_.output);
    turn.expected_prompt_tokens = length;
    if (config_.prompt_format == PromptFormat::kTokenIds) {
      GLINT_ASSIGN_OR_RETURN(turn.user_prompt, prompts_.RandomTokenIds(length, rng));
    } else {
      GLINT_ASSIGN_OR_RETURN(turn.user_prompt, prompts_.ExactLengthText(length, /*count_special_tokens=*/true, rng));
    }
    return NewSession(/*subagent=*/false, {std::move(turn)});
  }

  // A chat session of `turns` turns whose first user message has `first_length` tokens.
  Result<SessionPlan> ChatSession(Rng& rng, bool subagent, int turns, int64_t first_length) {
    std::vector<TurnPlan> plan;
    for (int index = 0; index < turns; ++index) {
      GLINT_RETURN_IF_ERROR(CheckStop());
      TurnPlan turn;
      const int64_t length = index == 0 ? first_length : config_.turn_input_len;
      turn.max_tokens = rng.Sample(ranges_.output);
      GLINT_ASSIGN_OR_RETURN(turn.user_prompt, prompts_.ExactLengthText(length, /*count_special_tokens=*/false, rng));
      const bool burst = !subagent && config_.subagent_every > 0 && config_.subagents > 0 &&
                         (index + 1) % config_.subagent_every == 0 && index + 1 < turns;
      if (burst) {
        for (int agent = 0; agent < config_.subagents; ++agent) {
          GLINT_ASSIGN_OR_RETURN(SessionPlan child, ChatSession(rng, /*subagent=*/true, config_.subagent_turns,
                                                                config_.subagent_input_len));
          turn.subagents_after.push_back(std::move(child));
        }
      }
      plan.push_back(std::move(turn));
    }
    return NewSession(subagent, std::move(plan));
  }

  Result<SessionPlan> MainSession(Rng& rng, int turns) {
    return ChatSession(rng, /*subagent=*/false, turns, rng.Sample(ranges_.input));
  }

 private:
  Status CheckStop() const {
    if (stop_.load()) return FailedPrecondition("interrupted while building prompts");
    return Status::Ok();
  }

  SessionPlan NewSession(bool subagent, std::vector<TurnPlan> turns) {
    SessionPlan session;
    session.id = next_id_++;
    session.subagent = subagent;
    session.turns = std::move(turns);
    return session;
  }

  const BenchConfig& config_;
  const Ranges& ranges_;
  PromptFactory& prompts_;
  const std::atomic<bool>& stop_;
  int64_t next_id_ = 0;
};

}  // namespace

int64_t CountRequests(const SessionPlan& session) {
  int64_t count = 0;
  for (const TurnPlan& turn : session.turns) {
    ++count;
    for (const SessionPlan& child : turn.subagents_after) count += CountRequests(child);
  }
  return count;
}

Result<LevelPlan> PlanLevel(const BenchConfig& config, uint64_t seed, int concurrency, PromptFactory& prompts,
                            const std::atomic<bool>& stop, const std::function<void(int64_t, int64_t)>& on_session) {
  Ranges ranges;
  GLINT_ASSIGN_OR_RETURN(ranges.input,
                         ComputeLengthRange(config.input_len, RangeRatio(config), config.range_convention));
  GLINT_ASSIGN_OR_RETURN(ranges.output,
                         ComputeLengthRange(config.output_len, RangeRatio(config), config.range_convention));
  // Separate streams for warm-up and measured prompts, and per level, so no two share a prefix by construction.
  Rng warmup_rng(MixSeed(seed, 2 * static_cast<uint64_t>(concurrency)));
  Rng measured_rng(MixSeed(seed, 2 * static_cast<uint64_t>(concurrency) + 1));
  Planner planner(config, ranges, prompts, stop);
  const bool random = config.workload == WorkloadKind::kRandom;

  const int64_t warmups = WarmupsForLevel(config, concurrency);
  const int64_t sessions = SessionsForLevel(config, concurrency);
  LevelPlan plan;
  for (int64_t i = 0; i < warmups; ++i) {
    GLINT_ASSIGN_OR_RETURN(SessionPlan session,
                           random ? planner.RandomSession(warmup_rng) : planner.MainSession(warmup_rng, 1));
    plan.warmup.push_back(std::move(session));
    if (on_session) on_session(i + 1, warmups + sessions);
  }
  for (int64_t i = 0; i < sessions; ++i) {
    GLINT_ASSIGN_OR_RETURN(SessionPlan session, random ? planner.RandomSession(measured_rng)
                                                       : planner.MainSession(measured_rng, config.turns));
    plan.requests += CountRequests(session);
    plan.sessions.push_back(std::move(session));
    if (on_session) on_session(warmups + i + 1, warmups + sessions);
  }
  if (config.poisson_arrivals && config.request_rate > 0) {
    Rng arrival_rng(MixSeed(seed ^ kArrivalStream, static_cast<uint64_t>(concurrency)));
    AssignPoissonArrivals(config.request_rate, arrival_rng, plan.sessions);
  }
  return plan;
}

void AssignPoissonArrivals(double rate, Rng& rng, std::vector<SessionPlan>& sessions) {
  double t = 0;
  for (size_t i = 0; i < sessions.size(); ++i) {
    if (i > 0) {
      // Uniform in (0, 1] from the top 53 bits, then an exponential gap of mean 1 / rate.
      const double u = static_cast<double>((rng.Next() >> 11) + 1) * 0x1.0p-53;
      t += -std::log(u) / rate;
    }
    sessions[i].arrival_s = t;
  }
}

LevelPlan PlanReplayLevel(const std::vector<ReplayRequest>& requests, int64_t warmups) {
  const auto session = [](int64_t id, const ReplayRequest& request) {
    TurnPlan turn;
    turn.replay = &request;
    turn.max_tokens = request.max_tokens;
    SessionPlan plan;
    plan.id = id;
    plan.turns.push_back(std::move(turn));
    return plan;
  };
  LevelPlan plan;
  const size_t warmup_count = static_cast<size_t>(std::clamp<int64_t>(warmups, 0, std::ssize(requests)));
  for (size_t i = 0; i < warmup_count; ++i) plan.warmup.push_back(session(static_cast<int64_t>(i), requests[i]));
  for (size_t i = 0; i < requests.size(); ++i) {
    plan.sessions.push_back(session(static_cast<int64_t>(warmup_count + i), requests[i]));
  }
  plan.requests = std::ssize(requests);
  return plan;
}

}  // namespace glint::bench
