#!/usr/bin/env bash
# The vision tower end to end (docs/vision.md): make-tiny writes a tower that `glint inspect` counts and
# `glint bench-vision` runs (image token counts as released: patch 14, merge 2), bad input is refused, and the
# float64 oracle reproduces the committed golden fixture when numpy is installed. Args: path-to-glint, tests/data.
set -euo pipefail
glint="$1"
data="$2"
tools="$(cd "$data/../../tools" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_error() {
  local want="$1"; shift
  if "$@" >"$work/out" 2>"$work/err"; then fail "expected failure: $*"; fi
  grep -qF -- "$want" "$work/err" || { cat "$work/err" >&2; fail "stderr of '$*' lacks '$want'"; }
}

"$glint" make-tiny --out "$work/tiny" >/dev/null
# The vision group's parameters, from the tensor list of vision_config (docs/vision.md).
expected="$(jq '.vision_config as $v | ($v.hidden_size) as $h | ($v.intermediate_size) as $i |
  ($v.out_hidden_size) as $o | ($v.projection_intermediate_size) as $p | ($h / $v.num_heads) as $d |
  $h * 3 * 2 * 14 * 14 + $h
  + $v.depth * (2 * $h + 3 * $h * $h + 3 * $h + $h * $h + $h + 2 * $d + 2 * $i * $h + 2 * $i + $h * $i + $h)
  + $h + $o * $h * 4 + $o + $o * $o + 2 * $o + 3 * $p * $o' "$work/tiny/config.json")"
got="$("$glint" inspect "$work/tiny" --json | jq -r '.tables.parameters.rows[] | select(.group == "vision") | .params')"
[[ "$got" == "$expected" ]] || fail "inspect counts $got vision parameters; vision_config implies $expected"

"$glint" bench-vision --model "$work/tiny" --sides 56,112 --repetitions 1 --peak-seconds 0.05 >"$work/bench"
grep -q "^56x56: 16 patches -> 4 image tokens" "$work/bench" || fail "bench-vision 56: $(cat "$work/bench")"
grep -q "^112x112: 64 patches -> 16 image tokens" "$work/bench" || fail "bench-vision 112: $(cat "$work/bench")"
"$glint" bench-vision --model "$work/tiny" --sides 28 --repetitions 1 --peak-seconds 0.05 --vision-weights int8 \
  | grep -q "^28x28: 4 patches -> 1 image tokens" || fail "bench-vision int8"

expect_error "not a positive multiple of patch × merge = 28" \
  "$glint" bench-vision --model "$work/tiny" --sides 50 --peak-seconds 0.05
expect_error "expected bf16 (as released) or int8" \
  "$glint" bench-vision --model "$work/tiny" --vision-weights fp8 --peak-seconds 0.05
expect_error "it is text-only" "$glint" bench-vision --model "$data/golden/tiny-dense" --peak-seconds 0.05

# The oracle: recompute the committed fixture from its weights and input, and regenerate it byte for byte.
if /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  /usr/bin/python3 "$tools/vision_oracle.py" check "$data/golden/tiny-vision" >"$work/check" \
    || { cat "$work/check" >&2; fail "the oracle disagrees with the committed fixture"; }
  mkdir "$work/regen"
  /usr/bin/python3 "$tools/vision_oracle.py" write "$work/regen" >/dev/null
  for f in model.safetensors expected.safetensors vision_config.json; do
    cmp -s "$work/regen/$f" "$data/golden/tiny-vision/$f" || fail "the oracle no longer writes the committed $f"
  done
else
  echo "numpy missing (python3-numpy, scripts/setup.sh): the oracle re-run is skipped; the C++ tests use the committed fixture"
fi
echo "ok"
