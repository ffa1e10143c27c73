#!/usr/bin/env bash
# --kv-cache-dtype on the trained tiny model through the glint binary (docs/quality.md "Compact caches"):
#  - `glint score` of the reference path with bf16, fp8 and int8 caches against the fp32 cache (the default): top-1
#    ≥ 99 %, mean KL within ≈ 10× what was measured (bf16 2e-11, fp8 1.3e-8, int8 3.9e-9 nats), perplexity within
#    0.1 %;
#  - the fast path decoding token by token with an int8 and an fp8 cache against the same with fp32: top-1 ≥ 98.5 %,
#    KL ≤ 2e-5 (measured 1.1e-6 and 1.7e-6);
#  - `glint run --kv-cache-dtype` (through the engine): the engine's cache holds that dtype (its summary line
#    says so) and the first 12 of 16 greedy tokens equal the fp32 run's (measured: 15 of 16 for bf16 and int8, all
#    16 for fp8 on this prompt; a near-tie at the last token);
#  - `glint bench-model --kv-cache-dtype int8` runs and says which cache it used;
#  - `glint bench-context` runs on the tiny model and says that it filled the caches synthetically, and at 1M
#    (filled to 1M − the decode steps) still prints the roofline target with its verdict, and for int8 keys
#    the compute bound at the measured int8 peak where there is one;
#  - a bad dtype is refused by name.
# Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
data="$2"
model="$data/../../models/glint-tiny"
tokens="$data/glint-tiny/crosscheck_tokens.json"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
source "$(dirname "${BASH_SOURCE[0]}")/lib/score_util.sh"  # check_agreement

"$glint" score --model "$model" --tokens-file "$tokens" --dump-logits "$work/fp32.safetensors" >"$work/fp32" 2>/dev/null
for spec in bf16:5e-10 fp8:2e-7 int8:5e-8; do
  dtype=${spec%%:*} kl=${spec#*:}
  "$glint" score --model "$model" --tokens-file "$tokens" --kv-cache-dtype "$dtype" \
    --reference "$work/fp32.safetensors" >"$work/$dtype" 2>"$work/err" || { cat "$work/err"; fail "score $dtype"; }
  check_agreement "$work/$dtype" "reference path, $dtype cache vs fp32" 0.99 "$kl"
  awk -v a="$(awk '$1 == "all" { print $4 }' "$work/fp32")" '$1 == "all" { d = $4 / a - 1; if (d < 0) d = -d;
      exit !(d <= 1e-3) }' "$work/$dtype" || fail "$dtype cache moved the perplexity by more than 0.1 %"
done

"$glint" score --fast --threads 2 --token-by-token --model "$model" --tokens-file "$tokens" \
  --dump-logits "$work/fast.safetensors" >/dev/null 2>&1
for dtype in int8 fp8; do
  "$glint" score --fast --threads 2 --token-by-token --model "$model" --tokens-file "$tokens" \
    --kv-cache-dtype "$dtype" --reference "$work/fast.safetensors" >"$work/fast-$dtype" 2>/dev/null
  check_agreement "$work/fast-$dtype" "fast path decoding, $dtype cache vs fp32" 0.985 2e-5
done

run_ids() {
  "$glint" run --model "$model" --prompt "The cat sat on the mat and then" --max-tokens 16 --temperature 0 \
    --print-ids --threads 2 "$@"
}
run_ids >"$work/run-fp32" 2>/dev/null
for dtype in bf16 fp8 int8; do
  run_ids --kv-cache-dtype "$dtype" >"$work/run-$dtype" 2>"$work/err" || { cat "$work/err"; fail "run $dtype"; }
  grep -q "kv cache $dtype" "$work/err" || fail "run --kv-cache-dtype $dtype: the engine's cache is not $dtype"
  [ "$(cut -d' ' -f1-12 "$work/run-$dtype")" = "$(cut -d' ' -f1-12 "$work/run-fp32")" ] \
    || fail "run --kv-cache-dtype $dtype: greedy tokens $(cat "$work/run-$dtype") vs fp32 $(cat "$work/run-fp32")"
done
if run_ids --kv-cache-dtype fp16 >/dev/null 2>"$work/err"; then fail "run accepted --kv-cache-dtype fp16"; fi
grep -q "fp16" "$work/err" || fail "run's refusal does not name the value: $(cat "$work/err")"

"$glint" bench-model --model "$model" --threads 2 --prompts 64 --batches 1 --steps 2 --repetitions 1 \
  --probe-mib 16 --kv-cache-dtype int8 >"$work/bench" 2>&1 || { cat "$work/bench"; fail "bench-model int8"; }
grep -q "^== kv cache int8" "$work/bench" && grep -q "^== decode 1 sequence" "$work/bench" \
  || { cat "$work/bench"; fail "bench-model --kv-cache-dtype int8 printed no decode figure or no cache dtype"; }

"$glint" bench-context --model "$model" --contexts 1K,4K --steps 2 --threads 2 --probe-mib 16 \
  --kv-cache-dtype int8 >"$work/bench" 2>&1 || { cat "$work/bench"; fail "bench-context"; }
cat "$work/bench"
grep -q "filling it synthetically" "$work/bench" || fail "bench-context does not say it filled the caches"
[ "$(grep -cE '^ +(1024|4096) ' "$work/bench")" = 2 ] || fail "bench-context printed no row for each context"
# At 1M the fill stops short of max_position_embeddings by the decode steps; the roofline target is still judged.
"$glint" bench-context --model "$model" --contexts 1M --steps 1 --threads 2 --probe-mib 16 \
  --kv-cache-dtype int8 >"$work/bench" 2>&1 || { cat "$work/bench"; fail "bench-context at 1M"; }
grep -E "^target indexer ≥ 0.7 of its memory roofline at the deepest context, 1048576 \(filled to 1048574 positions\): [0-9.]+ — (met|NOT met)$" \
  "$work/bench" || { cat "$work/bench"; fail "bench-context at 1M printed no roofline verdict"; }
# Where an int8 peak was measured (VNNI or AMX), the int8 keys' compute bound is printed beside the memory one.
if grep -qE "int8 (VNNI|AMX) peak [0-9]+ GOPS" "$work/bench"; then
  grep -qE "^   its multiply-adds at the measured int8 peak take [0-9.]+ ms = [0-9.]+× the memory roofline \((compute-bound|0.7 of)" \
    "$work/bench" || { cat "$work/bench"; fail "bench-context printed no compute bound for int8 keys"; }
fi

if "$glint" score --model "$model" --tokens-file "$tokens" --kv-cache-dtype fp16 >/dev/null 2>"$work/err"; then
  fail "--kv-cache-dtype fp16 was accepted"
fi
grep -q "fp16" "$work/err" || fail "the refusal does not name the value: $(cat "$work/err")"
if "$glint" plan --kv-cache-dtype e5m2 >/dev/null 2>"$work/err"; then fail "plan accepted --kv-cache-dtype e5m2"; fi
grep -q "expected fp32, bf16, fp8 or int8" "$work/err" || fail "plan's refusal: $(cat "$work/err")"
echo "PASS"
