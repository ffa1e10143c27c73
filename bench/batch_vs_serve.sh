#!/usr/bin/env bash
# The two targets of batch jobs (docs/batch.md "Figures", docs/performance.md "Batch jobs"), measured on one model
# with one set of requests. Never run it on a busy machine: the figures would be the other work's.
#
#   (a) `glint batch --input REQUESTS --output ...`: total (prompt + generated) tokens/s from its --report, and the
#       prefix-cache hit rate (prompt tokens found in the cache / looked up);
#   (b) `glint serve` driven by `glint bench --requests REQUESTS` at each --concurrency level, a fresh server per
#       level (a cold prefix cache, as the batch has): total tokens/s, hit rate from /metrics; the best level, and
#       the ratio batch / best serve (target ≥ 1.1);
#   (c) online TTFT: `glint bench` at a fixed --online-rate against `glint serve` alone, then again on a fresh
#       server while a large batch (POST /v1/batches) runs; TTFT p50 of both and the ratio (target ≤ 1.3).
#
# REQUESTS is built here: chat requests sharing one long system prompt (so the prefix cache matters), each with its
# own user message, `ignore_eos` so every reply has exactly --output-tokens tokens. Lengths are in words of a
# fixed list (about one token each for GLM's tokenizer; the figures count the tokens the server reports).
#
#   bench/batch_vs_serve.sh [--glint PATH] [--model DIR] [--requests N] [--system-words W] [--user-words W]
#                           [--output-tokens T] [--concurrency 1,2,4,8,16] [--online-rate R] [--online-requests N]
#                           [--online-concurrency C] [--batch-copies K] [--work DIR] [--start-timeout S]
#                           [-- ENGINE FLAGS for serve and batch alike, e.g. --threads 2 --max-seqs 16]
#
# Defaults: the embedded tiny model, 64 requests of 1024 + 32 words and 64 output tokens, levels 1,2,4,8,16,32
# (those above twice the engine's sequence slots are dropped: `glint batch` keeps twice its slots in flight, so that
# a finished sequence's slot is refilled at once; more would only queue), online 16 requests of 256 + 32 words at 0.5/s,
# at most 4 in flight, against a batch of 4 copies of REQUESTS. Results: a table on stdout and summary.json in the
# work directory (kept: --work, else a fresh one under /tmp, printed).
set -euo pipefail
# shellcheck source=bench/lib/serve.sh disable=SC1091
source "$(dirname "$(readlink -f "$0")")/lib/serve.sh"

glint="$(dirname "$(readlink -f "$0")")/../build/release/src/cli/glint"
model=()
requests=64 system_words=1024 user_words=32 output_tokens=64 levels=1,2,4,8,16,32
online_rate=0.5 online_requests=16 online_concurrency=4 online_system_words=256 batch_copies=4
work="" start_timeout=600
engine=()
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d;s/^# \{0,1\}//'; exit 0; }
flags_with_values="--glint --model --requests --system-words --user-words --output-tokens --concurrency --online-rate
  --online-requests --online-concurrency --batch-copies --work --start-timeout"
bad_argument() { echo "batch_vs_serve.sh: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  if [[ $# -lt 2 && " $flags_with_values " == *" $1 "* ]]; then bad_argument "$1 needs a value"; fi
  case "$1" in
    --glint) glint="$2"; shift 2 ;;
    --model) model=(--model "$2"); shift 2 ;;
    --requests) requests="$2"; shift 2 ;;
    --system-words) system_words="$2"; shift 2 ;;
    --user-words) user_words="$2"; shift 2 ;;
    --output-tokens) output_tokens="$2"; shift 2 ;;
    --concurrency) levels="$2"; shift 2 ;;
    --online-rate) online_rate="$2"; shift 2 ;;
    --online-requests) online_requests="$2"; shift 2 ;;
    --online-concurrency) online_concurrency="$2"; shift 2 ;;
    --batch-copies) batch_copies="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --start-timeout) start_timeout="$2"; shift 2 ;;
    --help|-h) usage ;;
    --) shift; engine=("$@"); break ;;
    *) bad_argument "unknown argument '$1' (--help lists them)" ;;
  esac
done
for flag in requests system_words user_words output_tokens online_requests online_concurrency batch_copies \
            start_timeout; do
  [[ "${!flag}" =~ ^[1-9][0-9]{0,6}$ ]] || bad_argument "--${flag//_/-} '${!flag}' must be a positive integer"
done
[[ "$levels" =~ ^[1-9][0-9]{0,3}(,[1-9][0-9]{0,3})*$ ]] ||
  bad_argument "--concurrency '$levels' must be positive integers separated by commas, e.g. 1,2,4"
if ! [[ "$online_rate" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] ||
  ! python3 -c "import sys; sys.exit(0 if float('$online_rate') > 0 else 1)"; then
  bad_argument "--online-rate '$online_rate' must be a positive number of requests per second"
fi
[[ -x "$glint" ]] || bad_argument "no glint binary at $glint (--glint PATH)"
glint="$(readlink -f "$glint")"
for tool in curl python3; do
  command -v "$tool" >/dev/null || bad_argument "needs $tool"
done
[[ -n "$work" ]] || work="$(mktemp -d /tmp/batch_vs_serve.XXXXXX)"
mkdir -p "$work"
work="$(readlink -f "$work")"
export GLINT_CACHE_DIR="$work/cache"
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
die() { echo "batch_vs_serve.sh: $*" >&2; exit 1; }

server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT

# make_requests FILE COUNT SYSTEM_WORDS USER_WORDS SEED: chat requests sharing one system prompt.
make_requests() {
  python3 - "$@" "$output_tokens" <<'EOF'
import json, random, sys
path, count, system_words, user_words, seed, output_tokens = sys.argv[1], *map(int, sys.argv[2:])
words = ("time year people way day man thing woman life child world school state family student group country "
         "problem hand part place case week company system program question work government number night point "
         "home water room mother area money story fact month lot right study book eye job word business issue "
         "side kind head house service friend father power hour game line end member law car city community name "
         "president team minute idea kid body information back parent face others level office door health person "
         "art war history party result change morning reason research girl guy moment air teacher force "
         "education").split()
rng = random.Random(seed)
system = " ".join(rng.choice(words) for _ in range(system_words))
with open(path, "w") as out:
    for i in range(count):
        user = f"Request {i}: " + " ".join(rng.choice(words) for _ in range(user_words))
        body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                "max_tokens": output_tokens, "temperature": 0, "ignore_eos": True}
        out.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                              "body": body}) + "\n")
EOF
}

# start_server NAME: a fresh glint serve with its own batch directory; sets $base and $server_pid.
start_server() {
  local name="$1"
  rm -rf "$work/$name.batches"
  "$glint" serve "${model[@]}" --port 0 --batch-dir "$work/$name.batches" --no-request-log "${engine[@]}" \
    >"$work/$name.log" 2>&1 &
  server_pid=$!
  local port
  port="$(serve_port "$work/$name.log" "$server_pid" "$start_timeout")" ||
    die "glint serve did not start within ${start_timeout}s: $(tail -5 "$work/$name.log")"
  base="http://127.0.0.1:$port"
}
stop_server() {
  serve_stop "$server_pid" || die "glint serve did not stop within 60 s of SIGTERM"
  server_pid=""
}
metric() { curl -sf --max-time 30 "$base/metrics" | awk -v n="$1" '$1 == n { print $2 }' | head -1; }
# json FILE EXPRESSION: a Python expression over the file's JSON `d`.
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
# bench NAME ARGS...: glint bench --requests against $base into $work/NAME.
bench() {
  local name="$1"
  shift
  # Tokens counted by their logprobs: a random-weight model (the bench model) samples tokens that decode to no text.
  "$glint" bench --base-url "$base" --no-progress --count-tokens logprobs --out "$work/$name" "$@" \
    >"$work/$name.txt" 2>&1 ||
    die "glint bench ($name) failed: $(tail -5 "$work/$name.txt")"
  local failed
  failed="$(json "$work/$name/results.json" "sum(l['failed'] for l in d['levels'])")"
  [[ "$failed" == 0 ]] || die "glint bench ($name): $failed requests failed: $(tail -5 "$work/$name.txt")"
}

load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
log "work directory $work; load average $load_start; glint $glint ${model[*]} ${engine[*]}"
make_requests "$work/requests.jsonl" "$requests" "$system_words" "$user_words" 1

# run_batch NAME EXTRA_FLAGS...: glint batch over the requests into $work/NAME.{out,json,log}; checks every answer.
run_batch() {
  local name="$1"
  shift
  "$glint" batch "${model[@]}" --input "$work/requests.jsonl" --output "$work/$name.out" --report "$work/$name.json" \
    "${engine[@]}" "$@" >"$work/$name.log" 2>&1 || die "glint batch failed: $(tail -5 "$work/$name.log")"
  local lines failed
  lines="$(wc -l <"$work/$name.out")"
  [[ "$lines" == "$requests" ]] || die "glint batch answered $lines of $requests requests"
  failed="$(python3 -c "import json,sys; print(sum(json.loads(l)['response'] is None or json.loads(l)['response']['status_code'] != 200 for l in open(sys.argv[1])))" "$work/$name.out")"
  [[ "$failed" == 0 ]] || die "glint batch: $failed requests failed (see $work/$name.out)"
}

# ---- (a) glint batch ----
log "(a) glint batch: $requests requests"
run_batch batch
batch_tps="$(json "$work/batch.json" "d['total_tokens_per_second']")"
batch_hit="$(json "$work/batch.json" "d['prefix_cache_hit_rate']")"
batch_slots="$(sed -n 's/.*the engine runs \([0-9]*\) at once.*/\1/p' "$work/batch.log" | head -1)"

# ---- (b) glint serve under glint bench, a fresh server per level ----
serve_rows=()
best_tps=0 best_level=""
IFS=, read -r -a level_list <<<"$levels"
for level in "${level_list[@]}"; do
  start_server "serve-c$level"
  slots="$(metric glint_state_slots_total)"
  if [[ -n "$slots" ]] && python3 -c "import sys; sys.exit(0 if $level > 2 * float('$slots') else 1)"; then
    log "(b) concurrency $level skipped: the engine runs at most $slots sequences at once, and glint batch keeps" \
      "twice that in flight (more would only queue)"
    stop_server
    continue
  fi
  log "(b) glint serve, glint bench --concurrency $level"
  queries_before="$(metric glint_prefix_cache_queries_total)" hits_before="$(metric glint_prefix_cache_hits_total)"
  bench "serve-c$level" --requests "$work/requests.jsonl" --concurrency "$level"
  queries_after="$(metric glint_prefix_cache_queries_total)" hits_after="$(metric glint_prefix_cache_hits_total)"
  stop_server
  tps="$(json "$work/serve-c$level/results.json" "d['levels'][0]['total_throughput']")"
  hit="$(python3 -c "q=$queries_after-$queries_before; print(($hits_after-$hits_before)/q if q > 0 else 0)")"
  serve_rows+=("$level $tps $hit")
  if python3 -c "import sys; sys.exit(0 if $tps > $best_tps else 1)"; then best_tps="$tps" best_level="$level"; fi
done
[[ -n "$best_level" ]] || die "no serve level ran"

# ---- (a') glint batch at the server's sequence count, when (a) ran at its own default ----
equal_tps="" equal_slots=""
if [[ " ${engine[*]} " != *" --max-seqs "* && -n "$slots" && "$slots" != "$batch_slots" ]]; then
  equal_slots="${slots%.*}"
  log "(a') glint batch --max-seqs $equal_slots (the server's sequences; (a) ran $batch_slots)"
  run_batch batch-equal --max-seqs "$equal_slots"
  equal_tps="$(json "$work/batch-equal.json" "d['total_tokens_per_second']")"
fi

# ---- (c) online TTFT alone, then beside a large batch ----
make_requests "$work/online.jsonl" "$online_requests" "$online_system_words" "$user_words" 2
for _ in $(seq 1 "$batch_copies"); do cat "$work/requests.jsonl"; done |
  python3 -c "
import json, sys
for i, line in enumerate(sys.stdin):
    request = json.loads(line)
    request['custom_id'] = f'b{i}'
    print(json.dumps(request))" >"$work/large_batch.jsonl"
online=(--requests "$work/online.jsonl" --concurrency "$online_concurrency" --request-rate "$online_rate")
log "(c) online alone: $online_requests requests at $online_rate/s"
start_server online-alone
bench online-alone "${online[@]}"
stop_server
start_server online-batch
file_id="$(curl -sf --max-time 300 "$base/v1/files" -F purpose=batch -F "file=@$work/large_batch.jsonl" |
  python3 -c "import json,sys; print(json.load(sys.stdin)['id'])")" || die "upload of the large batch failed"
batch_id="$(curl -sf --max-time 30 "$base/v1/batches" -H 'Content-Type: application/json' \
  -d "{\"input_file_id\": \"$file_id\", \"endpoint\": \"/v1/chat/completions\", \"completion_window\": \"24h\"}" |
  python3 -c "import json,sys; print(json.load(sys.stdin)['id'])")" || die "POST /v1/batches failed"
batch_state() { curl -sf --max-time 30 "$base/v1/batches/$batch_id" | python3 -c "
import json, sys
d = json.load(sys.stdin)
print(d['status'], d['request_counts']['completed'] + d['request_counts']['failed'], d['request_counts']['total'])"; }
for _ in $(seq 1 600); do
  read -r status done_before total <<<"$(batch_state)"
  [[ "$status" == in_progress && "$done_before" -lt "$total" ]] && break
  [[ "$status" == validating || "$status" == in_progress ]] || die "the large batch is $status before the online run"
  sleep 0.1
done
log "(c) online beside batch $batch_id ($total requests, $done_before done at the start)"
bench online-batch "${online[@]}"
read -r status done_after total <<<"$(batch_state)"
# The figure counts only if the batch ran the whole time: it must not have ended during the online run.
batch_ran_throughout=1
[[ "$status" == in_progress && "$done_after" -lt "$total" ]] || batch_ran_throughout=0
curl -sf --max-time 30 -X POST "$base/v1/batches/$batch_id/cancel" >/dev/null || true
stop_server
ttft_alone="$(json "$work/online-alone/results.json" "d['levels'][0]['ttft_ms']['median']")"
ttft_batch="$(json "$work/online-batch/results.json" "d['levels'][0]['ttft_ms']['median']")"
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$work/summary.json" "$batch_tps" "$batch_hit" "$best_level" "$best_tps" "$ttft_alone" "$ttft_batch" \
  "$batch_ran_throughout" "$done_before" "$done_after" "$total" "$load_start" "$load_end" "${batch_slots:-0}" \
  "${equal_slots:-0}" "${equal_tps:-0}" "${serve_rows[@]}" <<'EOF'
import json, sys
(path, batch_tps, batch_hit, best_level, best_tps, ttft_alone, ttft_batch, throughout, done_before, done_after,
 total, load_start, load_end, batch_slots, equal_slots, equal_tps, *rows) = sys.argv[1:]
serve = [dict(zip(("concurrency", "total_tokens_per_second", "prefix_cache_hit_rate"), map(float, row.split())))
         for row in rows]
summary = {
    "load_average_start": load_start, "load_average_end": load_end,
    "batch": {"total_tokens_per_second": float(batch_tps), "prefix_cache_hit_rate": float(batch_hit),
              "sequences": int(batch_slots)},
    "serve": serve, "best_concurrency": int(best_level),
    "throughput_ratio": float(batch_tps) / float(best_tps), "throughput_target": ">= 1.1",
    "online_ttft_p50_ms": {"alone": float(ttft_alone), "beside_batch": float(ttft_batch)},
    "ttft_ratio": float(ttft_batch) / float(ttft_alone), "ttft_target": "<= 1.3",
    "batch_ran_throughout": throughout == "1",
    "batch_requests_done": {"before_online": int(done_before), "after_online": int(done_after), "total": int(total)},
}
if int(equal_slots) > 0:
    summary["batch_at_serve_sequences"] = {"sequences": int(equal_slots),
                                           "total_tokens_per_second": float(equal_tps),
                                           "throughput_ratio": float(equal_tps) / float(best_tps)}
json.dump(summary, open(path, "w"), indent=2)
print(f"load average at start {load_start}, at end {load_end}")
print(f"{'path':<28} {'total tok/s':>12} {'prefix hit':>10}")
print(f"{'glint batch, %d sequences' % int(batch_slots):<28} {float(batch_tps):>12.1f} {float(batch_hit):>10.1%}")
if int(equal_slots) > 0:
    print(f"{'glint batch, %d sequences' % int(equal_slots):<28} {float(equal_tps):>12.1f}")
for row in serve:
    print(f"{'glint serve, concurrency %d' % row['concurrency']:<28} {row['total_tokens_per_second']:>12.1f} "
          f"{row['prefix_cache_hit_rate']:>10.1%}")
print(f"best serve concurrency {best_level}; batch / best serve = {summary['throughput_ratio']:.3f} (target >= 1.1)")
if int(equal_slots) > 0:
    print(f"at the server's {equal_slots} sequences: batch / best serve = "
          f"{summary['batch_at_serve_sequences']['throughput_ratio']:.3f}")
print(f"online TTFT p50: {float(ttft_alone):.1f} ms alone, {float(ttft_batch):.1f} ms beside the batch; "
      f"ratio {summary['ttft_ratio']:.3f} (target <= 1.3)")
if throughout != "1":
    print(f"WARNING: the batch ended during the online run ({done_after} of {total} done): the TTFT ratio is not "
          "the target's; raise --batch-copies")
EOF
log "summary: $work/summary.json"
