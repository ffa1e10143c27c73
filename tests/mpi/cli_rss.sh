#!/usr/bin/env bash
# Per-rank memory at --tp 2 from a `glint convert` container (docs/distributed.md "The fast path"): each rank's peak
# RSS is its shard (the `weights` column of the shard table rank 0 prints) plus the process's own memory — not the
# whole container. make-tiny's expert-heavy preset has routed experts ≈ 20× everything else, and at --tp 2 every
# expert is a column slice copied out of the mapping at load, so pages of the mapping left resident after the copy
# (the bug this guards: 480 MB per rank for a 327 MB container and 166 MB shards) would show as ≈ +166 MB.
#
# The margin is measured, not guessed: one process keeps the whole container resident, so its peak RSS minus the
# container's size is the process's own memory (binary, libraries, activations); a rank may exceed its shard by
# that, plus 24 MiB for Open MPI's library and shared-memory segments (≈ 10 MB measured) — far below the 166 MB a
# second copy of the shard would add.
# Args: path-to-glint, tests/data dir, mpirun.
set -euo pipefail
glint="$1"
mpirun="$3"
source "$(dirname "${BASH_SOURCE[0]}")/lib/mpi_util.sh"  # $work, fail, ranks

"$glint" make-tiny --preset expert-heavy --out "$work/src" >/dev/null 2>&1 || fail "make-tiny"
"$glint" convert --model "$work/src" --out "$work/model" >/dev/null 2>&1 || fail "convert"
container=$(stat -c %s "$work/model/model.glint")
RUN=(run --model "$work/model" --prompt "hello there" --max-tokens 8 --temperature 0 --threads 1)

/usr/bin/time -f "peak_kib %M" "$glint" "${RUN[@]}" >"$work/one.txt" 2>"$work/one.log" || fail "run: $(tail "$work/one.log")"
peak_one=$(($(sed -n 's/^peak_kib \([0-9]*\)$/\1/p' "$work/one.log") * 1024))
((peak_one >= container)) || fail "one process's peak RSS $peak_one < container $container"
own=$((peak_one - container))

# Each rank's peak into its own file: time's report on stderr can be lost when mpirun ends the job's output.
# shellcheck disable=SC2016  # $OMPI_COMM_WORLD_RANK is expanded by each rank's shell
timeout 60 "$mpirun" "${MPIRUN_LOCAL[@]}" -np 2 \
  sh -c 'exec /usr/bin/time -f "peak_kib %M" -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$work/peak" "$glint" "${RUN[@]}" --tp 2 \
  >"$work/two.txt" 2>"$work/two.log" || fail "run --tp 2: $(tail "$work/two.log")"
cmp -s "$work/one.txt" "$work/two.txt" || fail "--tp 2 text differs: $(cat "$work/two.txt") vs $(cat "$work/one.txt")"
# The shard table: "  0  0  0–63  64  0–511 of 1024  yes ...  166.3 MB" — the last two fields of each rank's row.
mapfile -t shards < <(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && $NF == "MB" { printf "%.0f\n", $(NF-1) * 1e6 }' "$work/two.log")
mapfile -t peaks < <(sed -n 's/^peak_kib \([0-9]*\)$/\1/p' "$work/peak.0" "$work/peak.1")
[[ ${#shards[@]} == 2 && ${#peaks[@]} == 2 ]] || fail "want 2 shard rows and 2 peaks: $(cat "$work/two.log")"
for i in 0 1; do
  # The ranks' peaks come in any order; both shards are within a block of each other, so take the larger.
  shard=$((shards[0] > shards[1] ? shards[0] : shards[1]))
  peak=$((peaks[i] * 1024))
  limit=$((shard + own + (24 << 20)))
  ((shard < container * 6 / 10)) || fail "a rank's shard $shard is not about half the container $container"
  ((peak <= limit)) || fail "a rank's peak RSS $peak > shard $shard + own $own + 24 MiB = $limit"
  echo "cli_rss: rank peak RSS $((peak >> 20)) MiB <= $((limit >> 20)) MiB (shard $((shard >> 20)) + own $((own >> 20)) + 24)"
done
echo "PASS"
