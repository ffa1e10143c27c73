#!/usr/bin/env bash
# Black-box smoke test of `glint bench-engine` on a golden model with tiny workloads: it prints the capacity
# report and both tables (the figures themselves are not checked: a benchmark never fails on time), and bad engine
# flags are refused with what to change.
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

model="$data/golden/tiny-dense"
"$glint" bench-engine --model "$model" --concurrency 1,2 --repeats 1 --input-len 6 --output-len 3 \
  --conversations 2 --turns 2 --system-tokens 20 --user-tokens 4 --turn-output 3 \
  --memory 4M --max-seqs 4 --block-size 4 --checkpoint-interval 8 >"$work/out" 2>"$work/err" \
  || { cat "$work/err" >&2; fail "bench-engine failed"; }
for want in "tokens of cache" "concurrency" "multi-turn" "saved"; do
  grep -qF "$want" "$work/out" || { cat "$work/out" >&2; fail "output lacks '$want'"; }
done
# Two throughput rows (concurrency 1 and 2), and the prefix-cache row shows hits.
[[ $(awk '$1 == 1 || $1 == 2' "$work/out" | wc -l) -ge 2 ]] || fail "missing throughput rows"
awk '$1 == "tail" { if ($4 + 0 <= 0) exit 1 }' "$work/out" || fail "no prefix-cache hits on the multi-turn workload"

expect_error "holds at most" "$glint" bench-engine --model "$model" --memory 64K --max-seqs 8
expect_error "expected fp32 or bf16" "$glint" bench-engine --model "$model" --kda-state fp16
expect_error "not a size" "$glint" bench-engine --model "$model" --memory lots
expect_error "multiple of index_kpool" "$glint" bench-engine --model "$model" --block-size 6
echo OK
