#!/usr/bin/env bash
# Black-box test of --speculative mtp (docs/engine.md "Speculative decoding") on the trained default model:
# `glint run` prints the same greedy text with and without it on both forward paths; `glint serve` with it answers
# the same greedy completion and its /metrics count drafts and accepted tokens; `glint bench-engine` prints the
# acceptance rate; bad values are refused.
# Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
data="$2"
source "$(dirname "$0")/lib/serve_util.sh"  # $work, fail, start_server, stop_server
expect_error() {
  local want="$1"; shift
  if "$@" >"$work/out" 2>"$work/err"; then fail "expected failure: $*"; fi
  grep -qF -- "$want" "$work/err" || { cat "$work/err" >&2; fail "stderr of '$*' lacks '$want'"; }
}

# ---- run: the same greedy output, and the drafts are reported ----
prompt="Dear Emily: I have a question about"
for path in fast reference; do
  "$glint" run --path "$path" --prompt "$prompt" --max-tokens 40 --temperature 0 >"$work/plain" 2>/dev/null
  "$glint" run --path "$path" --prompt "$prompt" --max-tokens 40 --temperature 0 --speculative mtp \
    >"$work/spec" 2>"$work/spec.err" || fail "run --speculative mtp --path $path: $(cat "$work/spec.err")"
  cmp -s "$work/plain" "$work/spec" || fail "run --path $path: speculative output differs: $(cat "$work/spec")"
  grep -Eq "speculative decoding: [0-9]+ of [1-9][0-9]* drafted tokens accepted" "$work/spec.err" \
    || fail "run does not report the drafts: $(cat "$work/spec.err")"
  # Chained drafts: K tokens per step, the same text, acceptance by position.
  for k in 2 4; do
    "$glint" run --path "$path" --prompt "$prompt" --max-tokens 40 --temperature 0 --speculative mtp       --speculative-tokens "$k" >"$work/spec" 2>"$work/spec.err" || fail "run --speculative-tokens $k: $(cat "$work/spec.err")"
    cmp -s "$work/plain" "$work/spec" || fail "run --path $path --speculative-tokens $k differs: $(cat "$work/spec")"
    grep -Eq "by position: [0-9]+ %(, ([0-9]+ %|-)){$((k - 1))}\)" "$work/spec.err" \
      || fail "run --speculative-tokens $k: no acceptance by position: $(cat "$work/spec.err")"
  done
done
# A golden checkpoint (random MTP layer: drafts are rejected) with ids.
"$glint" run --model "$data/golden/tiny-sparse" --tokens 113,247,99 --max-tokens 8 --temperature 0 --print-ids \
  --ignore-eos >"$work/plain" 2>/dev/null
"$glint" run --model "$data/golden/tiny-sparse" --tokens 113,247,99 --max-tokens 8 --temperature 0 --print-ids \
  --ignore-eos --speculative mtp >"$work/spec" 2>/dev/null
cmp -s "$work/plain" "$work/spec" || fail "golden ids differ: $(cat "$work/plain") vs $(cat "$work/spec")"
expect_error "--speculative is 'eagle'; expected none or mtp" "$glint" run --tokens 1 --speculative eagle
expect_error "--speculative-tokens must be in 1 .. 4, got 5" "$glint" run --tokens 1 --speculative mtp --speculative-tokens 5
expect_error "--speculative-tokens 2 needs --speculative mtp" "$glint" run --tokens 1 --speculative-tokens 2

# ---- serve: same completion, counters ----
completion() {  # completion BASE: greedy completion text of a fixed prompt
  curl -s --max-time 60 -H "Content-Type: application/json" \
    --data-binary '{"prompt": "The meaning of life is", "max_tokens": 24, "temperature": 0}' \
    "$1/v1/completions" | python3 -c "import json,sys; print(json.load(sys.stdin)['choices'][0]['text'])"
}
SERVE=(--memory 128M --max-seqs 4 --max-model-len 512)
start_server "${SERVE[@]}"
completion "$base" >"$work/plain"
stop_server
start_server "${SERVE[@]}" --speculative mtp
grep -q "rollback" "$work/server.log" || fail "the capacity report lacks the rollback copies"
completion "$base" >"$work/spec"
cmp -s "$work/plain" "$work/spec" || fail "serve: speculative completion differs: $(cat "$work/plain") vs $(cat "$work/spec")"
curl -s --max-time 10 "$base/metrics" >"$work/metrics"
drafts="$(awk '$1 == "glint_spec_decode_num_drafts_total" { print $2 }' "$work/metrics")"
accepted="$(awk '$1 == "glint_spec_decode_num_accepted_tokens_total" { print $2 }' "$work/metrics")"
[[ "${drafts:-0}" -gt 0 && "${accepted:-0}" -gt 0 && "$accepted" -le "$drafts" ]] \
  || fail "spec-decode counters: drafts '$drafts', accepted '$accepted'"
grep -q '^vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=".*",position="0"} '"$accepted"'$' \
  "$work/metrics" || fail "vllm: per-position counter: $(grep spec_decode "$work/metrics")"
stop_server
expect_error "--speculative is 'yes'; expected none or mtp" "$glint" serve --port 0 --speculative yes
expect_error "--speculative-tokens must be in 1 .. 4, got 0" "$glint" serve --port 0 --speculative mtp --speculative-tokens 0

# ---- bench-engine: the acceptance column ----
"$glint" bench-engine --skip-multi-turn --concurrency 1 --repeats 1 --input-len 8 --output-len 16 --memory 64M \
  --max-seqs 2 --speculative mtp >"$work/bench" 2>"$work/bench.err" || fail "bench-engine: $(cat "$work/bench.err")"
awk '$1 == 1 && $13 ~ /%$/ { found = 1 } END { exit !found }' "$work/bench" \
  || fail "bench-engine shows no acceptance rate: $(cat "$work/bench")"
"$glint" bench-engine --skip-multi-turn --concurrency 1 --repeats 1 --input-len 8 --output-len 16 --memory 64M \
  --max-seqs 2 --speculative mtp --speculative-tokens 3 >"$work/bench" 2>"$work/bench.err" \
  || fail "bench-engine --speculative-tokens 3: $(cat "$work/bench.err")"
grep -Eq "speculative decoding, last run: .*by position: ([0-9]+ %|-), ([0-9]+ %|-), ([0-9]+ %|-)\)" "$work/bench" \
  || fail "bench-engine shows no acceptance by position: $(cat "$work/bench")"
echo "speculative: ok"
