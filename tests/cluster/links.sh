#!/usr/bin/env bash
# bench/cluster_links.sh keeps working (a smoke test, not a measurement: the figures of a shared machine mean
# nothing): its quick mode on the tiny model over 2 emulated hosts at 10 Gbit/s prints the collective fit and, for
# the EP, TP and TP + experts-by-id layouts, the one-process baseline and the same layouts over shared memory in
# alternated triplets, and a row per step with the measured step, the plan's collectives and the implied step.
# Args: path-to-glint, path-to-glint_collective_bench. Exits 77 when this machine cannot make hosts or the
# benchmark was not built (GLINT_BUILD_BENCHMARKS).
set -euo pipefail
glint="$1"
collective_bench="$2"
source "$(dirname "${BASH_SOURCE[0]}")/lib/cluster_util.sh"
[[ -x "$collective_bench" ]] || { echo "skipped: $collective_bench not built (GLINT_BUILD_BENCHMARKS=ON)"; exit 77; }

"$glint" convert --model "$here/../../../models/glint-tiny" --out "$work/model-c" >"$work/convert.log" 2>&1 ||
  fail "convert: $(tail -3 "$work/convert.log")"
LAYOUTS="ep tp tp-ep" timeout 240 bash "$here/../../../bench/cluster_links.sh" "$glint" "$collective_bench" "$work/model-c" \
  --quick >"$work/links.txt" 2>&1 || fail "cluster_links.sh: $(tail -20 "$work/links.txt")"
grep -Eq "^glint plan: --link-latency [0-9.]+ --link-bandwidth [0-9.]+$" <(sed 's/^  //' "$work/links.txt") ||
  fail "no collective fit: $(cat "$work/links.txt")"
for header in "EP (--tp 1)" "TP (--tp 2)" "(--tp 2 --experts-by-id)"; do
  grep -qF -- "$header" <(grep "^== 10gbit, .*medians of 1 alternated triplets" "$work/links.txt") ||
    fail "no alternated runs for $header: $(cat "$work/links.txt")"
  rows="$(awk -v h="$header" 'index($0, "== 10gbit, ") == 1 { on = index($0, h) > 0; next } /^==/ { on = 0 } on' \
    "$work/links.txt" | grep -Ec '^  (decode-1|decode-16|prefill-512) +[0-9.]+ ')"
  [[ "$rows" == 3 ]] || fail "$header: $rows of 3 step rows: $(cat "$work/links.txt")"
done
echo "PASS"
