#!/usr/bin/env bash
# Failures under mpirun are loud and bounded (docs/distributed.md "Failures"): ranks started with different flags
# or models stop at start-up with a message naming the rank and what differs; a rank that cannot load its shard
# stops every rank with its error; a rank killed in the middle of a request ends the job within 10 s with
# mpirun's message naming it. Every mpirun is under `timeout`: a hang fails the test.
# Args: path-to-glint, tests/data dir, mpirun.
set -euo pipefail
glint="$1"
data="$2"
mpirun="$3"
source "$(dirname "${BASH_SOURCE[0]}")/../cli/lib/serve_util.sh"  # $work, fail, start_server
source "$(dirname "${BASH_SOURCE[0]}")/lib/mpi_util.sh"  # ranks, rank_pid, wait_job
MPI=(timeout 60 "$mpirun" "${MPIRUN_LOCAL[@]}")
RUN=(run --path reference --tokens 1,2,3 --max-tokens 4 --temperature 0 --print-ids)
dense="$data/golden/tiny-dense" sparse="$data/golden/tiny-sparse"

# expect_failure LOG PATTERN WHAT: the job failed (checked by the caller) and the log names the cause.
expect_message() { grep -q "$2" "$1" || fail "$3: expected '$2' in: $(tail -20 "$1")"; }

# Different flags on rank 1 (an MPMD launch).
"${MPI[@]}" -np 1 "$glint" "${RUN[@]}" --model "$dense" : -np 1 "$glint" "${RUN[@]}" --model "$dense" --seed 7 \
  >"$work/flags.log" 2>&1 && fail "different flags were accepted"
expect_message "$work/flags.log" "rank 1 differs from rank 0 in the command-line flags" "flags"

# Different models behind the same flags ($GLINT_DEFAULT_MODEL).
"${MPI[@]}" -np 1 env GLINT_DEFAULT_MODEL="$dense" "$glint" "${RUN[@]}" \
  : -np 1 env GLINT_DEFAULT_MODEL="$sparse" "$glint" "${RUN[@]}" >"$work/model.log" 2>&1 &&
  fail "different models were accepted"
expect_message "$work/model.log" "rank 1 differs from rank 0 in the model's config.json and the model's files" "model"

# Rank 1 cannot load its shard: every rank stops with its error.
start=$SECONDS
"${MPI[@]}" -np 1 env GLINT_DEFAULT_MODEL="$dense" "$glint" "${RUN[@]}" \
  : -np 1 env GLINT_DEFAULT_MODEL="$work/missing" "$glint" "${RUN[@]}" >"$work/load.log" 2>&1 &&
  fail "a rank without its model was accepted"
expect_message "$work/load.log" "rank 1 could not load its shard" "load"
(( SECONDS - start < 30 )) || fail "the failed load took $((SECONDS - start)) s to end every rank"

# A rank killed in the middle of a request: mpirun ends the job and names the rank.
launcher=("${MPI[@]}" -np 2)
start_server --threads 1 --memory 32M --max-seqs 2
curl -s --max-time 30 -H "Content-Type: application/json" -o /dev/null \
  -d '{"prompt": "Once", "max_tokens": 4000, "temperature": 0, "ignore_eos": true}' "$base/v1/completions" &
client=$!
sleep 1
rank1="$(rank_pid "$pid" 1)"
[[ -n "$rank1" ]] || fail "rank 1's process not found"
kill -KILL "$rank1"
start=$SECONDS
wait_job 10 "the job still runs 10 s after rank 1 was killed"
[[ $job_exit -ne 0 ]] || fail "mpirun exited 0 after a rank was killed"
expect_message "$work/server.log" "process rank 1 .* exited on signal 9" "killed rank"
wait "$client" || true
echo "PASS (killed rank ended the job in $((SECONDS - start)) s)"
