#!/usr/bin/env bash
# Black-box test of `glint bench-turns` at a small scale (seconds): three sessions outgrow a cache of ~2,560 tokens
# of blocks on make-tiny's long-prefill preset (KDA checkpoints + MLA blocks). Checks the table's structure and that
# its figures are sane: hits on every row, the disk tier turning RAM misses into hits (disk hit tokens > 0, less
# recompute), checkpoint memory within its budget, a progress line per turn on stderr, --time-limit stopping a
# row, and the refusals of bad flags. The timings themselves are not checked (a benchmark never fails on time).
# Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
expect_error() {
  local want="$1"; shift
  if "$@" >"$work/out" 2>"$work/err"; then fail "expected failure: $*"; fi
  grep -qF -- "$want" "$work/err" || { cat "$work/err" >&2; fail "stderr of '$*' lacks '$want'"; }
}

"$glint" make-tiny --preset long-prefill --out "$work/model" >/dev/null
mkdir "$work/disk"
common=(--model "$work/model" --threads 2 --block-size 128 --memory 250K --max-seqs 2 --prefix-checkpoint-memory 48K
        --max-batch-tokens 1024 --system-tokens 256 --user-tokens 512 --turn-output 8 --long-context 1024)
shape=(--sessions 3 --turns 3)
"$glint" bench-turns "${common[@]}" "${shape[@]}" --prefix-cache-disk "$work/disk" --prefix-cache-disk-size 64M \
  >"$work/out" 2>"$work/err" || { cat "$work/err" >&2; fail "bench-turns failed"; }
cat "$work/out"

for want in "tokens the cache blocks hold" "TTFT by round" "tail+disk vs tail" "tail vs uniform"; do
  grep -qF "$want" "$work/out" || fail "output lacks '$want'"
done
# The workload overflows the cache (the factor printed is > 1).
grep -E "together: [0-9.]+ ×" "$work/out" | awk '{ for (i = 1; i <= NF; ++i) if ($i == "×") f = $(i - 1) }
  END { if (f + 0 <= 1) exit 1 }' || fail "the workload does not overflow the cache"
# One progress line per turn and row: 4 rows × 9 turns.
[[ $(grep -c "^bench-turns .*: round [0-9]*/3 session" "$work/err") -eq 36 ]] || fail "expected 36 progress lines"

# Summary rows: name turns prompt hit hit% from-disk recomputed ckpt-used/budget taken demoted disk-MiB TTFT ...
row() { awk -v name="$1" '$1 == name' "$work/out" | head -1; }
for name in uniform tail uniform+disk tail+disk; do
  line="$(row "$name")"
  [[ -n "$line" ]] || fail "no row $name"
  read -r _ turns prompt hit _ disk recomputed ckpt _ <<<"$line"
  [[ $turns -eq 9 ]] || fail "$name ran $turns turns, expected 9"
  (( hit > 0 && hit < prompt )) || fail "$name: hit tokens $hit out of range (prompt $prompt)"
  (( recomputed >= 0 )) || fail "$name: negative recompute $recomputed"
  awk -v c="$ckpt" 'BEGIN { split(c, p, "/"); if (!(p[1] > 0 && p[1] <= p[2])) exit 1 }' \
    || fail "$name: checkpoint memory $ckpt not within its budget"
  if [[ $name == *+disk ]]; then
    (( disk > 0 )) || fail "$name: no hit tokens from the disk after the RAM overflowed"
  else
    (( disk == 0 )) || fail "$name: disk hits without a disk tier"
  fi
done
for policy in uniform tail; do
  read -r _ _ _ hit_ram _ _ recomputed_ram _ <<<"$(row "$policy")"
  read -r _ _ _ hit_disk _ _ recomputed_disk _ <<<"$(row "$policy+disk")"
  (( hit_disk > hit_ram )) || fail "$policy: the disk tier did not raise the hits ($hit_ram → $hit_disk)"
  (( recomputed_disk < recomputed_ram )) || fail "$policy: the disk tier did not cut the recompute"
done

# --time-limit: a row stops starting turns once it is past the limit (here after its first turn).
"$glint" bench-turns "${common[@]}" "${shape[@]}" --rows tail --time-limit 0.000001 >"$work/out" 2>"$work/err" \
  || { cat "$work/err" >&2; fail "bench-turns --time-limit failed"; }
grep -qF "(stopped by --time-limit)" "$work/out" || fail "the time limit did not stop the row"
[[ $(grep -c "^bench-turns tail: round" "$work/err") -eq 1 ]] || fail "expected one turn before the time limit"

expect_error "needs the disk tier" "$glint" bench-turns "${common[@]}" "${shape[@]}" --rows tail+disk
expect_error "expected off, uniform, tail" "$glint" bench-turns "${common[@]}" "${shape[@]}" --rows lru
expect_error "raise --memory" "$glint" bench-turns "${common[@]}" --sessions 3 --turns 40
expect_error "must be at least 1" "$glint" bench-turns "${common[@]}" --sessions 0 --turns 3
expect_error "positive number of seconds" "$glint" bench-turns "${common[@]}" "${shape[@]}" --time-limit 0
echo OK
