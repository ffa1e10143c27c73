#!/usr/bin/env bash
# --expert-memory (docs/expert-cache.md): logits bit-identical with every expert resident and with the routed experts
# read from the container into caches of the minimum, a few and all experts; bad sizes refused with the minimum.
set -euo pipefail
glint=$1 data=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for model in tiny-sparse tiny-dense; do
  "$glint" convert --model "$data/golden/$model" --out "$tmp/$model" >/dev/null 2>&1
  tokens="$data/golden/$model/tokens.json"
  "$glint" score --fast --model "$tmp/$model" --tokens-file "$tokens" --dump-logits "$tmp/all.st" >/dev/null 2>&1
  minimum=$("$glint" score --fast --model "$tmp/$model" --expert-memory 4K --tokens-file "$tokens" 2>&1 |
            sed -n 's/.*at least \([0-9]*\) bytes.*/\1/p' || true)
  [[ -n "$minimum" ]] || { echo "FAIL: $model: a 4K budget was not refused with the minimum"; exit 1; }
  for budget in "$minimum" $((minimum * 3)) 1G; do
    "$glint" score --fast --model "$tmp/$model" --expert-memory "$budget" --tokens-file "$tokens" \
      --dump-logits "$tmp/cached.st" >/dev/null 2>&1
    cmp -s "$tmp/all.st" "$tmp/cached.st" || { echo "FAIL: $model: logits differ with --expert-memory $budget"; exit 1; }
  done
  # io_uring's ring is counted in the budget: its minimum is larger by the ring's pages, and named in the refusal.
  uring_minimum=$("$glint" score --fast --model "$tmp/$model" --expert-memory "$minimum" --expert-io uring \
                    --tokens-file "$tokens" 2>&1 | sed -n 's/.*at least \([0-9]*\) bytes.*read buffers.*/\1/p' || true)
  (( uring_minimum > minimum )) || { echo "FAIL: $model: uring minimum '$uring_minimum' not above $minimum"; exit 1; }
  "$glint" score --fast --model "$tmp/$model" --expert-memory "$uring_minimum" --expert-io uring --tokens-file "$tokens" \
    --dump-logits "$tmp/cached.st" >/dev/null 2>&1
  cmp -s "$tmp/all.st" "$tmp/cached.st" || { echo "FAIL: $model: logits differ with --expert-io uring"; exit 1; }
done
# The read benchmark runs and prints both readers at every depth asked for, and the sequential limit.
"$glint" bench-expert-io --model "$tmp/tiny-sparse" --mib 4 --depths 1,8 >"$tmp/io" 2>&1 || { cat "$tmp/io"; exit 1; }
for row in "pread  |     1" "uring  |     8" "sequential O_DIRECT read"; do
  grep -q -- "$row" "$tmp/io" || { echo "FAIL: bench-expert-io printed no '$row'"; cat "$tmp/io"; exit 1; }
done
if "$glint" score --fast --model "$tmp/tiny-sparse" --expert-memory 1G --expert-io mmap --tokens-file \
     "$data/golden/tiny-sparse/tokens.json" >"$tmp/out" 2>&1; then
  echo "FAIL: --expert-io mmap accepted"; exit 1
fi
grep -q -- "--expert-io" "$tmp/out" || { echo "FAIL: --expert-io mmap: no message naming the flag"; cat "$tmp/out"; exit 1; }
for bad in 12Q 1.5G -3 0; do
  if "$glint" score --fast --model "$tmp/tiny-sparse" --expert-memory "$bad" --tokens-file \
       "$data/golden/tiny-sparse/tokens.json" >"$tmp/out" 2>&1; then
    echo "FAIL: --expert-memory $bad accepted"; exit 1
  fi
  grep -q -- "--expert-memory" "$tmp/out" || { echo "FAIL: --expert-memory $bad: no message naming the flag"; cat "$tmp/out"; exit 1; }
done
echo "expert_memory: ok"
