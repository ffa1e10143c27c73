// What a concurrency level sends: sessions of turns, built before the level starts so prompt building (the
// /tokenize round trips) is never inside the measurement.
//
// random: each session is one /v1/completions request with a random-token prompt of a length drawn from the input
//   range and max_tokens drawn from the output range (ignore_eos, so the reply has exactly max_tokens tokens).
// multiturn: each session is an agent: a first user message with a large fresh context (input range), then
//   --turns − 1 more user messages of --turn-input-len tokens, each appended with the previous replies to the same
//   conversation, so every turn's prompt extends the previous one (prefix caching pays off). After every
//   --subagent-every-th turn the session launches --subagents sub-agent sessions at once — short sessions with
//   fresh contexts (--subagent-input-len, --subagent-turns) — waits for them, and passes their replies into its
//   next user message. A burst is never scheduled after the last turn.
// Concurrency counts sessions in flight; during a burst, a session's sub-agents add to the requests in flight.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"
#include "bench/config.h"
#include "bench/lengths.h"
#include "bench/prompts.h"
#include "bench/replay.h"

namespace glint::bench {

using Prompt = std::variant<std::string, std::vector<int32_t>>;  // text, or token ids (token-ids format)

struct SessionPlan;

struct TurnPlan {
  const ReplayRequest* replay = nullptr;  // --requests: the file's request (then user_prompt is unused)
  Prompt user_prompt;                     // the completion prompt (random) or this turn's user message (multiturn)
  int64_t expected_prompt_tokens = -1;    // exact length of a completion prompt; -1 for chat (template-dependent)
  int64_t max_tokens = 0;
  std::vector<SessionPlan> subagents_after;  // burst launched after this turn; replies go into the next turn
};

struct SessionPlan {
  int64_t id = 0;
  double arrival_s = -1;  // --arrivals poisson: when to send it, from its phase's start (-1: i / --request-rate)
  bool subagent = false;
  std::vector<TurnPlan> turns;
};

struct LevelPlan {
  std::vector<SessionPlan> warmup;    // one-turn sessions, not measured
  std::vector<SessionPlan> sessions;  // measured
  int64_t requests = 0;               // measured requests, sub-agent turns included
};

int64_t CountRequests(const SessionPlan& session);

// Builds a level's warm-up and measured sessions. Deterministic for a given seed, concurrency and server tokenizer.
// Stops early with an error when `stop` becomes true (Ctrl-C during prompt building). `on_session` (optional) is
// called after each session is built with (sessions built, sessions in total), warm-ups included.
Result<LevelPlan> PlanLevel(const BenchConfig& config, uint64_t seed, int concurrency, PromptFactory& prompts,
                            const std::atomic<bool>& stop,
                            const std::function<void(int64_t, int64_t)>& on_session = nullptr);

// Poisson arrivals of `rate` requests per second: the first session at 0, then exponential gaps drawn from `rng`.
void AssignPoissonArrivals(double rate, Rng& rng, std::vector<SessionPlan>& sessions);

// A level of --requests: every request of the file once, in file order, each its own one-turn session; the
// warm-up is the file's first `warmups` requests (they warm the prefix cache for the measured ones: 0 by default).
// The plan points into `requests`, which must outlive it.
LevelPlan PlanReplayLevel(const std::vector<ReplayRequest>& requests, int64_t warmups);

}  // namespace glint::bench
