#!/usr/bin/env bash
# The model commands under mpirun against one process (docs/distributed.md "Tests"): greedy `run` output identical
# for 1, 2 and 3 ranks on the trained tiny model (fast path, with and without --speculative mtp) and on the golden
# tiny-sparse fixture (fp32 reference, 16 experts: 3 ranks split them 6/5/5); `score` figures within the expert-
# parallel tolerance; `bench-model` and `bench-engine` run, print their report once (rank 0 only) and show the
# shard plan; --tp 2 and a wrong --ep are refused with their reasons.
# Args: path-to-glint, tests/data dir, mpirun.
set -euo pipefail
glint="$1"
data="$2"
mpirun="$3"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GLINT_CACHE_DIR="$work/cache"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# ranks N ARGS...: glint ARGS under mpirun -np N (bounded: a hang fails the test instead of stalling ctest).
ranks() {
  local n="$1"
  shift
  timeout 60 "$mpirun" --oversubscribe --allow-run-as-root --mca btl self,vader -np "$n" "$glint" "$@"
}

# ---- run: greedy text identical ----
RUN=(run --prompt "Once upon a time" --max-tokens 24 --temperature 0 --threads 1)
"$glint" "${RUN[@]}" >"$work/run1.txt" 2>/dev/null
for n in 2 3; do
  ranks "$n" "${RUN[@]}" >"$work/run$n.txt" 2>"$work/run$n.log" || fail "run -np $n: $(tail -5 "$work/run$n.log")"
  cmp -s "$work/run1.txt" "$work/run$n.txt" || fail "run -np $n differs: $(cat "$work/run$n.txt") vs $(cat "$work/run1.txt")"
done
grep -q "rank 1 holds routed experts" "$work/run2.log" || fail "no shard line from rank 1: $(cat "$work/run2.log")"
grep -q "Sharding plan: 2 ranks" "$work/run2.log" || fail "no shard plan table"
"$glint" "${RUN[@]}" --speculative mtp >"$work/spec1.txt" 2>/dev/null
cmp -s "$work/run1.txt" "$work/spec1.txt" || fail "speculative output differs on one rank"
ranks 2 "${RUN[@]}" --speculative mtp >"$work/spec2.txt" 2>"$work/spec2.log" || fail "run --speculative mtp -np 2"
cmp -s "$work/run1.txt" "$work/spec2.txt" || fail "run --speculative mtp -np 2 differs: $(cat "$work/spec2.txt")"
grep -q "drafts accepted" "$work/spec2.log" || fail "no speculative summary"

# The fp32 reference on the golden fixture: 16 experts on 3 ranks (6, 5, 5), token ids printed.
GOLDEN=(run --model "$data/golden/tiny-sparse" --path reference --tokens 1,2,3,4,5,6,7 --max-tokens 10 --temperature 0
        --print-ids)
"$glint" "${GOLDEN[@]}" >"$work/golden1.txt" 2>/dev/null
ranks 3 "${GOLDEN[@]}" >"$work/golden3.txt" 2>"$work/golden3.log" || fail "golden run -np 3: $(tail "$work/golden3.log")"
cmp -s "$work/golden1.txt" "$work/golden3.txt" || fail "golden run -np 3 differs"
grep -q "rank 0 holds routed experts 0–5 of 16" "$work/golden3.log" || fail "uneven split not logged"

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
on = [l for l in lines if l.split()[:1] == ["on"]]
assert on and float(on[0].split()[3].rstrip("%")) > 0, on
PY

# ---- refused with reasons ----
ranks 2 "${RUN[@]}" --tp 2 >"$work/tp.txt" 2>&1 && fail "--tp 2 was accepted"
grep -q "tensor parallelism (--tp 2) is not implemented yet" "$work/tp.txt" || fail "--tp 2 message: $(cat "$work/tp.txt")"
ranks 2 "${RUN[@]}" --ep 3 >"$work/ep.txt" 2>&1 && fail "--ep 3 on 2 ranks was accepted"
grep -q "must equal the number of ranks" "$work/ep.txt" || fail "--ep 3 message: $(cat "$work/ep.txt")"
"$glint" "${RUN[@]}" --ep 2 >"$work/ep1.txt" 2>&1 && fail "--ep 2 on one process was accepted"
grep -q "need that many ranks" "$work/ep1.txt" || fail "--ep 2 alone: $(cat "$work/ep1.txt")"
ranks 2 inspect "$data/golden/tiny-dense" >"$work/inspect.txt" 2>&1 && fail "inspect under mpirun was accepted"
grep -q "runs as one process" "$work/inspect.txt" || fail "inspect message: $(cat "$work/inspect.txt")"
echo "PASS"
