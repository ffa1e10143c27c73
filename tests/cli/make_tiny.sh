#!/usr/bin/env bash
# Black-box test of `glint make-tiny`: writes a model, refuses to overwrite without --force, is deterministic, and
# reports bad flags clearly. Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_error "substring" command...: the command must fail and print the substring on stderr.
expect_error() {
  local want="$1"; shift
  if "$@" >"$work/out" 2>"$work/err"; then fail "expected failure: $*"; fi
  grep -qF -- "$want" "$work/err" || { cat "$work/err" >&2; fail "stderr of '$*' lacks '$want'"; }
}

"$glint" make-tiny --out "$work/a" >"$work/out"
grep -q "wrote $work/a: preset default, seed 0" "$work/out" || fail "unexpected summary: $(cat "$work/out")"
for f in config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json; do
  [[ -s "$work/a/$f" ]] || fail "missing $f"
done

# Same seed, same bytes; another seed, other weights.
"$glint" make-tiny --out "$work/b" --seed 0 >/dev/null
"$glint" make-tiny --out "$work/c" --seed 7 --preset default >/dev/null
for f in config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json; do
  cmp -s "$work/a/$f" "$work/b/$f" || fail "$f differs between two runs with seed 0"
done
cmp -s "$work/a/model.safetensors" "$work/c/model.safetensors" && fail "seed 7 wrote the same weights as seed 0"

# An existing model directory is kept unless --force.
expect_error "exists and is not empty; pass --force to replace it" "$glint" make-tiny --out "$work/a" --seed 7
cmp -s "$work/a/model.safetensors" "$work/b/model.safetensors" || fail "a refused run changed the directory"
"$glint" make-tiny --out "$work/a" --seed 7 --force >/dev/null
cmp -s "$work/a/model.safetensors" "$work/c/model.safetensors" || fail "--force did not replace the model"
[[ -z "$(ls -A "$work" | grep '^\.')" ]] || fail "temporary directories left behind: $(ls -A "$work")"

# Bad flags and paths.
mkdir -p "$work/home/docs"
echo hi >"$work/home/notes.txt"
expect_error "does not look like a model directory" "$glint" make-tiny --out "$work/home" --force
expect_error "exists and is not a directory" "$glint" make-tiny --out "$work/home/notes.txt"
expect_error "unknown preset 'huge'; expected one of: default, bench" "$glint" make-tiny --out "$work/d" --preset huge
expect_error "--out is required" "$glint" make-tiny
expect_error "--seed" "$glint" make-tiny --out "$work/d" --seed banana
[[ -e "$work/d" ]] && fail "a failed run created $work/d"
echo "make-tiny: all checks passed"
