#!/usr/bin/env bash
# Long context through the binary (docs/long-context.md): a 300,000-token prompt prefilled and decoded by the
# engine (`glint bench-engine` on make-tiny's long-prefill preset), and the context limit (max_position_embeddings
# = 1,048,576) refused with the limit in the message by `glint run`, `glint bench-engine` and `glint serve` (400).
# Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
source "$(dirname "${BASH_SOURCE[0]}")/lib/serve_util.sh"  # $work, fail, start_server, stop_server

expect_error() {  # expect_error SUBSTRING COMMAND...: the command fails and says SUBSTRING
  local want="$1"
  shift
  if "$@" >"$work/out" 2>&1; then fail "expected an error from: $*"; fi
  grep -qF -- "$want" "$work/out" || fail "expected '$want' from: $*; got: $(tail -5 "$work/out")"
}

"$glint" make-tiny --preset long-context --out "$work/context" >/dev/null
"$glint" make-tiny --preset long-prefill --out "$work/prefill" >/dev/null

# ---- the limit ----
expect_error "plus --max-tokens (1048574) is more than the model's context of 1048576 tokens" \
  "$glint" run --model "$work/context" --tokens 1,2,3 --max-tokens 1048574
expect_error "--max-model-len 1048577 exceeds the model's max_position_embeddings 1048576" \
  "$glint" bench-engine --model "$work/context" --memory 256M --max-model-len 1048577 --skip-multi-turn

start_server --model "$work/context" --memory 256M --max-seqs 2
[[ "$(curl -s --max-time 30 "$base/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["max_model_len"])')" == 1048576 ]] \
  || fail "max_model_len is not max_position_embeddings"
status="$(curl -s -o "$work/body" -w "%{http_code}" --max-time 30 -H "Content-Type: application/json" \
  --data '{"prompt": "hello", "max_tokens": 1048576}' "$base/v1/completions")"
[[ "$status" == 400 ]] || fail "a request past the context: HTTP $status"
grep -q '"context_length_exceeded"' "$work/body" || fail "no context_length_exceeded code: $(cat "$work/body")"
grep -q "context of 1048576 tokens" "$work/body" || fail "the limit is not in the message: $(cat "$work/body")"
stop_server

# ---- 300,000 tokens in, 16 out, through the engine (~20–60 s on 2 cores) ----
"$glint" bench-engine --model "$work/prefill" --block-size 128 --memory 256M --max-seqs 1 --max-batch-tokens 8192 \
  --input-len 300000 --output-len 16 --concurrency 1 --repeats 1 --skip-multi-turn >"$work/bench" 2>&1 \
  || fail "bench-engine at 300,000 tokens: $(tail -5 "$work/bench")"
grep -q "throughput: input 300000, output 16 tokens" "$work/bench" || fail "no throughput header: $(cat "$work/bench")"
# The one row: concurrency 1, 1 request, no preemption.
awk '$1 == "1" && $2 == "1" { found = 1; if ($9 != "0") exit 1 } END { exit !found }' "$work/bench" \
  || fail "bench-engine did not finish its request without preemption: $(tail -3 "$work/bench")"
echo "PASS long_context"
