#!/usr/bin/env bash
# Prefill/decode disaggregation against aggregated replicas (docs/disaggregation.md "Measuring", issue 33 item 6), on
# 2 emulated hosts (tests/cluster/hosts.sh) of 1 core each — each host's server pinned with `taskset` to its own
# core inside its namespace — with links shaped to --link-rate, the same model on each (its own copy):
#   pd:         a `--role prefill` server on host 0, a `--role decode` server on host 1, `glint router --prefill
#               --decode` on the machine;
#   aggregated: a `--role both` server on each host, `glint router --replica --replica` on the machine.
# For each request rate, `glint bench` (random workload, token-id prompts, Poisson arrivals at that rate) sends a
# mix of long and short prompts through the router — long prompts arriving while others decode — and the script
# prints per setup and rate: TTFT and TPOT median and p99, total tokens/s, requests that failed, and the long prompts'
# TTFT and the short ones' TPOT apart; PD's TPOT p99 and
# tokens/s over the aggregated ones' (issue 33's targets: ≤ 0.6 and ≥ 0.9); per transferred request, the bytes and
# seconds the decode server's /metrics counted, beside bytes ÷ link rate; the machine's load average at start and
# end. The router and glint bench run on the machine, unpinned (they share its cores with the hosts' servers).
# Root only (namespaces). Never run it on a busy machine: the figures would be the other work's.
#
#   bench/pd_vs_replicas.sh [--glint PATH] [--model DIR] [--link-rate 10gbit] [--rates 0.25,0.5,1]
#       [--long-len 2048] [--short-len 128] [--long-fraction 0.25] [--output-len 128] [--range-ratio 0.5]
#       [--requests 40] [--concurrency 32] [--cpus 0,1] [--threads 1] [--memory 2G] [--max-model-len 4096]
#       [--local-prefill-below N] [--out DIR]
#
# Lengths: --range-ratio r draws short prompts from [r·short, short] and outputs from [r·out, out] (glint bench's
# InferenceX convention; 0.5 with the defaults: 64–128 tokens each); long prompts have exactly --long-len tokens.
# Each rate uses its own prompt seed (no prompt is served from a prefix cache left by an earlier rate); both setups
# get the same prompts at the same rate. Results: OUT/{pd,aggregated}/rate-R/ (glint bench's files), OUT/summary.txt.
set -euo pipefail
here="$(dirname "$(readlink -f "$0")")"
glint="$here/../build/release/src/cli/glint"
[[ -x "$glint" ]] || glint="$here/../build/ci/src/cli/glint"
model="$here/../models/glint-tiny"
link_rate=10gbit rates=0.25,0.5,1 long_len=2048 short_len=128 long_fraction=0.25 output_len=128 range_ratio=0.5
requests=40 concurrency=32 cpus=0,1 threads=1 memory=2G max_model_len=4096 local_prefill_below="" out=pd-vs-replicas
while [[ $# -gt 0 ]]; do
  [[ $# -ge 2 ]] || { echo "pd_vs_replicas.sh: $1 needs a value" >&2; exit 2; }
  case "$1" in
    --glint) glint="$2" ;;
    --model) model="$2" ;;
    --link-rate) link_rate="$2" ;;
    --rates) rates="$2" ;;
    --long-len) long_len="$2" ;;
    --short-len) short_len="$2" ;;
    --long-fraction) long_fraction="$2" ;;
    --output-len) output_len="$2" ;;
    --range-ratio) range_ratio="$2" ;;
    --requests) requests="$2" ;;
    --concurrency) concurrency="$2" ;;
    --cpus) cpus="$2" ;;
    --threads) threads="$2" ;;
    --memory) memory="$2" ;;
    --max-model-len) max_model_len="$2" ;;
    --local-prefill-below) local_prefill_below="$2" ;;
    --out) out="$2" ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
  esac
  shift 2
done
pin=1
router_pid=""
pd_hosts_before_down() { [[ -z "$router_pid" ]] || kill -TERM "$router_pid" 2>/dev/null || true; }
# shellcheck source=bench/lib/pd_hosts.sh disable=SC1091
source "$here/lib/pd_hosts.sh"  # checks the flags; $work, hosts, die, serve
summary="$out/summary.txt"
say() { echo "$*" | tee -a "$summary"; }
: >"$summary"

hosts up 2 "$link_rate" >/dev/null
hosts attach >/dev/null
hosts model "$model" link  # hard links: one copy of a large model in this machine's page cache
link_bits="$(awk -v r="${link_rate,,}" 'BEGIN { m = r ~ /gbit$/ ? 1e9 : 1e6; sub(/[gm]bit$/, "", r); print r * m }')"
say "pd_vs_replicas: link $link_rate, host cores ${cpu_of[*]}, model $model, long $long_len × $long_fraction," \
  "short ≤ $short_len, output ≤ $output_len (range ratio $range_ratio), rates $rates req/s, $requests requests each"
say "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

# route ARGS...: `glint router ARGS` on the machine; sets $router once every backend is healthy.
route() {
  glint_router_log="$work/router.log"
  "$glint" router --port 0 --health-interval 0.5 --no-request-log "$@" >"$glint_router_log" 2>&1 &
  router_pid=$!
  for _ in $(seq 1 300); do grep -qs "routing .* on http://" "$glint_router_log" && break; sleep 0.1; done
  router="http://127.0.0.1:$(sed -n 's|.*routing .* on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$glint_router_log")"
  for _ in $(seq 1 300); do
    curl -s --max-time 5 "$router/health" | python3 -c '
import json, sys
sys.exit(0 if all(b["healthy"] for b in json.load(sys.stdin)["backends"]) else 1)' 2>/dev/null && return
    sleep 0.1
  done
  die "the router's backends are not all healthy: $(curl -s --max-time 5 "$router/health")"
}

stop_all() {
  kill -TERM "$router_pid" 2>/dev/null || true
  wait "$router_pid" 2>/dev/null || true
  router_pid=""
  # shellcheck disable=SC2046
  kill -TERM $(hosts pids | cut -d' ' -f1) 2>/dev/null || true
  for _ in $(seq 1 300); do [[ -z "$(hosts pids)" ]] && break; sleep 0.1; done
  [[ -z "$(hosts pids)" ]] || die "servers still running 30 s after SIGTERM: $(hosts pids)"
}

pd_counters() {
  curl -s --max-time 10 "http://$(hosts address 1):8080/metrics" | awk '
    $1 == "glint:pd_transfers_total" { n = $2 } $1 == "glint:pd_transfer_bytes_total" { b = $2 }
    $1 == "glint:pd_transfer_seconds_total" { s = $2 } $1 == "glint:pd_local_prefills_total" { l = $2 }
    $1 == "glint:pd_transfer_failures_total" { f = $2 }
    END { printf "%d %.0f %.6f %d %d\n", n, b, s, l, f }'
}

# measure SETUP: glint bench at every rate through $router; results to $out/SETUP/rate-R.
measure() {
  local setup="$1" index=0 rate before after
  IFS=, read -ra rate_list <<<"$rates"
  for rate in "${rate_list[@]}"; do
    index=$((index + 1))
    [[ "$setup" == pd ]] && before="$(pd_counters)"
    timeout 3600 "$glint" bench --base-url "$router" --model model --no-progress --prompt-format token-ids \
      --count-tokens logprobs --input-len "$short_len" --long-input-len "$long_len" --long-fraction "$long_fraction" \
      --output-len "$output_len" --range-ratio "$range_ratio" --request-rate "$rate" --arrivals poisson --concurrency "$concurrency" \
      --prompts-per-level "$requests" --warmup-requests 2 --seed "$((1000 + index))" --label "$setup @ $rate/s" \
      --out "$out/$setup/rate-$rate" >"$work/bench.log" 2>&1 || die "glint bench ($setup, $rate/s): $(tail -3 "$work/bench.log")"
    if [[ "$setup" == pd ]]; then
      after="$(pd_counters)"
      echo "$before $after" >"$out/$setup/rate-$rate/pd_counters.txt"
    fi
  done
}

serve 0 prefill info --role prefill
serve 1 decode info --role decode
route --prefill "http://$(hosts address 0):8080" --decode "http://$(hosts address 1):8080" \
  ${local_prefill_below:+--local-prefill-below "$local_prefill_below"}
measure pd
stop_all

serve 0 replica0 info
serve 1 replica1 info
route --replica "http://$(hosts address 0):8080" --replica "http://$(hosts address 1):8080"
measure aggregated
stop_all

python3 - "$out" "$rates" "$link_bits" "$long_len" <<'EOF' | tee -a "$summary"
import csv, json, sys
out, rates, link_bits, long_len = sys.argv[1], sys.argv[2].split(","), float(sys.argv[3]), int(sys.argv[4])
def percentile(values, q):  # linear interpolation between closest ranks, as glint bench's summaries
    if not values:
        return float("nan")
    values = sorted(values)
    x = q * (len(values) - 1)
    i = int(x)
    return values[i] + (values[min(i + 1, len(values) - 1)] - values[i]) * (x - i)
def level(setup, rate):
    results = json.load(open(f"{out}/{setup}/rate-{rate}/results.json"))
    return results["levels"][0]
print(f"{'setup':<11} {'rate/s':>7} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} {'TPOT p99':>9} {'tok/s':>8} {'failed':>6}")
rows = {}
for setup in ("pd", "aggregated"):
    for rate in rates:
        l = level(setup, rate)
        rows[setup, rate] = l
        print(f"{setup:<11} {rate:>7} {l['ttft_ms']['median']:>9.1f} {l['ttft_ms']['p99']:>9.1f} "
              f"{l['tpot_ms']['median']:>9.2f} {l['tpot_ms']['p99']:>9.2f} {l['total_throughput']:>8.1f} "
              f"{l['failed']:>6}")
print("\nBy prompt class (completed requests of requests.csv): long prompts' TTFT, short prompts' TPOT")
print(f"{'setup':<11} {'rate/s':>7} {'long':>5} {'TTFT p50':>9} {'TTFT p99':>9} {'short':>5} {'TPOT p50':>9} {'TPOT p99':>9}")
for setup in ("pd", "aggregated"):
    for rate in rates:
        rows_csv = [r for r in csv.DictReader(open(f"{out}/{setup}/rate-{rate}/requests.csv"))
                    if r["outcome"] == "ok"]
        long_ttft = [float(r["ttft_ms"]) for r in rows_csv if int(r["expected_prompt_tokens"]) == long_len]
        short_tpot = [float(r["tpot_ms"]) for r in rows_csv
                      if int(r["expected_prompt_tokens"]) != long_len and r["tpot_ms"]]
        print(f"{setup:<11} {rate:>7} {len(long_ttft):>5} {percentile(long_ttft, 0.5):>9.1f} "
              f"{percentile(long_ttft, 0.99):>9.1f} {len(short_tpot):>5} {percentile(short_tpot, 0.5):>9.2f} "
              f"{percentile(short_tpot, 0.99):>9.2f}")
print("\nPD / aggregated (targets: TPOT p99 <= 0.6, tokens/s >= 0.9), ms and bytes per transferred request:")
print(f"{'rate/s':>7} {'TPOT p99':>9} {'tok/s':>7} {'transfers':>9} {'local':>5} {'failures':>8} {'bytes':>12} "
      f"{'seconds':>8} {'÷link s':>10}")
for rate in rates:
    pd, agg = rows["pd", rate], rows["aggregated", rate]
    tpot = pd["tpot_ms"]["p99"] / agg["tpot_ms"]["p99"] if agg["tpot_ms"]["p99"] else float("nan")
    tput = pd["total_throughput"] / agg["total_throughput"] if agg["total_throughput"] else float("nan")
    b = [float(x) for x in open(f"{out}/pd/rate-{rate}/pd_counters.txt").read().split()]
    n, nbytes, secs, local, failures = (b[5 + i] - b[i] for i in range(5))
    per_bytes = nbytes / n if n else 0
    per_secs = secs / n if n else 0
    print(f"{rate:>7} {tpot:>9.2f} {tput:>7.2f} {int(n):>9} {int(local):>5} {int(failures):>8} {per_bytes:>12.0f} "
          f"{per_secs:>8.4f} {per_bytes * 8 / link_bits:>10.4f}")
EOF
say "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
say "results: $out"
