#!/usr/bin/env bash
# What a prefill/decode transfer adds to a request's time to first token beyond the prefill itself
# (docs/disaggregation.md "What the transfer costs", issue 33's target: ≤ 1.2 × bytes ÷ link rate), on 2 emulated
# hosts (tests/cluster/hosts.sh) with links shaped to --link-rate: a `--role prefill` server on host 0 and a
# `--role decode` server on host 1, each pinned to its own core (--no-pin: not pinned), requests sent one at a time
# straight to the decode server with the header the router would set (X-Glint-Prefill; no router: its hop is not
# the transfer's), each a prompt of --prompt-len distinct
# random token ids (from 100 .. 3999: within every model's vocabulary) and one generated token.
#
# Per request, from the two servers' own clocks (their phase lines: the decode server's at --log-level debug, the
# prefill server's at info): overhead = the decode server's `total` (the request reaching it → its first token)
# minus the prefill server's `queue + compute` (the prompt's first step → the prefill's end), i.e. every
# millisecond the transfer adds — lease, connect, handshake, the prompt's bytes, the state's bytes still on the
# wire after the prefill ended, the import and the first sample. Printed: each request's phases, then the median and
# the largest overhead beside bytes ÷ link rate and the ratio, the state bytes streamed before the prefill ended,
# the kernels' TCP counters of both hosts over the run (`nstat`: retransmissions, loss probes, delayed ACKs), and the
# load average at start and end. Root only (namespaces). Never run it on a busy machine.
#
#   bench/pd_transfer_overhead.sh [--glint PATH] [--model DIR] [--link-rate 10gbit] [--prompt-len 2048]
#       [--requests 12] [--cpus 0,1] [--no-pin] [--threads 1] [--memory 2G] [--max-model-len 4096]
#       [--speculative mtp] [--out DIR]
# --speculative mtp starts both servers with it (the MTP layer's rows and the last hidden row then travel too).
set -euo pipefail
here="$(dirname "$(readlink -f "$0")")"
glint="$here/../build/release/src/cli/glint"
[[ -x "$glint" ]] || glint="$here/../build/ci/src/cli/glint"
model="$here/../models/glint-tiny"
link_rate=10gbit prompt_len=2048 requests=12 cpus=0,1 pin=1 threads=1 memory=2G max_model_len=4096 speculative=none
out=pd-transfer-overhead
while [[ $# -gt 0 ]]; do
  if [[ "$1" == --no-pin ]]; then pin=0; shift; continue; fi
  [[ $# -ge 2 ]] || { echo "pd_transfer_overhead.sh: $1 needs a value" >&2; exit 2; }
  case "$1" in
    --glint) glint="$2" ;;
    --model) model="$2" ;;
    --link-rate) link_rate="$2" ;;
    --prompt-len) prompt_len="$2" ;;
    --requests) requests="$2" ;;
    --cpus) cpus="$2" ;;
    --threads) threads="$2" ;;
    --memory) memory="$2" ;;
    --max-model-len) max_model_len="$2" ;;
    --speculative) speculative="$2" ;;
    --out) out="$2" ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
  esac
  shift 2
done
[[ "$requests" =~ ^[1-9][0-9]*$ && "$prompt_len" =~ ^[1-9][0-9]*$ ]] ||
  { echo "pd_transfer_overhead.sh: --requests and --prompt-len take positive integers" >&2; exit 2; }
# shellcheck source=bench/lib/pd_hosts.sh disable=SC1091
source "$here/lib/pd_hosts.sh"  # checks the flags; $work, hosts, die, serve

hosts up 2 "$link_rate" >/dev/null
hosts model "$model" link
link_bits="$(awk -v r="${link_rate,,}" 'BEGIN { m = r ~ /gbit$/ ? 1e9 : 1e6; sub(/[gm]bit$/, "", r); print r * m }')"
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"

serve 0 prefill info --role prefill --speculative "$speculative"
serve 1 decode debug --role decode --speculative "$speculative"

# ask SEED: one completion of a prompt of $prompt_len random ids (seeded: distinct prompts, no prefix-cache hit),
# sent to the decode server from its own host; prints the client's seconds to the answer.
decode_url="http://$(hosts address 1):8080/v1/completions"
ask() {
  python3 -c '
import json, random, sys
rng = random.Random(int(sys.argv[1]))
print(json.dumps({"model": "model", "prompt": [rng.randrange(100, 4000) for _ in range(int(sys.argv[2]))],
                  "max_tokens": 1, "temperature": 0}))' "$1" "$prompt_len" >"$work/request.json"
  hosts exec 1 curl -s --max-time 900 -o "$work/answer.json" -w '%{time_total}\n' -H 'Content-Type: application/json' \
    -H "X-Glint-Prefill: $(hosts address 0):8081" --data-binary "@$work/request.json" "$decode_url"
  grep -q '"choices"' "$work/answer.json" || die "request $1 failed: $(head -c 400 "$work/answer.json")"
}
ask 1 >/dev/null  # warm-up: first touches of the weights and the pools on both hosts
for k in 0 1; do hosts exec "$k" nstat -n >/dev/null; done  # reset the kernels' counter history
: >"$work/client.txt"
for i in $(seq 1 "$requests"); do ask "$((100 + i))" >>"$work/client.txt"; done
for k in 0 1; do hosts exec "$k" nstat -a 2>/dev/null | awk '$1 ~ /Retrans|LossProbe|DelayedACK|TCPTimeouts/' \
  >"$work/nstat-$k.txt"; done
cp "$work/prefill.log" "$work/decode.log" "$work/client.txt" "$out/"
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out" "$requests" "$link_bits" "$prompt_len" "$link_rate" "$pin" "$load_start" "$load_end" \
  "$work/nstat-0.txt" "$work/nstat-1.txt" <<'EOF' | tee "$out/summary.txt"
import re, statistics, sys
out, n, link_bits, prompt_len, link_rate, pin = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
def phases(text):
    return {k: float(v) for k, v in re.findall(r"(\w+) ([0-9.]+) ms", text)}
# The last n of each server's lines (the warm-up's come first; requests are sent one at a time, so in the same order).
decode = [phases(l.split("state (", 1)[1]) | {"bytes": int(re.search(r"state \((\d+) bytes\)", l).group(1))}
          for l in open(f"{out}/decode.log") if "pd: a " in l and "'s state (" in l][-n:]
prefill = [(phases(l[l.rindex("("):]), int(re.search(r", (\d+) bytes in", l).group(1)),
            int(re.search(r": (\d+) sent before its prefill ended", l).group(1)))
           for l in open(f"{out}/prefill.log") if "transfer plane: the state of a" in l][-n:]
client = [float(x) * 1e3 for x in open(f"{out}/client.txt").read().split()]
if len(decode) != n or len(prefill) != n:
    sys.exit(f"expected {n} phase lines from each server, found {len(decode)} (decode) and {len(prefill)} (prefill)")
print(f"pd_transfer_overhead: {n} requests of {prompt_len} tokens, link {link_rate}, servers "
      f"{'each pinned to one core' if pin == '1' else 'not pinned'}; load average at start {sys.argv[7]}, at end {sys.argv[8]}")
print(f"{'#':>3} {'client':>9} {'decode total':>12} {'prefill q+c':>11} {'overhead':>9} {'lease':>6} {'connect':>7} "
      f"{'handshake':>9} {'stream':>8} {'import':>7} {'p. tail':>7} {'sent before end':>15}")
overheads, before = [], []
for i, (d, (p, sent, sent_before)) in enumerate(zip(decode, prefill)):
    over = d["total"] - p["queue"] - p["compute"]
    overheads.append(over)
    before.append(sent_before / sent)
    print(f"{i + 1:>3} {client[i]:>9.1f} {d['total']:>12.1f} {p['queue'] + p['compute']:>11.1f} {over:>9.2f} "
          f"{d['lease']:>6.2f} {d['connect']:>7.2f} {d['handshake']:>9.2f} {d['stream']:>8.2f} {d['import']:>7.2f} "
          f"{p['tail']:>7.2f} {sent_before / sent:>14.1%}")
state_bytes = decode[0]["bytes"]
on_link = state_bytes * 8 / link_bits * 1e3
median, worst = statistics.median(overheads), max(overheads)
print(f"state {state_bytes:,} bytes: {on_link:.2f} ms on the link; overhead median {median:.2f} ms "
      f"({median / on_link:.2f} × bytes ÷ link), largest {worst:.2f} ms ({worst / on_link:.2f} ×); target ≤ 1.2 ×; "
      f"streamed before the prefill ended: median {statistics.median(before):.1%}")
for k, path in enumerate(sys.argv[9:11]):
    counters = " ".join(f"{a}={b}" for a, b, *_ in (l.split() for l in open(path)))
    print(f"host {k} ({'prefill' if k == 0 else 'decode'}) TCP counters over the run: {counters or 'none non-zero'}")
EOF
