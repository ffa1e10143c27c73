#!/usr/bin/env bash
# Black-box test of the fast path's commands on a golden fixture: `glint convert` writes a complete model directory
# that `glint score --fast` and `glint bench-model` load (mapped, no conversion); the fast path's logits stay within
# the int8 error budget of the fp32 path's; bad flags and inputs get clear errors. Args: path-to-glint, tests/data.
set -euo pipefail
glint="$1"
data="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
expect_error() {
  local want="$1"; shift
  if "$@" >"$work/out" 2>"$work/err"; then fail "expected failure: $*"; fi
  grep -qF -- "$want" "$work/err" || { cat "$work/err" >&2; fail "stderr of '$*' lacks '$want'"; }
}

fixture="$data/golden/tiny-dense"
"$glint" convert --model "$fixture" --out "$work/fast" --threads 2 >"$work/out" 2>"$work/err"
grep -q "wrote $work/fast/model.glint" "$work/out" || fail "unexpected summary: $(cat "$work/out")"
for f in model.glint config.json generation_config.json; do [[ -s "$work/fast/$f" ]] || fail "missing $f"; done

# Refuses to overwrite, bad group, a directory without a checkpoint, the same directory twice.
expect_error "pass --force" "$glint" convert --model "$fixture" --out "$work/fast"
"$glint" convert --model "$fixture" --out "$work/fast" --force >/dev/null 2>&1 || fail "--force did not replace"
expect_error "not a positive multiple of 16" "$glint" convert --model "$fixture" --out "$work/g" --group 24
mkdir -p "$work/empty"
expect_error "config.json" "$glint" convert --model "$work/empty" --out "$work/h"
expect_error "must differ" "$glint" convert --model "$fixture" --out "$fixture"

# glint convert leaves the container out of the page cache (synced, then dropped), so that the first load reads it
# in as 2 MB pages where the kernel can; the load line says how much of it is on them.
fs=$(stat -f -c %T "$work")
if ! command -v fincore >/dev/null; then
  echo "fincore (util-linux) not found: the page-cache check after glint convert is skipped"
elif [ "$fs" = tmpfs ] || [ "$fs" = ramfs ]; then
  echo "$work is on $fs, whose pages are the file itself and cannot leave memory: page-cache check skipped"
else
  cached=$(fincore --bytes --noheadings --output RES "$work/fast/model.glint" | tr -d ' ')
  [ "$cached" = 0 ] || fail "the container glint convert wrote is still in the page cache ($cached bytes)"
fi

# Fast-path logits against the fp32 path's: scored from the container.
"$glint" score --model "$fixture" --tokens-file "$fixture/tokens.json" --dump-logits "$work/ref.safetensors" \
  >/dev/null 2>&1 || fail "fp32 score failed"
"$glint" score --fast --model "$work/fast" --tokens-file "$fixture/tokens.json" --reference "$work/ref.safetensors" \
  >"$work/score" 2>"$work/err" || { cat "$work/err"; fail "fast score failed"; }
grep -q "as int8/bf16 (container" "$work/err" || fail "score --fast did not load the container: $(cat "$work/err")"
# Every sequence's top-1 agreement with the fp32 path is at least 80% on this fixture (unforced choices).
awk '$1 ~ /^[0-9]+$/ { gsub("%", "", $7); if ($7 + 0 < 80) bad = 1 } END { exit bad }' "$work/score" \
  || fail "fast path agrees too little with fp32: $(cat "$work/score")"

# bench-model prints every section and never fails on a time.
"$glint" bench-model --model "$work/fast" --prompts 16 --batches 1,2 --context 4 --steps 1 --repetitions 2 \
  --probe-mib 4 >"$work/bench" 2>&1 || { cat "$work/bench"; fail "bench-model failed"; }
for section in "== machine" "== load 2: container" "resident on 2 MB pages" "== prefill 16 tokens" \
  "[median of 1 after the first run]" "   first run " "int8 products: dense" "prefill profile" \
  "== decode 2 sequences" "int8 products a step: dense" "bound by part: dense products" \
  "triad (issue 36's one-sequence target)" "triad (issue 36's batched target)" "decode profile" "== memory"; do
  grep -qF "$section" "$work/bench" || fail "bench-model output lacks '$section': $(cat "$work/bench")"
done
expect_error "unknown instruction set" "$glint" bench-model --model "$work/fast" --isa neon --probe-mib 4
expect_error "--repetitions: Value 0 not in range 1 to 1000" "$glint" bench-model --model "$work/fast" --repetitions 0 \
  --probe-mib 4
expect_error "--steps: Value 0 not in range" "$glint" bench-model --model "$work/fast" --steps 0 --probe-mib 4
echo "fast path CLI: ok"
