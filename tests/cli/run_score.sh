#!/usr/bin/env bash
# Black-box test of `glint run` and `glint score`: generation from the embedded default model and from a golden
# checkpoint, scoring against the golden logits, and clear errors for bad flags and files.
# Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
data="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GLINT_CACHE_DIR="$work/cache"

fail() { echo "FAIL: $*" >&2; exit 1; }
expect_error() {
  local want="$1"; shift
  if "$@" >"$work/out" 2>"$work/err"; then fail "expected failure: $*"; fi
  grep -qF -- "$want" "$work/err" || { cat "$work/err" >&2; fail "stderr of '$*' lacks '$want'"; }
}

# The embedded default model is generated on first use; greedy generation is deterministic.
"$glint" run --prompt "The quick brown fox" --max-tokens 12 --temperature 0 >"$work/a" 2>"$work/a.err"
grep -q "generated 12 tokens" "$work/a.err" || fail "no timing line: $(cat "$work/a.err")"
"$glint" run --prompt "The quick brown fox" --max-tokens 12 --temperature 0 >"$work/b" 2>/dev/null
cmp -s "$work/a" "$work/b" || fail "greedy generation is not deterministic"
# Seeded sampling is reproducible.
"$glint" run --tokens 5,6,7 --max-tokens 10 --seed 3 --print-ids --ignore-eos >"$work/c" 2>/dev/null
"$glint" run --tokens 5,6,7 --max-tokens 10 --seed 3 --print-ids --ignore-eos >"$work/d" 2>/dev/null
cmp -s "$work/c" "$work/d" || fail "seeded sampling is not reproducible"
[[ $(wc -w <"$work/c") -eq 10 ]] || fail "expected 10 ids, got: $(cat "$work/c")"

# A golden checkpoint has no tokenizer: --tokens works, --prompt says why not.
"$glint" run --model "$data/golden/tiny-dense" --tokens 113,247,99 --max-tokens 4 --temperature 0 >"$work/g" 2>/dev/null
[[ $(wc -w <"$work/g") -ge 1 ]] || fail "no tokens generated from the golden model"
expect_error "--prompt needs the checkpoint's tokenizer.json" \
  "$glint" run --model "$data/golden/tiny-dense" --prompt "hi"

# score against the golden logits: every position's top-1 agrees and the KL is at fp32 rounding level.
"$glint" score --model "$data/golden/tiny-sparse" --tokens-file "$data/golden/tiny-sparse/tokens.json" \
  --reference "$data/golden/tiny-sparse/expected.safetensors" --dump-logits "$work/logits.safetensors" \
  >"$work/score" 2>/dev/null
awk '$1 ~ /^[0-9]+$/ { if ($7 != "100.00%") bad = 1; if ($8 + 0 > 1e-9) bad = 1; n++ }
     END { exit (bad || n != 2) }' "$work/score" || { cat "$work/score"; fail "score disagrees with golden"; }
# The dump is a valid reference for itself: zero error.
"$glint" score --model "$data/golden/tiny-sparse" --tokens-file "$data/golden/tiny-sparse/tokens.json" \
  --reference "$work/logits.safetensors" >"$work/self" 2>/dev/null
awk '$1 ~ /^[0-9]+$/ { if ($5 + 0 != 0) bad = 1 } END { exit bad }' "$work/self" || fail "self-comparison not exact"

# Bad input.
expect_error "give exactly one of --prompt TEXT or --tokens IDS" "$glint" run --model "$data/golden/tiny-dense"
expect_error "out of range" "$glint" run --model "$data/golden/tiny-dense" --tokens 1,999
expect_error "expected integers" "$glint" run --model "$data/golden/tiny-dense" --tokens 1,x
expect_error "The following argument was not expected: --bogus" "$glint" run --bogus
expect_error "--path: fp16 not in {fast,reference}" "$glint" run --path fp16 --tokens 1
expect_error "--kda-state: fp16 not in {fp32,bf16}" "$glint" score --kda-state fp16 --tokens-file "$data/golden/tiny-dense/tokens.json"
# Both forward paths generate from the golden checkpoint, and say which one ran.
for path in fast reference; do
  "$glint" run --path "$path" --model "$data/golden/tiny-sparse" --tokens 113,247,99 --max-tokens 3 --temperature 0 --ignore-eos \
    --print-ids >"$work/p" 2>"$work/p.err" || fail "run --path $path failed: $(cat "$work/p.err")"
  [[ $(wc -w <"$work/p") -eq 3 ]] || fail "run --path $path: expected 3 ids, got $(cat "$work/p")"
done
grep -q "fp32 reference" "$work/p.err" || fail "run does not say which forward path ran: $(cat "$work/p.err")"
expect_error "top_p" "$glint" run --model "$data/golden/tiny-dense" --tokens 1 --top-p 2
echo '[[1, 2], [3, "x"]]' >"$work/bad.json"
expect_error "sequence 1 entry 1" "$glint" score --model "$data/golden/tiny-dense" --tokens-file "$work/bad.json"
echo '[[1, 2, 3]]' >"$work/ok.json"
expect_error "'logits.0' must be F32 [3, 256]" "$glint" score --model "$data/golden/tiny-dense" \
  --tokens-file "$work/ok.json" --reference "$data/golden/tiny-dense/expected.safetensors"
expect_error "cannot open" "$glint" score --model "$work/nowhere" --tokens-file "$work/ok.json"
echo "run_score: all checks passed"
