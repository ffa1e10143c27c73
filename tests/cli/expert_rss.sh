#!/usr/bin/env bash
# Peak RSS under --expert-memory stays within what the capacity report says it holds (docs/expert-cache.md
# "Memory"): resident bytes + the cache's slots + its read buffers, plus the process's own memory. On make-tiny's
# expert-heavy preset the routed experts are ≈ 20× everything else, so experts leaking into the resident set (pages
# of the container mapping touched, a staging buffer, a probe's buffer outside the budget) would show.
#
# The margin is measured, not guessed: run 1 keeps every expert resident, so its peak RSS minus the container's
# size is the process's own memory (binary, libraries, activations, caches of the same prompt). Run 2 may exceed
# resident + cache + read buffers by that much, plus 8 MiB for what only the cache has (its reader threads' stacks
# and malloc arenas: a few pages each) — far below the ≈ 280 MB of experts it must not hold.
set -euo pipefail
glint=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$glint" make-tiny --preset expert-heavy --out "$tmp/src" >/dev/null 2>&1
"$glint" convert --model "$tmp/src" --out "$tmp/model" >/dev/null 2>&1
container=$(stat -c %s "$tmp/model/model.glint")
run() { /usr/bin/time -f "peak_kib %M" "$glint" run --model "$tmp/model" --prompt "hello there" --max-tokens 16 \
          --temperature 0 --threads 2 "$@"; }
run >"$tmp/all" 2>&1 || { cat "$tmp/all"; exit 1; }
peak_all=$(( $(sed -n 's/^peak_kib \([0-9]*\)$/\1/p' "$tmp/all") * 1024 ))
# The measurement sees mapped file pages: with every expert resident the peak holds the whole container.
(( peak_all >= container )) || { echo "FAIL: resident run's peak RSS $peak_all < container $container"; exit 1; }
own=$(( peak_all - container ))
for io in pread uring; do
  run --expert-memory 32M --expert-io "$io" >"$tmp/cached" 2>&1 || { cat "$tmp/cached"; exit 1; }
  peak=$(( $(sed -n 's/^peak_kib \([0-9]*\)$/\1/p' "$tmp/cached") * 1024 ))
  report=$(grep "GB resident +" "$tmp/cached") || { echo "FAIL: no capacity report"; cat "$tmp/cached"; exit 1; }
  # "R GB resident + C GB for N experts of S MB + B KiB read buffers (...) = T GB of --expert-memory"
  budget=$(awk '{ for (i = 1; i <= NF; ++i) {
                    if ($(i+1) == "GB" && $(i+2) == "resident") r = $i
                    if ($(i+1) == "GB" && $(i+2) == "of" && $(i+3) == "--expert-memory") t = $i } }
                END { printf "%.0f", (r + t) * 1e9 }' <<<"$report")
  limit=$(( budget + own + (8 << 20) ))
  (( budget > 0 && budget <= (32 << 20) + container - 280000000 )) ||
    { echo "FAIL: $io: implausible budget $budget from: $report"; exit 1; }
  (( peak <= limit )) || {
    echo "FAIL: $io: peak RSS $peak > reported $budget + own $own + 8 MiB = $limit"; echo "$report"; exit 1; }
  echo "expert_rss: $io peak RSS $((peak >> 20)) MiB <= $((limit >> 20)) MiB (report $((budget >> 20)) MiB + own $((own >> 20)) MiB + 8)"
done
echo "expert_rss: ok"
