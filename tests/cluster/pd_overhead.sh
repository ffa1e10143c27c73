#!/usr/bin/env bash
# bench/pd_transfer_overhead.sh keeps working (a smoke test, not a measurement: the figures of a shared machine mean
# nothing): 2 requests of 512 tokens on the embedded tiny model from a prefill server on one emulated host to a
# decode server on the other at 10 Gbit/s; its summary must have a phase row per request (both servers' lines found
# and paired) and the overhead line. Arg: path-to-glint. Exits 77 when this machine cannot make hosts.
set -euo pipefail
glint="$1"
source "$(dirname "${BASH_SOURCE[0]}")/lib/cluster_util.sh"

timeout 240 bash "$here/../../../bench/pd_transfer_overhead.sh" --glint "$glint" --prompt-len 512 --requests 2 \
  --out "$work/out" >"$work/overhead.txt" 2>&1 || fail "pd_transfer_overhead.sh: $(tail -20 "$work/overhead.txt")"
rows="$(grep -Ec '^ +[12] +[0-9.]+ +[0-9.]+ +[0-9.]+ +-?[0-9.]+ ' "$work/out/summary.txt")"
[[ "$rows" == 2 ]] || fail "$rows of 2 request rows: $(cat "$work/overhead.txt")"
grep -Eq '^state [0-9,]+ bytes: [0-9.]+ ms on the link; overhead median [0-9.]+ ms' "$work/out/summary.txt" ||
  fail "no overhead line: $(cat "$work/overhead.txt")"
echo "PASS"
