#!/usr/bin/env bash
# bench/batch_vs_serve.sh keeps working (its figures mean nothing here: tiny model, tiny sizes, a shared machine):
#  (a) shellcheck is clean (skipped, with the reason, when shellcheck is absent);
#  (b) every bad invocation exits 2 naming what was wrong, before anything runs;
#  (c) a run on the embedded tiny model with a few requests writes summary.json with every figure: positive
#      throughputs for the batch and each serve level up to twice the engine's 2 sequences (8 is dropped, and said
#      so),
#      the best level among them, the ratios, hit rates in [0, 1] and a positive hit rate for the batch (its
#      requests share a system prompt longer than the checkpoint interval), both TTFT medians, the batch's
#      request counts, the load averages. Bounded: 20–40 s on the shared 2-core machine (7 server starts).
# Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
script=$root/bench/batch_vs_serve.sh
source "$root/tests/cli/lib/serve_util.sh"  # $work (removed at exit), fail

if command -v shellcheck >/dev/null; then
  shellcheck "$script" || fail "shellcheck"
else
  echo "shellcheck not installed: (a) skipped"
fi

bad() {  # bad MESSAGE ARGS...: exits 2 with MESSAGE on stderr
  local message="$1" status=0
  shift
  bash "$script" --glint "$glint" --work "$work/never" "$@" >"$work/bad.log" 2>&1 || status=$?
  [[ $status -eq 2 ]] || fail "$* exited $status, not 2"
  grep -qF -- "$message" "$work/bad.log" || fail "$*: no '$message' in: $(cat "$work/bad.log")"
}
bad "--requests 'x' must be a positive integer" --requests x
bad "--concurrency '1,,2' must be positive integers" --concurrency 1,,2
bad "--online-rate '0' must be a positive number" --online-rate 0
bad "--batch-copies needs a value" --batch-copies
bad "unknown argument '--bogus'" --bogus 1
bad "no glint binary at /nonexistent" --glint /nonexistent
[[ ! -e "$work/never" ]] || fail "a bad invocation made the work directory"

timeout 300 bash "$script" --glint "$glint" --work "$work/run" --requests 6 --system-words 200 --user-words 4 \
  --output-tokens 4 --concurrency 1,2,4,8 --online-requests 3 --online-rate 10 --online-concurrency 2 \
  --batch-copies 30 -- --threads 1 --max-seqs 2 --memory 64M --max-model-len 1024 --checkpoint-interval 64 \
  >"$work/out.txt" 2>"$work/err.txt" || fail "the run failed: $(tail -5 "$work/err.txt")"
grep -q "concurrency 8 skipped: the engine runs at most 2 sequences" "$work/err.txt" ||
  fail "level 8 was not dropped: $(cat "$work/err.txt")"
grep -q "batch / best serve = " "$work/out.txt" || fail "no ratio line: $(cat "$work/out.txt")"
python3 - "$work/run/summary.json" <<'EOF' || fail "summary.json: $(cat "$work/run/summary.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["batch"]["total_tokens_per_second"] > 0
assert 0 < d["batch"]["prefix_cache_hit_rate"] <= 1, "the batch's shared system prompt was never a cache hit"
assert [row["concurrency"] for row in d["serve"]] == [1, 2, 4]
for row in d["serve"]:
    assert row["total_tokens_per_second"] > 0 and 0 <= row["prefix_cache_hit_rate"] <= 1
best = max(d["serve"], key=lambda row: row["total_tokens_per_second"])
assert d["best_concurrency"] == best["concurrency"]
assert abs(d["throughput_ratio"] - d["batch"]["total_tokens_per_second"] / best["total_tokens_per_second"]) < 1e-9
ttft = d["online_ttft_p50_ms"]
assert ttft["alone"] > 0 and ttft["beside_batch"] > 0
assert abs(d["ttft_ratio"] - ttft["beside_batch"] / ttft["alone"]) < 1e-9
counts = d["batch_requests_done"]
assert counts["total"] == 6 * 30 and 0 <= counts["before_online"] <= counts["after_online"] <= counts["total"]
assert len(d["load_average_start"].split()) == 3 and len(d["load_average_end"].split()) == 3
EOF
echo "PASS"
