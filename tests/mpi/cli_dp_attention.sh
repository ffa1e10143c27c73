#!/usr/bin/env bash
# --dp-attention end to end (docs/distributed.md "Attention data-parallel"): greedy `run` of the trained tiny model
# on 2 and 3 ranks identical to one process; `score` logits of both golden fixtures bit-identical to the replicated
# layout (--ep 2 without it); bench-model decoding several sequences spread over the ranks, with the cache bytes
# of each rank and the all-to-alls reported; and every unsupported combination refused with a message (the engine
# under the flag: cli_dp_engine.sh).
# Args: path-to-glint, tests/data dir, mpirun.
set -euo pipefail
glint="$1"
data="$2"
mpirun="$3"
source "$(dirname "${BASH_SOURCE[0]}")/lib/mpi_util.sh"  # $work, fail, ranks

# ---- run: greedy text identical to one process ----
RUN=(run --prompt "Once upon a time" --max-tokens 24 --temperature 0 --threads 1)
"$glint" "${RUN[@]}" >"$work/run1.txt" 2>/dev/null
for n in 2 3; do
  ranks "$n" "${RUN[@]}" --ep "$n" --dp-attention >"$work/dp$n.txt" 2>"$work/dp$n.log" ||
    fail "run --dp-attention -np $n: $(tail -5 "$work/dp$n.log")"
  cmp -s "$work/run1.txt" "$work/dp$n.txt" || fail "run --dp-attention -np $n differs: $(cat "$work/dp$n.txt") vs $(cat "$work/run1.txt")"
done
grep -q "attention data-parallel (--dp-attention)" "$work/dp2.log" || fail "no dp shard line: $(cat "$work/dp2.log")"

# ---- score: logits bit-identical to the replicated layout on the golden fixtures ----
for fixture in tiny-sparse tiny-dense; do
  SCORE=(score --fast --model "$data/golden/$fixture" --tokens-file "$data/golden/$fixture/tokens.json" --threads 1 --ep 2)
  ranks 2 "${SCORE[@]}" --dump-logits "$work/$fixture-ep.st" >"$work/$fixture-ep.txt" 2>"$work/$fixture-ep.log" ||
    fail "score --ep 2 $fixture: $(tail -5 "$work/$fixture-ep.log")"
  ranks 2 "${SCORE[@]}" --dp-attention --dump-logits "$work/$fixture-dp.st" >"$work/$fixture-dp.txt" \
    2>"$work/$fixture-dp.log" || fail "score --dp-attention $fixture: $(tail -5 "$work/$fixture-dp.log")"
  cmp -s "$work/$fixture-ep.st" "$work/$fixture-dp.st" || fail "score --dp-attention logits differ on $fixture"
  cmp -s "$work/$fixture-ep.txt" "$work/$fixture-dp.txt" || fail "score --dp-attention report differs on $fixture"
done

# ---- bench-model: 3 sequences spread over 2 ranks (2 on rank 0, 1 on rank 1) ----
ranks 2 bench-model --model "$(dirname "$data")/../models/glint-tiny" --prompts 16 --repetitions 1 --batches 3 \
  --steps 2 --context 8 --threads 1 --ep 2 --dp-attention >"$work/bench.txt" 2>"$work/bench.log" ||
  fail "bench-model --dp-attention: $(tail -5 "$work/bench.log")"
grep -Eq "^cache per rank \(--dp-attention\): rank 0 [0-9.e-]+ GB rank 1 [0-9.e-]+ GB" "$work/bench.txt" ||
  fail "no cache per rank: $(cat "$work/bench.txt")"
grep -q "all-to-alls" "$work/bench.txt" || fail "no all-to-alls counted: $(cat "$work/bench.txt")"
# glint plan models the exchange: the same calls per step as counted (its bytes are expectations)
grep -Eq "all-to-alls\),.*glint plan: [0-9]+ \(equal\), ≈" "$work/bench.txt" ||
  fail "glint plan's --dp-attention collectives differ from the counted ones: $(grep collectives "$work/bench.txt")"

# ---- a rank stopped (SIGSTOP) mid-run, inside the all-to-alls: the heartbeat ends every rank, naming it ----
GLINT_PEER_TIMEOUT=2 timeout 60 "$mpirun" "${MPIRUN_LOCAL[@]}" -x GLINT_PEER_TIMEOUT -np 2 "$glint" run \
  --prompt "Once upon a time" --max-tokens 100000 --ignore-eos --temperature 0 --threads 1 --ep 2 --dp-attention >/dev/null 2>"$work/stall.log" &
pid=$!
rank1=""
for _ in $(seq 1 100); do
  rank1="$(rank_pid "$pid" 1)"
  [[ -n "$rank1" ]] && grep -q "following rank 0's batch plans" "$work/stall.log" 2>/dev/null && break
  sleep 0.1
done
[[ -n "$rank1" ]] || fail "rank 1 of the stalled run never started: $(cat "$work/stall.log")"
# loaded, now generating (4,000 tokens took 1.2 s on a quiet Zen 5: the run must outlast the sleep): every step is
# two all-to-alls per MoE layer
sleep 2
kill -STOP "$rank1"
wait_job 20 "a run with rank 1 stopped did not end within 20 s"
[[ "$job_exit" != 0 ]] || fail "a run with rank 1 stopped exited 0"
grep -q "no heartbeat from rank 1" "$work/stall.log" || fail "the stall was not named: $(tail -5 "$work/stall.log")"
for _ in $(seq 1 50); do kill -0 "$rank1" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$rank1" 2>/dev/null; then
  state="$(ps -o stat= -p "$rank1" || true)"
  kill -KILL "$rank1" 2>/dev/null || true
  fail "rank 1 outlived the job by 5 s (state $state)"
fi

# ---- refusals, each with its reason ----
expect_refusal() {
  local what="$1" message="$2"
  shift 2
  if "$@" >"$work/refused.txt" 2>&1; then fail "$what was not refused"; fi
  grep -q -- "$message" "$work/refused.txt" || fail "$what: no '$message' in $(tail -5 "$work/refused.txt")"
}
expect_refusal "one process" "this is one process" "$glint" "${RUN[@]}" --dp-attention
expect_refusal "--tp 2" "it needs --tp 1" ranks 2 "${RUN[@]}" --tp 2 --dp-attention
expect_refusal "--path reference" "fast path only" ranks 2 "${RUN[@]}" --path reference --dp-attention
expect_refusal "--speculative mtp (run through the engine)" "does not run the MTP layer yet" ranks 2 "${RUN[@]}" --dp-attention --speculative mtp

echo "PASS"
