#!/usr/bin/env bash
# `score`, `bench-model` and `bench-engine` under mpirun (docs/distributed.md): score figures within the expert-
# parallel tolerance of one process; the benchmarks print their report once (rank 0 only), show the shard plan and
# hit the prefix cache; --expert-memory runs with a budget per rank and the collectives per step equal glint
# plan's, also at --tp 2 (the tp group's collectives counted); --tp 2 with --expert-memory keeps experts whole and
# gives one process's greedy text; a wrong --ep and a one-process command are refused with their reasons.
# Args: path-to-glint, tests/data dir, mpirun.
set -euo pipefail
glint="$1"
data="$2"
mpirun="$3"
source "$(dirname "${BASH_SOURCE[0]}")/lib/mpi_util.sh"  # $work, fail, ranks, rank_pid

RUN=(run --prompt "Once upon a time" --max-tokens 4 --temperature 0 --threads 1)

# ---- score: the figures of one rank within the tolerance ----
SCORE=(score --model "$data/golden/tiny-dense" --tokens-file "$data/golden/tiny-dense/tokens.json"
       --reference "$data/golden/tiny-dense/expected.safetensors")
"$glint" "${SCORE[@]}" >"$work/score1.txt" 2>/dev/null
ranks 2 "${SCORE[@]}" >"$work/score2.txt" 2>"$work/score2.log" || fail "score -np 2: $(tail "$work/score2.log")"
[[ "$(wc -l <"$work/score2.txt")" == "$(wc -l <"$work/score1.txt")" ]] || fail "score printed more than once"
python3 - "$work/score1.txt" "$work/score2.txt" <<'PY' || fail "score -np 2 figures differ"
import sys
one, two = (open(p).read().split("\n")[1:] for p in sys.argv[1:])
for a, b in zip(one, two):
    a, b = a.split(), b.split()
    if not a:
        continue
    assert a[:2] == b[:2], (a, b)
    # mean NLL to 4 decimals: the logits move by ≤ 1e-5 × their std (ExpertParallelTolerance)
    assert abs(float(a[2]) - float(b[2])) <= 2e-4, (a, b)
    if len(a) > 6:
        assert a[6] == b[6] == "100.00%", (a, b)           # top-1 against the golden float64
        assert float(b[5]) <= 1.2e-5, (a, b)               # max/std within the golden bound
PY

# ---- bench-model and bench-engine: one report, from rank 0 ----
ranks 2 bench-model --model "$(dirname "$data")/../models/glint-tiny" --threads 1 --prompts 16 --batches 1,2 --context 8 --steps 2 \
  --repetitions 1 --probe-mib 8 >"$work/bm.txt" 2>"$work/bm.log" || fail "bench-model -np 2: $(tail "$work/bm.log")"
[[ "$(grep -c '^== decode 2 sequences' "$work/bm.txt")" == 1 ]] || fail "bench-model report: $(cat "$work/bm.txt")"
ranks 2 bench-engine --threads 1 --memory 32M --max-seqs 4 --concurrency 2 --repeats 1 --output-len 4 --input-len 16 \
  --conversations 2 --turns 2 --system-tokens 128 --user-tokens 8 --turn-output 4 --checkpoint-interval 64 \
  >"$work/be.txt" 2>"$work/be.log" || fail "bench-engine -np 2: $(tail "$work/be.log")"
grep -q "^shard expert parallel over 2 ranks" "$work/be.txt" || fail "no shard line in the capacity report"
[[ "$(grep -c '^throughput:' "$work/be.txt")" == 1 ]] || fail "bench-engine printed more than once"
# The multi-turn workload hits the prefix cache: checkpoints restored into fresh slots on every rank.
python3 - "$work/be.txt" <<'PY' || fail "no prefix-cache hits under mpirun: $(grep -A3 multi-turn "$work/be.txt")"
import sys
lines = open(sys.argv[1]).read().split("\n")
on = [l for l in lines if l.split()[:1] == ["tail"]]  # the default checkpoint policy's row
assert on and float(on[0].split()[3].rstrip("%")) > 0, on
PY

# ---- refused with reasons ----
# --tp 2 runs on the fast path (bench-model reports once).
ranks 2 bench-model --model "$(dirname "$data")/../models/glint-tiny" --threads 1 --tp 2 --prompts 16 --batches 1,2 \
  --context 8 --steps 2 --repetitions 1 --probe-mib 8 >"$work/bmtp.txt" 2>"$work/bmtp.log" ||
  fail "bench-model --tp 2 -np 2: $(tail "$work/bmtp.log")"
[[ "$(grep -c '^== decode 2 sequences' "$work/bmtp.txt")" == 1 ]] || fail "bench-model --tp 2 report: $(cat "$work/bmtp.txt")"
ranks 2 "${RUN[@]}" --ep 3 >"$work/ep.txt" 2>&1 && fail "--ep 3 on 2 ranks was accepted"
grep -q "must equal the number of ranks" "$work/ep.txt" || fail "--ep 3 message: $(cat "$work/ep.txt")"
# --expert-memory: a budget per rank, each caching its own experts; the collectives line beside the plan's count.
"$glint" convert --model "$(dirname "$data")/../models/glint-tiny" --out "$work/tiny-c" >/dev/null 2>&1 ||
  fail "convert for --expert-memory"
ranks 2 bench-model --model "$work/tiny-c" --threads 1 --expert-memory 64M --prompts 16 --batches 1 --context 8 \
  --steps 2 --repetitions 1 --probe-mib 8 >"$work/em.txt" 2>"$work/em.log" ||
  fail "--expert-memory under 2 ranks: $(tail "$work/em.log")"
grep -q "expert cache: hit rate" "$work/em.txt" || fail "no expert cache line: $(cat "$work/em.txt")"
[[ "$(grep -c 'glint plan: [0-9]* (equal)' "$work/em.txt")" == 2 ]] ||
  fail "collectives differ from the plan: $(grep collectives "$work/em.txt")"
# --tp 2 with --expert-memory: attention split, routed experts whole by id over the ranks (each rank's cache reads
# whole extents); greedy text equal to one process's; the collectives of both communicators equal the plan's.
"$glint" "${RUN[@]}" --model "$work/tiny-c" >"$work/one.txt" 2>"$work/one.log" || fail "run: $(tail "$work/one.log")"
ranks 2 "${RUN[@]}" --model "$work/tiny-c" --tp 2 --expert-memory 64M >"$work/tpem.txt" 2>"$work/tpem.log" ||
  fail "--tp 2 --expert-memory: $(tail "$work/tpem.log")"
cmp -s "$work/one.txt" "$work/tpem.txt" || fail "--tp 2 --expert-memory text differs: $(cat "$work/tpem.txt") vs $(cat "$work/one.txt")"
cat "$work/tpem.txt" "$work/tpem.log" | grep -q "whole experts, by id over every rank" ||
  fail "the shard description does not say experts are whole: $(cat "$work/tpem.log")"
ranks 2 bench-model --model "$work/tiny-c" --threads 1 --tp 2 --prompts 16 --batches 1 --context 8 --steps 2 \
  --repetitions 1 --probe-mib 8 >"$work/bmtpc.txt" 2>"$work/bmtpc.log" || fail "bench-model --tp 2: $(tail "$work/bmtpc.log")"
[[ "$(grep -c 'glint plan: [0-9]* (equal)' "$work/bmtpc.txt")" == 2 ]] ||
  fail "--tp 2 collectives differ from the plan: $(grep collectives "$work/bmtpc.txt")"
"$glint" "${RUN[@]}" --ep 2 >"$work/ep1.txt" 2>&1 && fail "--ep 2 on one process was accepted"
grep -q "need that many ranks" "$work/ep1.txt" || fail "--ep 2 alone: $(cat "$work/ep1.txt")"
ranks 2 inspect "$data/golden/tiny-dense" >"$work/inspect.txt" 2>&1 && fail "inspect under mpirun was accepted"
grep -q "runs as one process" "$work/inspect.txt" || fail "inspect message: $(cat "$work/inspect.txt")"
echo "PASS"
