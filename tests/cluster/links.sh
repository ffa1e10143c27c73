#!/usr/bin/env bash
# bench/cluster_links.sh keeps working (a smoke test, not a measurement: the figures of a shared machine mean
# nothing): its quick mode on the tiny model over 2 emulated hosts at 10 Gbit/s prints the collective fit and, for
# the EP and TP layouts, the same layouts over shared memory, and a row per step with the measured step, the plan's
# collectives and the implied step.
# Args: path-to-glint, path-to-glint_collective_bench. Exits 77 when this machine cannot make hosts or the
# benchmark was not built (GLINT_BUILD_BENCHMARKS).
set -euo pipefail
glint="$1"
collective_bench="$2"
source "$(dirname "${BASH_SOURCE[0]}")/lib/cluster_util.sh"
[[ -x "$collective_bench" ]] || { echo "skipped: $collective_bench not built (GLINT_BUILD_BENCHMARKS=ON)"; exit 77; }

"$glint" convert --model "$here/../../../models/glint-tiny" --out "$work/model-c" >"$work/convert.log" 2>&1 ||
  fail "convert: $(tail -3 "$work/convert.log")"
timeout 240 bash "$here/../../../bench/cluster_links.sh" "$glint" "$collective_bench" "$work/model-c" --quick \
  >"$work/links.txt" 2>&1 || fail "cluster_links.sh: $(tail -20 "$work/links.txt")"
grep -Eq "^glint plan: --link-latency [0-9.]+ --link-bandwidth [0-9.]+$" <(sed 's/^  //' "$work/links.txt") ||
  fail "no collective fit: $(cat "$work/links.txt")"
for tp in 1 2; do
  grep -q "^== 10gbit, --tp $tp .*medians of 1 alternated pairs" "$work/links.txt" || fail "no alternated shared-memory runs at --tp $tp: $(cat "$work/links.txt")"
  rows="$(sed -n "/^== 10gbit, --tp $tp /,/^==/p" "$work/links.txt" | grep -Ec '^  (decode-1|decode-16|prefill-512) +[0-9.]+ ')"
  [[ "$rows" == 3 ]] || fail "--tp $tp: $rows of 3 step rows: $(cat "$work/links.txt")"
done
echo "PASS"
