#!/usr/bin/env bash
# --mla-attention (docs/fast-path.md "MLA attention in bf16") on the trained tiny model through the glint binary:
#  - where the CPU has AVX512-BF16: `glint score --fast` with bf16 attention against fp32 attention, whole
#    sequences (prefill: a token's 4 heads in one call) and token by token (decode: 8-head tasks), top-1 ≥ 98 % and
#    mean KL ≤ 3e-4 (the bf16-KDA-state bounds; measured ≈ 1e-6), over an fp32 and a bf16 cache (whose rows the
#    kernel reads in place); `glint run` says it attends in bf16 and answers,
#    also over a bf16 cache (the compact path); `glint bench-model` names the kernel it used;
#  - where it has not: asking for bf16 is refused, naming AVX512-BF16;
#  - everywhere: a bad value and the reference path are refused by name.
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

run_ids() {
  "$glint" run --model "$model" --prompt "The cat sat on the mat and then" --max-tokens 16 --temperature 0 \
    --print-ids --threads 2 "$@"
}

if grep -qw avx512_bf16 /proc/cpuinfo; then
  # An fp32 cache (rows rounded per call) and a bf16 cache (rows read in place: mla::AttendBf16InPlace).
  for cache in fp32 bf16; do
    for mode in "" --token-by-token; do
      "$glint" score --fast --threads 2 $mode --model "$model" --tokens-file "$tokens" --kv-cache-dtype "$cache" \
        --dump-logits "$work/fp32.safetensors" >/dev/null 2>&1
      "$glint" score --fast --threads 2 $mode --model "$model" --tokens-file "$tokens" --kv-cache-dtype "$cache" \
        --mla-attention bf16 --reference "$work/fp32.safetensors" >"$work/bf16" 2>"$work/err" \
        || { cat "$work/err"; fail "score bf16 $cache $mode"; }
      grep -q "bf16 MLA attention" "$work/err" || fail "score --mla-attention bf16 $mode: the load line does not say so"
      check_agreement "$work/bf16" "fast path ${mode:-prefill}, $cache cache, bf16 vs fp32 MLA attention" 0.98 3e-4
    done
  done
  for cache in fp32 bf16; do
    run_ids --mla-attention bf16 --kv-cache-dtype "$cache" >"$work/run" 2>"$work/err" \
      || { cat "$work/err"; fail "run --mla-attention bf16 --kv-cache-dtype $cache"; }
    grep -q "bf16 MLA attention" "$work/err" || fail "run --mla-attention bf16: not reported ($(cat "$work/err"))"
    [ "$(wc -w <"$work/run")" -ge 1 ] || fail "run --mla-attention bf16 --kv-cache-dtype $cache: no tokens"
  done
  "$glint" bench-model --model "$model" --threads 2 --prompts 64 --batches 1 --steps 2 --repetitions 1 \
    --probe-mib 16 --mla-attention bf16 >"$work/bench" 2>&1 || { cat "$work/bench"; fail "bench-model bf16"; }
  grep -q "MLA attention bf16" "$work/bench" || { cat "$work/bench"; fail "bench-model did not name bf16 attention"; }
else
  echo "this CPU has no AVX512-BF16: checking that bf16 attention is refused"
  if run_ids --mla-attention bf16 >/dev/null 2>"$work/err"; then fail "run accepted --mla-attention bf16"; fi
  grep -q "AVX512-BF16" "$work/err" || fail "the refusal does not name AVX512-BF16: $(cat "$work/err")"
fi

if run_ids --mla-attention fp16 >/dev/null 2>"$work/err"; then fail "run accepted --mla-attention fp16"; fi
grep -q "fp16" "$work/err" || fail "the refusal does not name the value: $(cat "$work/err")"
if run_ids --path reference --mla-attention bf16 >/dev/null 2>"$work/err"; then
  fail "run accepted --mla-attention with --path reference"
fi
grep -q "applies to the fast path" "$work/err" || fail "the reference path's refusal: $(cat "$work/err")"
echo "PASS"
