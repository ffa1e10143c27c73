#!/usr/bin/env bash
# Attention data-parallel against replicated attention, served (docs/distributed.md "Attention data-parallel"):
# `mpirun -np N glint serve --ep N` with and without --dp-attention on this host (1 thread a rank), each driven by
# `glint bench` at each concurrency (random prompts, tokens counted by their logprobs: the bench model's tokens
# decode to no text), one fresh server per layout; prints each layout's total tokens/s per concurrency, the ratio,
# and what each server says of its cache (its start-up log's cache lines, every rank). Never run it on a busy
# machine — the figures would be the other work's.
#
#   bench/dp_vs_replicated.sh --glint GLINT --model DIR [--ranks 2] [--concurrency 16,64] [--input-len 64]
#                             [--output-len 64] [--prompts 96 (a level)] [--out DIR] [-- SERVE FLAGS, e.g. --memory 2G]
set -euo pipefail
# shellcheck source=bench/lib/serve.sh disable=SC1091
source "$(dirname "$(readlink -f "$0")")/lib/serve.sh"
glint="" model="" ranks=2 concurrency="16,64" input_len=64 output_len=64 prompts=96 out=""
serve_flags=()
while (($#)); do
  case "$1" in
    --glint) glint="$(readlink -f "$2")"; shift 2 ;;
    --model) model="$(readlink -f "$2")"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    --input-len) input_len="$2"; shift 2 ;;
    --output-len) output_len="$2"; shift 2 ;;
    --prompts) prompts="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --) shift; serve_flags=("$@"); break ;;
    -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "dp_vs_replicated.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x "$glint" && -d "$model" ]] || { echo "dp_vs_replicated.sh: --glint BINARY and --model DIR are required" >&2; exit 2; }
work="${out:-$(mktemp -d)}"
mkdir -p "$work"
server_pid=""
trap '[[ -n "$server_pid" ]] && kill -TERM "$server_pid" 2>/dev/null; wait 2>/dev/null || true' EXIT
die() { echo "dp_vs_replicated.sh: $*" >&2; exit 1; }
root=()
[[ "$(id -u)" == 0 ]] && root=(--allow-run-as-root)

# serve NAME FLAGS...: a fresh server of N ranks; sets $base.
serve() {
  local name="$1"
  shift
  mpirun "${root[@]}" --bind-to core -np "$ranks" "$glint" serve --model "$model" --port 0 --threads 1 --ep "$ranks" \
    --no-request-log "$@" "${serve_flags[@]}" >"$work/$name.log" 2>&1 &
  server_pid=$!
  local port
  port="$(serve_port "$work/$name.log" "$server_pid" 300)" ||
    die "$name: glint serve did not start within 300 s: $(tail -5 "$work/$name.log")"
  base="http://127.0.0.1:$port"
}
stop() {
  serve_stop "$server_pid" || die "glint serve did not stop within 60 s of SIGTERM"
  server_pid=""
}

IFS=, read -ra levels <<<"$concurrency"
echo "== $(date -u +%H:%M:%S) load average $(cut -d' ' -f1-3 /proc/loadavg); $ranks ranks × 1 thread; model $model"
for layout in replicated dp; do
  flags=()
  [[ "$layout" == dp ]] && flags=(--dp-attention)
  serve "$layout" "${flags[@]}"
  # The cache each rank holds while the load runs (glint_cache_bytes{rank}, live sequences' slots and blocks): the
  # largest of a sample a second.
  (while kill -0 "$server_pid" 2>/dev/null; do
     curl -sf --max-time 5 "$base/metrics" | grep '^glint_cache_bytes{' || true
     sleep 1
   done >"$work/$layout.cache-samples") &
  sampler=$!
  "$glint" bench --base-url "$base" --no-progress --count-tokens logprobs --workload random --input-len "$input_len" \
    --output-len "$output_len" --concurrency "${levels[@]}" --prompts-per-level "$prompts" --warmup-requests 4 --seed 7 \
    --extra-body '{"temperature":0}' --out "$work/$layout" >"$work/$layout.txt" 2>&1 ||
    die "$layout: glint bench failed: $(tail -5 "$work/$layout.txt")"
  curl -sf --max-time 30 "$base/metrics" >"$work/$layout.metrics" || true
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  stop
  echo "== $layout: cache as the server logged it at start, and the most each rank held under load"
  grep -iE "of cache per rank|per rank|sequences" "$work/$layout.log" | grep -v "prefix cache hit" | sed 's/^/  /' || true
  awk '{ match($0, /rank="[0-9]+"/); r = substr($0, RSTART, RLENGTH); if ($2 > max[r]) max[r] = $2 }
       END { for (r in max) printf "  most held: %s %.3f GB\n", r, max[r] / 1e9 }' "$work/$layout.cache-samples" | sort
done
python3 - "$work" "$concurrency" <<'PY'
import json, sys
work, levels = sys.argv[1], [int(c) for c in sys.argv[2].split(",")]
def rates(layout):
    d = json.load(open(f"{work}/{layout}/results.json"))
    out = {}
    for level in d["levels"]:
        if level.get("failed", 0):
            sys.exit(f"{layout}: {level['failed']} requests failed at concurrency {level.get('concurrency')}")
        out[level["concurrency"]] = level
    return out
rep, dp = rates("replicated"), rates("dp")
print(f"{'concurrency':>12} {'tokens/s (in + out): replicated':>32} {'--dp-attention':>15} {'ratio':>6} "
      f"{'output tokens/s: replicated':>28} {'--dp-attention':>15} {'ratio':>6}")
for c in levels:
    a, b = rep[c]["total_throughput"], dp[c]["total_throughput"]
    x, y = rep[c]["output_throughput"], dp[c]["output_throughput"]
    print(f"{c:>12} {a:>32.1f} {b:>15.1f} {b / a:>5.2f}x {x:>28.1f} {y:>15.1f} {y / x:>5.2f}x")
PY
echo "results in $work"
