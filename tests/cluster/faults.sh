#!/usr/bin/env bash
# shellcheck disable=SC2154  # $base: set by start_cluster_server (tests/cli/lib/serve_util.sh)
# Faults never hang (docs/distributed.md "Faults"): `glint serve` on 3 emulated hosts streaming a long completion,
# then one fault — host 1's link goes down, rank 1 is killed (SIGKILL), rank 1 is stopped (SIGSTOP), rank 0 is
# stopped — and every process of the job (ranks, orteds, mpirun) and the client end within 10 s; the log names the
# lost rank and its host, the client's stream ends in an error (no "[DONE]"), and the job started again serves.
# Prints the time each fault took to end everything. GLINT_PEER_TIMEOUT is left at its default (4 s) for the faults;
# then, at 1 s, a job idle for 4 s and one busy for seconds must not be taken for a lost one.
# Args: path-to-glint, [mpirun]. Exits 77 when this machine cannot make hosts.
set -euo pipefail
glint="$1"
source "$(dirname "${BASH_SOURCE[0]}")/lib/cluster_util.sh"
unset GLINT_PEER_TIMEOUT

make_hosts 3 10gbit
host1="$(hosts exec 1 hostname)"
SERVE=(--model "$model" --threads 1 --memory 32M --max-seqs 2)

# One short completion must succeed: the job serves (at the start, and after each fault: a restart serves again).
serves() {
  on_host0 curl -s --max-time 30 -H "Content-Type: application/json" "$base/v1/completions" \
    -d '{"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}' | grep -q '"finish_reason"' ||
    fail "the job started $1 does not answer"
}

# inject FAULT: a streamed completion that would run for minutes, the fault once tokens flow, then the checks.
inject() {
  local fault="$1" expected="$2" client start elapsed detected=
  bash "$hosts_script" exec 0 curl -sN --max-time 60 -H "Content-Type: application/json" "$base/v1/completions" \
    -d '{"prompt": "Once", "max_tokens": 50000, "temperature": 0, "ignore_eos": true, "stream": true}' \
    >"$work/stream.txt" 2>/dev/null &
  client=$!
  for _ in $(seq 1 100); do grep -q '"text"' "$work/stream.txt" && break; sleep 0.1; done
  grep -q '"text"' "$work/stream.txt" || fail "$fault: no token streamed: $(head -c 300 "$work/stream.txt")"
  local rank0 rank1
  rank0="$(hosts rank-pid 0)" rank1="$(hosts rank-pid 1)"
  [[ -n "$rank0" && -n "$rank1" ]] || fail "$fault: ranks 0 and 1 not found ('$rank0', '$rank1'): $(hosts pids)"
  case "$fault" in
    link-down) hosts link 1 down ;;
    sigkill-rank1) kill -KILL "$rank1" ;;
    sigstop-rank1) kill -STOP "$rank1" ;;
    sigstop-rank0) kill -STOP "$rank0" ;;
  esac
  start=$(date +%s%N)
  while [[ -n "$(hosts pids)" ]]; do
    elapsed=$((($(date +%s%N) - start) / 1000000))
    [[ -z "$detected" ]] && grep -Eq "$expected" "$work/server.log" && detected=$elapsed
    ((elapsed < 10000)) || fail "$fault: still running 10 s later: $(hosts pids)"
    sleep 0.05
  done
  elapsed=$((($(date +%s%N) - start) / 1000000))
  wait "$client" && { tail -c 600 "$work/stream.txt"; fail "$fault: the client's stream ended without an error"; }
  grep -q '\[DONE\]' "$work/stream.txt" && fail "$fault: the stream was completed"
  wait "$pid" || true
  pid=""
  grep -Eq "$expected" "$work/server.log" || fail "$fault: no message naming rank and host ('$expected')"
  echo "ok: $fault: named after ${detected:-?} ms, every process ended after $elapsed ms:" \
    "$(grep -Eo "$expected.{0,24}" "$work/server.log" | head -1)"
}

lost="no heartbeat from rank 1 on host $host1"
for fault in link-down sigkill-rank1 sigstop-rank1 sigstop-rank0; do
  start_cluster_server 3 "${SERVE[@]}"
  serves "before $fault"
  case "$fault" in
    sigkill-rank1) inject "$fault" "process rank 1 with PID [0-9]+ on node $host1 exited on signal 9|$lost" ;;
    sigstop-rank0) inject "$fault" "no heartbeat from rank 0 on host $(hosts exec 0 hostname)" ;;
    *) inject "$fault" "$lost" ;;
  esac
  [[ "$fault" != link-down ]] || hosts link 1 up
done
start_cluster_server 3 "${SERVE[@]}"
serves "after the faults"
stop_cluster_server

# Neither an idle job nor a busy one is taken for a lost one: with a 1 s timeout, 4 s idle (the followers waiting
# for a plan), then a completion of 400 tokens (≈ 2–3 s of steps), and no heartbeat message.
export GLINT_PEER_TIMEOUT=1
start_cluster_server 3 "${SERVE[@]}"
sleep 4
serves "and left idle for 4 s with GLINT_PEER_TIMEOUT=1"
on_host0 curl -s --max-time 120 -H "Content-Type: application/json" "$base/v1/completions" \
  -d '{"prompt": "Once", "max_tokens": 400, "temperature": 0, "ignore_eos": true}' | grep -q '"finish_reason":"length"' ||
  fail "a 400-token completion with GLINT_PEER_TIMEOUT=1 did not finish"
grep -q "no heartbeat" "$work/server.log" && fail "a healthy job was taken for a lost one"
stop_cluster_server
echo "PASS"
