# Shared by the black-box tests that run `glint serve` (tests/cli/serve.sh, bench_glint_serve.sh, speculative.sh,
# tests/mpi/cli_serve.sh and cli_failures.sh under mpirun).
# Source it after setting $glint (the binary). It makes the scratch directory $work (removed at exit, with its own
# GLINT_CACHE_DIR), and defines:
#   fail MESSAGE        print FAIL and the end of the server log, exit 1
#   start_server ARGS   run `glint serve --port 0 ARGS` in the background on a free loopback port; sets $pid,
#                       $port and $base (http://127.0.0.1:PORT); the log goes to $work/server.log. The words of
#                       the array $launcher, when set, go before "$glint" (e.g. launcher=(timeout 60 mpirun -np 2));
#                       $pid is then the launcher's
#   stop_server         SIGTERM, wait (60 s at most), and require exit status 0
#   metric NAME         the value of the Prometheus sample NAME (name and labels, exactly as exported) of /metrics
# A server still running at exit (a failed check) is killed.
# shellcheck shell=bash

work="$(mktemp -d)"
export GLINT_CACHE_DIR="$work/cache"
pid=""
serve_util_cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap serve_util_cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  [[ -f "$work/server.log" ]] && tail -20 "$work/server.log" >&2
  exit 1
}

launcher=()
start_server() {
  # Emptied here, not only by the child's redirection: a restart would otherwise find the previous server's
  # "serving" line (and port) before the new process has truncated the log.
  : >"$work/server.log"
  "${launcher[@]+"${launcher[@]}"}" "$glint" serve --port 0 "$@" >"$work/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 1200); do
    grep -q "serving .* on http://" "$work/server.log" && break
    kill -0 "$pid" 2>/dev/null || fail "glint serve exited: $(cat "$work/server.log")"
    sleep 0.1
  done
  port="$(sed -n 's|.*serving .* on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$work/server.log" | head -1)"
  [[ -n "$port" ]] || fail "no port in the log"
  base="http://127.0.0.1:$port"
}

stop_server() {
  kill -TERM "$pid"
  local status=0
  for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && fail "glint serve did not stop within 60 s of SIGTERM"
  wait "$pid" || status=$?
  pid=""
  [[ $status -eq 0 ]] || fail "glint serve exited $status after SIGTERM"
}

metric() { curl -s --max-time 10 "$base/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }
