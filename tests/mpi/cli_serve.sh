#!/usr/bin/env bash
# `glint serve` under mpirun -np 2 against one process (docs/distributed.md "Tests"): the same greedy answers to
# chat, streaming chat, completions with n = 2 (a fork: slot and block copied on every rank) and a repeated long
# prompt (a prefix-cache hit: a checkpoint restored into a fresh slot on every rank); /metrics answers; SIGTERM to
# rank 0 stops every rank with status 0.
# Args: path-to-glint, tests/data dir, mpirun.
set -euo pipefail
glint="$1"
mpirun="$3"
source "$(dirname "${BASH_SOURCE[0]}")/../cli/lib/serve_util.sh"  # $work, fail, start_server, stop_server, metric
source "$(dirname "${BASH_SOURCE[0]}")/lib/mpi_util.sh"  # rank_pid, wait_job
ENGINE=(--memory 64M --max-seqs 8 --max-model-len 1024 --threads 1 --checkpoint-interval 64)

post() {  # post PATH JSON: the body to stdout
  curl -s --max-time 60 -H "Content-Type: application/json" -d "$2" "$base$1"
}
requests() {  # the answers of the running server, one per line, into $1
  {
    post /v1/chat/completions '{"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 16,
      "temperature": 0}' | python3 -c "import json,sys; print(json.load(sys.stdin)['choices'][0]['message']['content'])"
    post /v1/chat/completions '{"messages": [{"role": "user", "content": "Once upon"}], "max_tokens": 12,
      "temperature": 0, "stream": true}' | chat_stream_text
    post /v1/completions '{"prompt": "The king", "max_tokens": 10, "temperature": 0, "n": 2}' |
      python3 -c "import json,sys; print([c['text'] for c in json.load(sys.stdin)['choices']])"
    long_prompt_answers
  } >"$1"
}

start_server "${ENGINE[@]}"
requests "$work/one.txt"
stop_server

launcher=(timeout 120 "$mpirun" "${MPIRUN_LOCAL[@]}" -np 2)
start_server "${ENGINE[@]}"
grep -q "shard expert parallel over 2 ranks" "$work/server.log" || fail "no shard line in the capacity report"
requests "$work/two.txt"
cmp -s "$work/one.txt" "$work/two.txt" || fail "answers differ: $(diff "$work/one.txt" "$work/two.txt")"
hits="$(curl -s --max-time 10 "$base/metrics" | awk '$1 ~ /^vllm:prefix_cache_hits/ { print $2 }' | head -1)"
[[ -n "$hits" ]] || fail "/metrics: no prefix cache counter"
python3 -c "import sys; sys.exit(0 if float('$hits') > 0 else 1)" || fail "no prefix-cache hit under mpirun ($hits)"
# SIGTERM to rank 0 (the glint child of mpirun whose rank is 0): every rank stops, mpirun exits 0.
rank0="$(rank_pid "$pid" 0)"
[[ -n "$rank0" ]] || fail "rank 0's process not found under $pid"
kill -TERM "$rank0"
wait_job 30 "mpirun still running 30 s after SIGTERM to rank 0"
[[ $job_exit -eq 0 ]] || fail "mpirun exited $job_exit after SIGTERM to rank 0"
echo "PASS"
