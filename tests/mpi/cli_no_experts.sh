#!/usr/bin/env bash
# A rank that holds no routed expert under --expert-memory (docs/distributed.md "Limits", docs/expert-cache.md
# "Several ranks"): 5 ranks for the 4 experts of make-tiny's long-context preset leave rank 4 with none. It has
# nothing to cache, probe or read, says so, and runs the rest of every layer; the greedy ids equal one process's.
# Args: path-to-glint, tests/data dir, mpirun.
set -euo pipefail
glint="$1"
mpirun="$3"
source "$(dirname "${BASH_SOURCE[0]}")/lib/mpi_util.sh"  # $work, fail, ranks

"$glint" make-tiny --preset long-context --out "$work/lc" >/dev/null 2>&1 || fail "make-tiny long-context"
"$glint" convert --model "$work/lc" --out "$work/lcc" >/dev/null 2>&1 || fail "convert"
RUN=(run --model "$work/lcc" --tokens 1,2,3,4,5 --max-tokens 8 --temperature 0 --print-ids --threads 1)
"$glint" "${RUN[@]}" >"$work/one.txt" 2>/dev/null || fail "one process"
ranks 5 "${RUN[@]}" --expert-memory 64M >"$work/five.txt" 2>"$work/five.log" || fail "-np 5: $(tail -5 "$work/five.log")"
cmp -s "$work/one.txt" "$work/five.txt" || fail "-np 5 --expert-memory differs: $(cat "$work/five.txt") vs $(cat "$work/one.txt")"
grep -q "glint rank 4 info: expert cache: this rank holds no routed expert" "$work/five.log" ||
  fail "rank 4 did not say it holds no expert: $(grep 'expert cache' "$work/five.log" | head -5)"
echo "PASS"
