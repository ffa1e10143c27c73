#!/usr/bin/env bash
# The engine under --dp-attention end to end (docs/distributed.md "Attention data-parallel"), glint-tiny on 2 ranks:
# `serve` answers concurrent requests (spread over both ranks' caches), streaming and a repeated long prompt (a
# prefix-cache hit) as one process does; /metrics gives each rank's cache bytes, back to 0 once idle; `glint batch`
# gives one process's answers; a rank stopped (SIGSTOP) mid-stream ends every rank through the heartbeat, naming
# it, and the client's stream ends in an error. (tests/mpi/dp_engine_mpi_test covers the golden fixtures,
# per-rank prefix hits and preemption.)
# Args: path-to-glint, tests/data dir, mpirun.
set -euo pipefail
glint="$(realpath "$1")"
mpirun="$3"
source "$(dirname "${BASH_SOURCE[0]}")/../cli/lib/serve_util.sh"  # $work, fail, start_server, stop_server, metric
source "$(dirname "${BASH_SOURCE[0]}")/lib/mpi_util.sh"          # rank_pid, wait_job, MPIRUN_LOCAL
ENGINE=(--memory 64M --max-seqs 4 --max-model-len 4096 --threads 1 --checkpoint-interval 64)

post() {  # post PATH JSON: the body to stdout
  curl -s --max-time 60 -H "Content-Type: application/json" -d "$2" "$base$1"
}
# The answers of the running server into $1: six greedy completions sent at once (more than one rank's share), a
# streamed chat, then the long prompt twice (the second time a prefix-cache hit).
requests() {
  local i clients=()
  for i in 1 2 3 4 5 6; do
    post /v1/completions "{\"prompt\": \"Story number $i: once upon a time\", \"max_tokens\": 12, \"temperature\": 0}" \
      >"$work/c$i.json" &
    clients+=($!)
  done
  wait "${clients[@]}"  # not the server, also a child of this shell
  {
    for i in 1 2 3 4 5 6; do
      python3 -c "import json,sys; print(repr(json.load(open(sys.argv[1]))['choices'][0]['text']))" "$work/c$i.json"
    done
    post /v1/chat/completions '{"messages": [{"role": "user", "content": "Once upon"}], "max_tokens": 12,
      "temperature": 0, "stream": true}' | chat_stream_text
    long_prompt_answers
  } >"$1"
}

start_server "${ENGINE[@]}"
requests "$work/one.txt"
stop_server

launcher=(timeout 120 "$mpirun" "${MPIRUN_LOCAL[@]}" -np 2)
start_server "${ENGINE[@]}" --ep 2 --dp-attention
grep -q "each of the 2 ranks holds cache pools" "$work/server.log" || fail "no per-rank cache line at start-up"
grep -q "concurrent sequences per rank" "$work/server.log" || fail "no per-rank concurrency at start-up"
requests "$work/dp.txt"
cmp -s "$work/one.txt" "$work/dp.txt" || fail "answers differ: $(diff "$work/one.txt" "$work/dp.txt")"
hits="$(metric 'vllm:prefix_cache_hits_total')"
[[ -n "$hits" ]] || hits="$(curl -s --max-time 10 "$base/metrics" | awk '$1 ~ /^vllm:prefix_cache_hits/ { print $2 }' | head -1)"
python3 -c "import sys; sys.exit(0 if float('${hits:-0}') > 0 else 1)" || fail "no prefix-cache hit ($hits)"
for rank in 0 1; do
  bytes="$(metric "glint_cache_bytes{rank=\"$rank\"}")"
  [[ "$bytes" == 0 ]] || fail "rank $rank holds $bytes cache bytes once idle"
  capacity="$(metric "glint_cache_capacity_bytes{rank=\"$rank\"}")"
  python3 -c "import sys; sys.exit(0 if float('${capacity:-0}') > 0 else 1)" || fail "rank $rank: no cache capacity"
done
[[ -z "$(metric 'glint_cache_bytes{rank="2"}')" ]] || fail "a third rank in /metrics"

# SIGTERM to rank 0 stops every rank with status 0 (mpirun itself would exit 1 after forwarding a signal).
rank0="$(rank_pid "$pid" 0)"
[[ -n "$rank0" ]] || fail "rank 0's process not found under $pid"
kill -TERM "$rank0"
wait_job 30 "mpirun still running 30 s after SIGTERM to rank 0"
[[ $job_exit -eq 0 ]] || fail "mpirun exited $job_exit after SIGTERM to rank 0"

# ---- a rank stopped mid-stream: the heartbeat ends every rank, the client's stream ends in an error ----
export GLINT_PEER_TIMEOUT=2
launcher=(timeout 120 "$mpirun" "${MPIRUN_LOCAL[@]}" -x GLINT_PEER_TIMEOUT -np 2)
start_server "${ENGINE[@]}" --ep 2 --dp-attention
curl -sN --max-time 60 -H "Content-Type: application/json" "$base/v1/completions" \
  -d '{"prompt": "Once", "max_tokens": 4000, "temperature": 0, "ignore_eos": true, "stream": true}' \
  >"$work/stream.txt" 2>/dev/null &
client=$!
for _ in $(seq 1 100); do grep -q '"text"' "$work/stream.txt" && break; sleep 0.1; done
grep -q '"text"' "$work/stream.txt" || fail "no token streamed: $(head -c 300 "$work/stream.txt")"
rank1="$(rank_pid "$pid" 1)"
[[ -n "$rank1" ]] || fail "rank 1's process not found under $pid"
kill -STOP "$rank1"
wait_job 20 "a server with rank 1 stopped did not end within 20 s"
[[ "$job_exit" != 0 ]] || fail "a server with rank 1 stopped exited 0"
grep -q "no heartbeat from rank 1" "$work/server.log" || fail "the stall was not named"
if wait "$client"; then fail "the client's stream ended without an error: $(tail -c 300 "$work/stream.txt")"; fi
grep -q '\[DONE\]' "$work/stream.txt" && fail "the stream was completed"
for _ in $(seq 1 50); do kill -0 "$rank1" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$rank1" 2>/dev/null; then
  kill -KILL "$rank1" 2>/dev/null || true
  fail "rank 1 outlived the job by 5 s"
fi
unset GLINT_PEER_TIMEOUT

# ---- glint batch: one process's answers ----
write_batch_input "$work/in.jsonl" 6
answers() {  # answers OUT: "custom_id<TAB>content", sorted
  python3 - "$1" <<'EOF'
import json, sys
got = sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda r: r["custom_id"])
assert [r["custom_id"] for r in got] == [f"r{i}" for i in range(6)], [r["custom_id"] for r in got]
for r in got:
    assert r["response"]["status_code"] == 200, r
    print(r["custom_id"], repr(r["response"]["body"]["choices"][0]["message"]["content"]), sep="\t")
EOF
}
BATCH=(batch --memory 64M --max-seqs 4 --max-model-len 512 --threads 1 --input "$work/in.jsonl")
timeout 60 "$glint" "${BATCH[@]}" --output "$work/one.out" >"$work/batch1.log" 2>&1 ||
  fail "batch, one process: $(tail -3 "$work/batch1.log")"
ranks 2 "${BATCH[@]}" --ep 2 --dp-attention --output "$work/dp.out" >"$work/batch2.log" 2>&1 ||
  fail "batch --dp-attention: $(tail -5 "$work/batch2.log")"
cmp -s <(answers "$work/one.out") <(answers "$work/dp.out") ||
  fail "batch --dp-attention answers differ: $(diff <(answers "$work/one.out") <(answers "$work/dp.out"))"
echo "PASS"
