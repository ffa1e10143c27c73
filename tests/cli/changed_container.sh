#!/usr/bin/env bash
# Issue 37: a converted container truncated under a running `glint serve --expert-memory` (`truncate -s 50%`, or
# `cp` over it, which truncates in place first) killed the process with SIGBUS on the next request, with no log
# line. Now the request fails with an error naming the file, later requests are refused with it, /health still
# answers and SIGTERM stops the server cleanly (docs/expert-cache.md "A container that changes").
# Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
data="$2"
source "$(dirname "${BASH_SOURCE[0]}")/lib/serve_util.sh"  # $work, fail, start_server, stop_server

"$glint" convert --model "$data/../../models/glint-tiny" --out "$work/model" >"$work/convert.log" 2>&1 \
  || fail "convert: $(cat "$work/convert.log")"
start_server --model "$work/model" --memory 64M --max-seqs 2 --max-model-len 256 --expert-memory 8M

complete() {  # prints the status; the body in $work/body
  curl -s -o "$work/body" -w "%{http_code}" --max-time 30 -H "Content-Type: application/json" \
    -d '{"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}' "$base/v1/completions"
}
status="$(complete)"
[[ "$status" == 200 ]] || fail "a completion before the change: $status $(cat "$work/body")"

container="$(ls "$work/model"/*.glint | head -1)"
# A tenth is left: the resident (mapped) weights lose most of their pages, not only routed experts (which are read
# with pread and already checked against the file's size); the issue's `truncate -s 50%` may cut experts only.
truncate -s $(( $(stat -c %s "$container") / 10 )) "$container"
status="$(complete)"
kill -0 "$pid" 2>/dev/null || fail "the server died after the container was truncated"
[[ "$status" != 200 ]] || fail "a completion on a truncated container answered 200: $(cat "$work/body")"
grep -q "changed under the running process" "$work/body" || fail "no message naming the change: $(cat "$work/body")"
grep -q "changed under the running process" "$work/server.log" || fail "the change is not in the log"
grep -qF "$container" "$work/body" || fail "the message does not name the file: $(cat "$work/body")"
status="$(complete)"  # every later request is refused the same way
grep -q "changed under the running process" "$work/body" || fail "a later request: $status $(cat "$work/body")"
[[ "$(curl -s -o /dev/null -w "%{http_code}" --max-time 10 "$base/health")" =~ ^(200|503)$ ]] \
  || fail "/health did not answer"
stop_server
echo "changed_container: OK"
