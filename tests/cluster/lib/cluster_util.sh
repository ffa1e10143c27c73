# Shared by the tests over emulated hosts (tests/cluster/*.sh; docs/distributed.md "Several hosts on one
# machine"). Source it after setting $glint (the binary). It exits 77 with the reason when this machine cannot make
# hosts (tests/cluster/hosts.sh check), sources tests/cli/lib/serve_util.sh ($work, removed at exit with every
# host torn down first; fail) and defines:
#   hosts ARGS...           tests/cluster/hosts.sh on this test's hosts
#   make_hosts N RATE       (re)make N hosts, each with its own copy of the container $work/model-c (made once
#                           from models/glint-tiny) at $model, the path every host sees its copy under
#   cluster N ARGS...       glint ARGS as N ranks, one per host, bounded by `timeout`
#   on_host0 CMD...         CMD on host 0 (where rank 0 and its HTTP port are)
#   start_cluster_server N ARGS  `glint serve --port 0 ARGS` on host 0 in the background, as N ranks over the
#                           hosts (N = 1: one process, no mpirun): sets $pid, $base (on host 0's loopback)
#   stop_cluster_server     SIGTERM, then every process of the hosts gone within 30 s
#   no_processes_left       fails when a process still runs in the hosts 10 s later
# shellcheck shell=bash

here="$(dirname "${BASH_SOURCE[0]}")"
hosts_script="$(readlink -f "$here/../hosts.sh")"
bash "$hosts_script" check || exit $?

source "$here/../../cli/lib/serve_util.sh"  # $work, $pid, fail, start_server (after $launcher)
export GLINT_CLUSTER_DIR="$work/cluster"
cluster_util_cleanup() {
  bash "$hosts_script" down || true
  serve_util_cleanup
}
trap cluster_util_cleanup EXIT

hosts() { bash "$hosts_script" "$@"; }

model="$GLINT_CLUSTER_DIR/here/model"
make_hosts() {
  local n="$1" rate="$2" k
  hosts down
  hosts up "$n" "$rate" >/dev/null || fail "could not make $n hosts"
  if [[ ! -d "$work/model-c" ]]; then
    "$glint" convert --model "$here/../../../models/glint-tiny" --out "$work/model-c" >"$work/convert.log" 2>&1 ||
      fail "convert: $(tail -3 "$work/convert.log")"
  fi
  for ((k = 0; k < n; k++)); do cp -r "$work/model-c" "$GLINT_CLUSTER_DIR/hosts/h$k/model"; done
}

cluster() {
  local n="$1"
  shift
  GLINT_CLUSTER_TIMEOUT=120 hosts mpirun -np "$n" "$glint" "$@"
}

on_host0() { hosts exec 0 "$@"; }

start_cluster_server() {
  local n="$1"
  shift
  # $pid must be the process that becomes mpirun's `timeout` (each step execs the next), not a subshell around it.
  if ((n == 1)); then
    launcher=(bash "$hosts_script" exec 0 timeout 300)
  else
    launcher=(env GLINT_CLUSTER_TIMEOUT=300 bash "$hosts_script" mpirun -np "$n")
  fi
  start_server "$@"
}

# mpirun forwards SIGTERM to every rank; rank 0 stops serving and releases the others (mpirun then exits 1, its
# status after forwarding a signal: docs/distributed.md "Failures"), so only the end of every process is checked.
stop_cluster_server() {
  kill -TERM "$pid"
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && fail "glint serve still runs 30 s after SIGTERM"
  wait "$pid" || true
  pid=""
  no_processes_left
}

no_processes_left() {
  local left
  for _ in $(seq 1 100); do
    left="$(hosts pids)"
    [[ -z "$left" ]] && return
    sleep 0.1
  done
  fail "processes left in the hosts: $left"
}
