# Shared by the black-box tests of prefill/decode disaggregation (tests/cli/pd.sh, tests/mpi/cli_pd.sh): servers
# started side by side, each with its own log. Source it after setting $glint (the binary) and the array ENGINE (the
# flags every server gets). It makes the scratch directory $work (removed at exit, with its own GLINT_CACHE_DIR) and
# defines:
#   fail MESSAGE        print FAIL and the end of every log in $work, exit 1
#   start NAME ARGS...  `glint serve --port 0 ENGINE ARGS` in the background, its log $work/NAME.log; the words of the
#                       array $launcher, when set, go before "$glint" (e.g. mpirun -np 2); sets $last_pid (the
#                       launcher's, if any) and $last_base (http://127.0.0.1:PORT)
#   json EXPR           EXPR of the JSON on stdin (as d), printed
#   metric BASE NAME    the value of the Prometheus sample NAME of BASE's /metrics
#   speculation BASE    BASE's speculative-decoding counters: verifications, drafted tokens, accepted tokens
# Every server still running at exit is stopped: SIGTERM (which a launcher passes on: mpirun to its ranks, rank 0
# then ends the others), then SIGKILL after 10 s.
# shellcheck shell=bash

work="$(mktemp -d)"
export GLINT_CACHE_DIR="$work/cache"
pids=()
launcher=()
pd_util_cleanup() {
  local p alive
  for p in "${pids[@]+"${pids[@]}"}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 1 100); do
    alive=0
    for p in "${pids[@]+"${pids[@]}"}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ $alive -eq 0 ]] && break
    sleep 0.1
  done
  for p in "${pids[@]+"${pids[@]}"}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap pd_util_cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for log in "$work"/*.log; do
    echo "== $log" >&2
    tail -15 "$log" >&2
  done
  exit 1
}

start() {
  local name="$1"
  shift
  "${launcher[@]+"${launcher[@]}"}" "$glint" serve --port 0 "${ENGINE[@]}" "$@" >"$work/$name.log" 2>&1 &
  last_pid=$!
  pids+=("$last_pid")
  for _ in $(seq 1 1200); do
    grep -q "serving .* on http://" "$work/$name.log" && break
    kill -0 "$last_pid" 2>/dev/null || fail "glint serve ($name) exited"
    sleep 0.1
  done
  local port
  port="$(sed -n 's|.*serving .* on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$work/$name.log" | head -1)"
  [[ -n "$port" ]] || fail "no port in $name's log"
  last_base="http://127.0.0.1:$port"
}

json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
metric() { curl -s --max-time 10 "$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'; }
speculation() {
  echo "$(metric "$1" glint_spec_decode_num_drafts_total) $(metric "$1" glint_spec_decode_num_draft_tokens_total)" \
    "$(metric "$1" glint_spec_decode_num_accepted_tokens_total)"
}
