# Shared by the black-box tests under mpirun (tests/mpi/cli_*.sh). Source it after setting $glint (the binary) and
# $mpirun. Unless a scratch directory $work exists already (tests/cli/lib/serve_util.sh makes one), it makes $work
# (removed at exit, with its own GLINT_CACHE_DIR) and `fail`. It defines:
#   fail MESSAGE          print FAIL and exit 1
#   ranks N ARGS...       glint ARGS under mpirun -np N on localhost, bounded by `timeout` (a hang fails the test)
#   rank_pid PID RANK     the pid of rank RANK's process below PID (mpirun, or a `timeout` running it)
#   wait_job SECONDS WHAT waits at most SECONDS for the background job $pid to end (else fail "WHAT"), clears
#                         $pid and sets $job_exit to its exit status (not in a subshell: it waits for a child)
# shellcheck shell=bash

if [[ -z "${work:-}" ]]; then
  work="$(mktemp -d)"
  export GLINT_CACHE_DIR="$work/cache"
  mpi_util_cleanup() { rm -rf "$work"; }
  trap mpi_util_cleanup EXIT
  fail() {
    echo "FAIL: $*" >&2
    exit 1
  }
fi

MPIRUN_LOCAL=(--oversubscribe --allow-run-as-root --mca btl self,vader)

ranks() {
  local n="$1"
  shift
  timeout 60 "$mpirun" "${MPIRUN_LOCAL[@]}" -np "$n" "$glint" "$@"
}

rank_pid() {
  local pid="$1" rank="$2" candidate
  for candidate in $(pgrep -P "$pid" 2>/dev/null) $(pgrep -P "$(pgrep -P "$pid" | head -1)" 2>/dev/null); do
    if tr '\0' '\n' <"/proc/$candidate/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
      echo "$candidate"
      return
    fi
  done
}

wait_job() {
  local tenths=$(($1 * 10))
  for _ in $(seq 1 "$tenths"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && fail "$2"
  job_exit=0
  wait "$pid" || job_exit=$?
  pid=""
}
