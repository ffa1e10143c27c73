# shellcheck shell=bash
# Shared by the bench scripts that put glint servers on 2 emulated hosts (tests/cluster/hosts.sh), one core each:
# bench/pd_vs_replicas.sh and bench/pd_transfer_overhead.sh. Source it after parsing the script's flags, with
# $glint, $model, $cpus ("A,B": host 0's and host 1's core), $out, $threads, $memory, $max_model_len and
# $pin (1: each server pinned to its host's core) set. It checks them (exit 2 naming the flag), makes $work (removed
# at exit, the hosts torn down first, after the function pd_hosts_before_down if the script defines one), exports
# GLINT_CLUSTER_DIR and GLINT_CACHE_DIR under it, makes $out absolute, and defines:
#   hosts ARGS...                tests/cluster/hosts.sh on these hosts
#   die MESSAGE                  the message and the tail of every server log, exit 1
#   serve K NAME LEVEL ARGS...   `glint --log-level LEVEL serve ARGS` on host K at its address:8080, logging to
#                                $work/NAME.log; returns once it serves (dies if it exits or takes over 300 s)
name="$(basename "$0")"
IFS=, read -ra cpu_of <<<"$cpus"
[[ ${#cpu_of[@]} -eq 2 && "${cpu_of[0]}" =~ ^[0-9]+$ && "${cpu_of[1]}" =~ ^[0-9]+$ ]] ||
  { echo "$name: --cpus takes two core numbers, one per host (got '$cpus')" >&2; exit 2; }
[[ -x "$glint" && -d "$model" ]] || { echo "$name: no glint at '$glint' or no model at '$model'" >&2; exit 2; }
glint="$(readlink -f "$glint")"
hosts_script="$(dirname "${BASH_SOURCE[0]}")/../../tests/cluster/hosts.sh"
bash "$hosts_script" check

work="$(mktemp -d)"
export GLINT_CLUSTER_DIR="$work/cluster" GLINT_CACHE_DIR="$work/cache"
mkdir -p "$out"
out="$(readlink -f "$out")"
pd_hosts_cleanup() {
  if declare -F pd_hosts_before_down >/dev/null; then pd_hosts_before_down; fi
  bash "$hosts_script" down
  rm -rf "$work"
}
trap pd_hosts_cleanup EXIT
hosts() { bash "$hosts_script" "$@"; }
die() {
  echo "$name: $*" >&2
  for log in "$work"/*.log; do [[ -f "$log" ]] && { echo "== $log" >&2; tail -5 "$log" >&2; }; done
  exit 1
}

serve() {
  local k="$1" server="$2" level="$3"
  shift 3
  local pinned=()
  [[ "$pin" == 1 ]] && pinned=(taskset -c "${cpu_of[$k]}")
  hosts exec "$k" "${pinned[@]}" "$glint" --log-level "$level" serve --host "$(hosts address "$k")" --port 8080 \
    --model "$GLINT_CLUSTER_DIR/here/model" --threads "$threads" --memory "$memory" --max-model-len "$max_model_len" \
    --served-model-name model --no-request-log "$@" >"$work/$server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 3000); do
    grep -qs "serving .* on http://" "$work/$server.log" && return
    kill -0 "$pid" 2>/dev/null || die "$server on host $k exited"
    sleep 0.1
  done
  die "$server on host $k did not start in 300 s"
}
