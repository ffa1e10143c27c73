#!/usr/bin/env bash
# Batch jobs (docs/batch.md), black box on the embedded tiny model: the Files and Batches APIs with curl; a server
# killed with SIGKILL mid-batch resumes it on restart and answers every custom_id exactly once; a full disk (a
# small tmpfs, when root) fails the batch with a clear error while online requests still work; hostile inputs
# (a file over the limit, too many files, a repeated custom_id, a file that is not JSONL, an unknown endpoint, a
# line over the body limit); `glint batch` killed mid-run and --resume'd answers every custom_id exactly once.
# Args: path-to-glint, tests/data dir.
set -euo pipefail
[[ -n "${BATCH_TEST_TRACE:-}" ]] && set -x
glint="$1"
source "$(dirname "${BASH_SOURCE[0]}")/lib/serve_util.sh"  # $work, fail, start_server, stop_server

ENGINE=(--memory 128M --max-seqs 4 --max-model-len 512 --served-model-name tiny)
export TIMEFORMAT=""

# make_input FILE COUNT MAX_TOKENS: COUNT chat requests sharing a system prompt, custom_ids r0..r(COUNT-1).
make_input() {
  python3 - "$1" "$2" "$3" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as out:
    for i in range(int(sys.argv[2])):
        body = {"messages": [{"role": "system", "content": "You answer in one short line."},
                             {"role": "user", "content": f"Question number {i}?"}],
                "max_tokens": int(sys.argv[3]), "temperature": 0, "ignore_eos": True}
        out.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                              "body": body}) + "\n")
EOF
}

upload() {  # upload FILE: prints the status; the body goes to $work/body
  curl -s -o "$work/body" -w "%{http_code}" --max-time 60 "$base/v1/files" -F purpose=batch -F "file=@$1"
}
create_batch() {  # create_batch FILE_ID [ENDPOINT]: prints the status
  curl -s -o "$work/body" -w "%{http_code}" --max-time 60 "$base/v1/batches" -H 'Content-Type: application/json' \
    -d "{\"input_file_id\": \"$1\", \"endpoint\": \"${2:-/v1/chat/completions}\", \"completion_window\": \"24h\"}"
}
field() { python3 -c "import json,sys; d=json.load(open('$work/body')); print($1)"; }
batch_field() { curl -s --max-time 10 "$base/v1/batches/$1" >"$work/body"; field "$2"; }
# wait_status ID STATUS...: waits (60 s at most) until the batch is in one of the statuses
wait_status() {
  local id="$1"
  shift
  for _ in $(seq 1 600); do
    local status
    status="$(batch_field "$id" 'd["status"]')"
    for want in "$@"; do [[ "$status" == "$want" ]] && return 0; done
    sleep 0.1
  done
  fail "batch $id is $(cat "$work/body"), expected one of: $*"
}
# exactly_once INPUT RESULTS...: every custom_id of INPUT appears once across the result files, nothing else
exactly_once() {
  python3 - "$@" <<'EOF' || fail "results are not exactly once"
import collections, json, sys
want = [json.loads(line)["custom_id"] for line in open(sys.argv[1]) if line.strip()]
got = collections.Counter()
for path in sys.argv[2:]:
    for line in open(path):
        got[json.loads(line)["custom_id"]] += 1
twice = [k for k, n in got.items() if n != 1]
assert not twice, f"answered more than once: {twice[:5]}"
assert set(got) == set(want), f"missing {sorted(set(want) - set(got))[:5]}, extra {sorted(set(got) - set(want))[:5]}"
print(f"{len(want)} custom_ids, each answered once")
EOF
}

# ---- restart after SIGKILL mid-batch ----
dir="$work/batches"
make_input "$work/in.jsonl" 100 48
start_server "${ENGINE[@]}" --batch-dir "$dir" --batch-concurrency 1 --max-body-bytes 100000
[[ "$(upload "$work/in.jsonl")" == 200 ]] || fail "upload: $(cat "$work/body")"
file_id="$(field 'd["id"]')"
[[ "$(stat -c %a "$dir")" == 700 ]] || fail "the batch directory is not 0700"
[[ "$(create_batch "$file_id")" == 200 ]] || fail "create: $(cat "$work/body")"
batch_id="$(field 'd["id"]')"
# Killed as soon as the journal holds 3 results (read directly: a poll through the API is slower than the model).
journal="$dir/$batch_id.journal"
for _ in $(seq 1 3000); do
  [[ -f "$journal" && "$(wc -l <"$journal")" -ge 3 ]] && break
  sleep 0.01
done
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
[[ -f "$journal" ]] || fail "the batch ended before the kill (no journal left)"
journal_lines="$(wc -l <"$dir/$batch_id.journal")"
[[ "$journal_lines" -ge 3 && "$journal_lines" -lt 100 ]] || fail "journal has $journal_lines results at the kill"
start_server "${ENGINE[@]}" --batch-dir "$dir" --batch-concurrency 4 --max-body-bytes 100000
grep -q "resuming 1 unfinished batch" "$work/server.log" || fail "no resume in the log"
wait_status "$batch_id" completed
[[ "$(field 'd["request_counts"]["total"]')" == 100 ]] || fail "counts: $(cat "$work/body")"
[[ "$(field 'd["request_counts"]["completed"]')" == 100 ]] || fail "counts: $(cat "$work/body")"
output_id="$(field 'd["output_file_id"]')"
curl -s --max-time 10 "$base/v1/files/$output_id/content" >"$work/out.jsonl"
exactly_once "$work/in.jsonl" "$work/out.jsonl"
grep -q "$journal_lines of 100 requests were done before" "$work/server.log" || fail "the resume did not skip the journal"

# ---- hostile inputs ----
code() { field 'd["error"]["code"]'; }
[[ "$(create_batch "$file_id" /v1/embeddings)" == 400 && "$(code)" == invalid_endpoint ]] || fail "unknown endpoint: $(cat "$work/body")"
[[ "$(create_batch file-nope)" == 404 ]] || fail "unknown input file: $(cat "$work/body")"
printf '%s\n%s\n%s\n' "$(head -1 "$work/in.jsonl")" "$(sed -n 2p "$work/in.jsonl")" "$(head -1 "$work/in.jsonl")" >"$work/dup.jsonl"
upload "$work/dup.jsonl" >/dev/null
create_batch "$(field 'd["id"]')" >/dev/null
dup_id="$(field 'd["id"]')"
wait_status "$dup_id" failed
[[ "$(field 'd["errors"]["data"][0]["code"]')" == duplicate_custom_id ]] || fail "duplicate: $(cat "$work/body")"
field 'd["errors"]["data"][0]["message"]' | grep -q "on line 3 repeats line 1" || fail "duplicate message: $(cat "$work/body")"
printf 'custom_id,prompt\nr1,hello\n' >"$work/csv.jsonl"
upload "$work/csv.jsonl" >/dev/null
create_batch "$(field 'd["id"]')" >/dev/null
csv_id="$(field 'd["id"]')"
wait_status "$csv_id" failed
field 'd["errors"]["data"][0]["message"]' | grep -q "not JSONL: line 1" || fail "not JSONL: $(cat "$work/body")"
# A malformed line among good ones is an error line; a line over --max-body-bytes too (never parsed).
{ head -2 "$work/in.jsonl"; echo '{"custom_id": "broken", "method": "POST"'; python3 -c "
import json; print(json.dumps({'custom_id': 'huge', 'method': 'POST', 'url': '/v1/chat/completions',
  'body': {'messages': [{'role': 'user', 'content': 'x' * 300000}]}}))"; } >"$work/mixed.jsonl"
upload "$work/mixed.jsonl" >/dev/null
create_batch "$(field 'd["id"]')" >/dev/null
mixed_id="$(field 'd["id"]')"
wait_status "$mixed_id" completed
[[ "$(field 'd["request_counts"]["failed"]')" == 2 ]] || fail "mixed counts: $(cat "$work/body")"
curl -s --max-time 10 "$base/v1/files/$(field 'd["error_file_id"]')/content" >"$work/errors.jsonl"
grep -q '"code":"invalid_json_line"' "$work/errors.jsonl" || fail "no error line for the malformed line"
grep -q '"code":"line_too_long","message":"line 4 is' "$work/errors.jsonl" || fail "no error line for the huge line"
stop_server

# Limits: a file over --batch-max-file-bytes is refused from its Content-Length (413), and so is one file more
# than --batch-max-files.
start_server "${ENGINE[@]}" --batch-dir "$work/limits" --batch-max-file-bytes 4096 --batch-max-files 2
head -c 100000 /dev/zero | tr '\0' 'x' >"$work/big.jsonl"
[[ "$(upload "$work/big.jsonl")" == 413 ]] || fail "oversized upload: $(head -c 300 "$work/body")"
head -3 "$work/in.jsonl" >"$work/small.jsonl"
[[ "$(upload "$work/small.jsonl")" == 200 && "$(upload "$work/small.jsonl")" == 200 ]] || fail "small uploads"
[[ "$(upload "$work/small.jsonl")" == 413 ]] || fail "a third file: $(cat "$work/body")"
field 'd["error"]["message"]' | grep -q -- "--batch-max-files" || fail "too-many-files message: $(cat "$work/body")"
curl -s -o "$work/body" --max-time 10 "$base/v1/files"
[[ "$(field 'len(d["data"])')" == 2 ]] || fail "list: $(cat "$work/body")"
curl -s -o "$work/body" --max-time 10 -X DELETE "$base/v1/files/$(field 'd["data"][0]["id"]')"
[[ "$(field 'd["deleted"]')" == True ]] || fail "delete: $(cat "$work/body")"
[[ "$(upload "$work/small.jsonl")" == 200 ]] || fail "upload after a delete"
stop_server

# ---- a full disk ----
if [[ $EUID -ne 0 ]]; then
  echo "SKIP full disk: mounting a small tmpfs needs root"
else
  full="$work/full"
  mkdir -p "$full"
  mount -t tmpfs -o size=64k tmpfs "$full"
  trap 'umount "$full" 2>/dev/null || true; serve_util_cleanup' EXIT
  make_input "$work/many.jsonl" 150 4
  start_server "${ENGINE[@]}" --batch-dir "$full/batches" --batch-concurrency 2
  [[ "$(upload "$work/many.jsonl")" == 200 ]] || fail "upload to the tmpfs: $(cat "$work/body")"
  create_batch "$(field 'd["id"]')" >/dev/null
  full_id="$(field 'd["id"]')"
  wait_status "$full_id" failed
  field 'd["errors"]["data"][0]["message"]' | grep -q "No space left on device" || fail "disk full: $(cat "$work/body")"
  status="$(curl -s -o "$work/body" -w "%{http_code}" --max-time 60 "$base/v1/chat/completions" \
    -H 'Content-Type: application/json' -d '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}')"
  [[ "$status" == 200 ]] || fail "an online request with the disk full: $status $(cat "$work/body")"
  stop_server
  umount "$full"
fi

# ---- glint batch: killed mid-run, then --resume ----
make_input "$work/offline.jsonl" 60 48
"$glint" batch "${ENGINE[@]}" --concurrency 1 --input "$work/offline.jsonl" --output "$work/offline.out" \
  >"$work/batch.log" 2>&1 &
pid=$!
for _ in $(seq 1 3000); do
  [[ -f "$work/offline.out" && "$(wc -l <"$work/offline.out")" -ge 3 ]] && break
  sleep 0.01
done
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
pid=""
before="$(wc -l <"$work/offline.out")"
[[ "$before" -ge 3 && "$before" -lt 60 ]] || fail "glint batch had $before results at the kill"
timeout 120 "$glint" batch "${ENGINE[@]}" --input "$work/offline.jsonl" --output "$work/offline.out" \
  >"$work/batch.log" 2>&1 && fail "a non-empty --output without --resume was accepted"
grep -q "pass --resume" "$work/batch.log" || fail "no hint at --resume: $(cat "$work/batch.log")"
timeout 120 "$glint" batch "${ENGINE[@]}" --input "$work/offline.jsonl" --output "$work/offline.out" --resume \
  >"$work/batch.log" 2>&1 || fail "glint batch --resume: $(tail -5 "$work/batch.log")"
grep -q "requests, .* tokens/s, ETA" "$work/batch.log" || fail "no progress line: $(cat "$work/batch.log")"
# By default twice the engine's sequences (--max-seqs 4) are in flight: a finished one is replaced from its queue.
grep -q "requests to run, 8 in flight (the engine runs 4 at once, the rest wait in its queue)" "$work/batch.log" ||
  fail "default concurrency: $(grep 'in flight' "$work/batch.log")"
exactly_once "$work/offline.jsonl" "$work/offline.out"

# Without --max-seqs, glint batch runs 64 sequences, or what half of --memory holds when that is fewer.
make_input "$work/few.jsonl" 3 4
for memory in 128M 8M; do
  rm -f "$work/few.out"
  timeout 120 "$glint" batch --memory "$memory" --max-model-len 512 --input "$work/few.jsonl" --output "$work/few.out" \
    >"$work/few.log" 2>&1 || fail "glint batch --memory $memory: $(tail -5 "$work/few.log")"
  python3 - "$work/few.log" "$memory" <<'EOF2' || fail "--memory $memory: $(grep -E 'slots|at once' "$work/few.log")"
import re, sys
log, memory = open(sys.argv[1]).read(), {"128M": 128 << 20, "8M": 8 << 20}[sys.argv[2]]
runs = int(re.search(r"the engine runs (\d+) at once", log)[1])
count, size, unit = re.search(r"slots +(\d+) × ([\d.]+) (KiB|MiB)", log).groups()
slot = float(size) * (1024 if unit == "KiB" else 1 << 20)
assert runs == int(count), (runs, count)
expected = min(64, int(memory / 2 // slot))
assert abs(runs - expected) <= 1 and 1 < runs <= 64, (runs, expected)  # the printed slot size is rounded
assert (runs == 64) == (sys.argv[2] == "128M"), runs
EOF2
done
echo "PASS"
