#!/usr/bin/env bash
# Emulated hosts on one machine (docs/distributed.md "Several hosts on one machine"): 2–4 Linux network namespaces
# on a bridge, each linked to it by a veth pair shaped by `tc` (token bucket, both directions), and Open MPI run
# across them with one orted per namespace — the way mpirun reaches real machines over ssh, with `ip netns exec`
# in place of ssh. Needs root (namespaces, links, bind mounts). Every host has:
#   - its own network stack: one address on the bridge's subnet (10.251.X.K+1/24), loopback up;
#   - its own host name (a UTS namespace): gl<ID>h<K>, resolvable on every host through /etc/netns/<ns>/hosts
#     (which `ip netns exec` binds over /etc/hosts);
#   - its own files at the same path: $GLINT_CLUSTER_DIR/here is a bind mount of $GLINT_CLUSTER_DIR/hosts/h<K>
#     (a private mount namespace), so a model copied into each host's directory is loaded by each host from its
#     own copy under one path, as on real machines; TMPDIR (Open MPI's session files) is per host too.
#
# Usage (root; the state lives in $GLINT_CLUSTER_DIR, default /tmp/glint-cluster):
#   hosts.sh up N [RATE]       make N hosts (2–4); RATE is a tc rate (1gbit, 10gbit, 25gbit) or "none"
#   hosts.sh down              kill every process in the hosts, remove namespaces, bridge and files made by `up`
#   hosts.sh mpirun ARGS...    Open MPI's mpirun on host 0 over every host, one slot each (add -np N and the command)
#   hosts.sh exec K CMD...     CMD on host K (its network, host name and files)
#   hosts.sh link K up|down    bring host K's network interface up or down (a cable pulled)
#   hosts.sh rate RATE [K]     reshape every link (or host K's only)
#   hosts.sh address K         host K's address on the bridge
#   hosts.sh model DIR [link]  put DIR at every host's $GLINT_CLUSTER_DIR/here/model: a copy each (as on real
#                              machines), or with `link` hard links where the file system allows — the same pages,
#                              for benchmarks of a model too large for one machine's page cache to hold twice
#   hosts.sh attach            give this machine the address .254 on the hosts' bridge (printed), so a process
#                              outside the hosts (a router) reaches them; its traffic crosses their shaped links
#   hosts.sh rank-pid R        the pid (as the machine sees it) of MPI rank R running in the hosts, if any
#   hosts.sh pids              every process running in the hosts (pid and command), one a line
#   hosts.sh check             exit 77 with the reason when this machine cannot make hosts (not root, no netns)
# Every mpirun is bounded by `timeout` ($GLINT_CLUSTER_TIMEOUT seconds, default 600).
set -euo pipefail

script="$(readlink -f "${BASH_SOURCE[0]}")"
dir="${GLINT_CLUSTER_DIR:-/tmp/glint-cluster}"

die() {
  echo "hosts.sh: $*" >&2
  exit 1
}

# The cluster's saved parameters: id, hosts, subnet prefix (the first three octets).
load_state() {
  [[ -f "$dir/state" ]] || die "no hosts in $dir (run: hosts.sh up N)"
  # shellcheck source=/dev/null
  source "$dir/state"
}
ns_name() { echo "gl${id}h$1"; }      # the namespace, and the host name
root_veth() { echo "gl${id}v$1"; }    # the root namespace's end of host K's link
bridge_name() { echo "gl${id}br"; }

check() {
  if [[ $EUID -ne 0 ]]; then
    echo "skipped: emulated hosts need root (network namespaces, links, bind mounts)"
    exit 77
  fi
  local tool probe="glprobe$$"
  for tool in ip tc unshare mpirun orted; do
    command -v "$tool" >/dev/null || { echo "skipped: $tool not found (iproute2, util-linux, openmpi-bin)"; exit 77; }
  done
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "skipped: cannot create a network namespace here (ip netns add failed: no CAP_SYS_ADMIN or no netns support)"
    exit 77
  fi
  # What `up` needs beyond the namespace, tried inside it (nothing of it is left behind).
  local missing=""
  ip -n "$probe" link add glprobebr type bridge 2>/dev/null || missing="bridge links"
  ip -n "$probe" link add glprobea type veth peer name glprobeb 2>/dev/null || missing="${missing:+$missing, }veth pairs"
  if [[ -z "$missing" ]] &&
    ! tc -n "$probe" qdisc add dev glprobea root tbf rate 1gbit burst 65536 latency 20ms 2>/dev/null; then
    missing="tc's tbf qdisc"
  fi
  ip netns exec "$probe" unshare --uts --mount true 2>/dev/null || missing="${missing:+$missing, }unshare --uts --mount"
  ip netns del "$probe"
  if [[ -n "$missing" ]]; then
    echo "skipped: this kernel or sandbox lacks $missing (needed for emulated hosts)"
    exit 77
  fi
}

# A /24 of 10.251.0.0/16 that no address or route of this machine uses (the hosts' addresses exist only inside
# their namespaces, but a subnet seen elsewhere would make logs ambiguous).
pick_subnet() {
  local used third
  used="$(ip -4 route show table all 2>/dev/null; ip -4 -o addr show 2>/dev/null)"
  for third in $(seq $((16#$id % 200 + 1)) 254) $(seq 1 254); do
    if ! grep -q "10\.251\.$third\." <<<"$used"; then
      echo "10.251.$third"
      return
    fi
  done
  die "no free /24 in 10.251.0.0/16"
}

# tc token bucket on one interface: a burst of $GLINT_CLUSTER_BURST_US µs at the rate (default 1000, at least
# 16 KiB), queue of at most 20 ms. What passes within the burst leaves at veth speed, not at the rate: a 1 ms burst
# lets a 10 Gbit/s link move 1.25 MB messages for free, which a real NIC never does (benchmarks of small messages
# want a short burst; the kernel's high-resolution qdisc timer keeps the rate with one).
shape() {
  local netns="$1" dev="$2" rate="$3" bits burst
  ip ${netns:+-n "$netns"} link set "$dev" up
  tc ${netns:+-n "$netns"} qdisc del dev "$dev" root 2>/dev/null || true
  [[ "$rate" == none ]] && return
  bits="$(rate_bits "$rate")"
  burst=$((bits / 8 * ${GLINT_CLUSTER_BURST_US:-1000} / 1000000))
  ((burst >= 16384)) || burst=16384
  tc ${netns:+-n "$netns"} qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 20ms
}

rate_bits() {
  local rate="${1,,}"
  case "$rate" in
    *gbit) echo $((${rate%gbit} * 1000000000)) ;;
    *mbit) echo $((${rate%mbit} * 1000000)) ;;
    *) die "rate '$1': expected NNgbit or NNmbit, or none" ;;
  esac
}

up() {
  local hosts="${1:-}" rate="${2:-10gbit}" k ns
  [[ "$hosts" =~ ^[2-8]$ ]] || die "up N: N is the number of hosts, 2 to 8 (got '${hosts}')"
  [[ "$rate" == none ]] || rate_bits "$rate" >/dev/null
  [[ ! -f "$dir/state" ]] || die "$dir already holds hosts: hosts.sh down first"
  mkdir -p "$dir/here"
  id="$(printf '%04x' $((RANDOM % 65536)))"
  while ip netns list | grep -q "^gl${id}h"; do id="$(printf '%04x' $((RANDOM % 65536)))"; done
  subnet="$(pick_subnet)"
  printf 'id=%s\nhosts=%s\nsubnet=%s\nrate=%s\n' "$id" "$hosts" "$subnet" "$rate" >"$dir/state"
  trap 'down >/dev/null 2>&1' ERR
  ip link add "$(bridge_name)" type bridge
  ip link set "$(bridge_name)" up
  : >"$dir/hostfile"
  for ((k = 0; k < hosts; k++)); do
    ns="$(ns_name "$k")"
    ip netns add "$ns"
    ip link add "$(root_veth "$k")" type veth peer name eth0 netns "$ns"
    ip link set "$(root_veth "$k")" master "$(bridge_name)"
    ip -n "$ns" link set lo up
    # A lost peer with data in flight is given up after ≈ 1.4 s of retransmissions (the default, 15 retries,
    # takes ≈ 15 minutes): without it mpirun waits that long for the orted of a host whose link went down.
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2=2
    ip -n "$ns" addr add "$subnet.$((k + 1))/24" dev eth0
    shape "" "$(root_veth "$k")" "$rate"
    shape "$ns" eth0 "$rate"
    mkdir -p "$dir/hosts/h$k/tmp" "/etc/netns/$ns"
    echo "$ns slots=1" >>"$dir/hostfile"
  done
  for ((k = 0; k < hosts; k++)); do
    ns="$(ns_name "$k")"
    { echo "127.0.0.1 localhost"; for ((j = 0; j < hosts; j++)); do echo "$subnet.$((j + 1)) $(ns_name "$j")"; done; } \
      >"/etc/netns/$ns/hosts"
  done
  trap - ERR
  echo "$hosts hosts $(ns_name 0)…$(ns_name $((hosts - 1))) on $subnet.0/24, links shaped to $rate; files: $dir"
}

down() {
  [[ -f "$dir/state" ]] || return 0
  load_state
  local k ns
  for ((k = 0; k < hosts; k++)); do
    ns="$(ns_name "$k")"
    if ip netns list | grep -q "^$ns\b"; then
      # shellcheck disable=SC2046
      kill -KILL $(ip netns pids "$ns") 2>/dev/null || true
      ip netns del "$ns"
    fi
    rm -rf "/etc/netns/$ns"
  done
  ip link del "$(bridge_name)" 2>/dev/null || true
  rm -f "$dir/state" "$dir/hostfile"
}

# Runs "$@" on host K: the namespace, then a private UTS and mount namespace where `_inside` names the host and
# mounts its files.
on_host() {
  local k="$1"
  shift
  [[ "$k" =~ ^[0-9]+$ && "$k" -lt "$hosts" ]] || die "host '$k': expected 0 to $((hosts - 1))"
  exec ip netns exec "$(ns_name "$k")" unshare --uts --mount --propagation private "$script" _inside "$k" "$@"
}

inside() {
  local k="$1"
  shift
  hostname "$(ns_name "$k")"
  mount --bind "$dir/hosts/h$k" "$dir/here"
  export TMPDIR="$dir/hosts/h$k/tmp"
  exec "$@"
}

# Open MPI's rsh agent: mpirun calls it as `AGENT HOST COMMAND…` (COMMAND a shell line starting orted).
agent() {
  local host="$1" k
  shift
  for ((k = 0; k < hosts; k++)); do
    if [[ "$host" == "$(ns_name "$k")" || "$host" == "$subnet.$((k + 1))" ]]; then on_host "$k" sh -c "$*"; fi
  done
  die "agent: unknown host '$host'"
}

run_mpirun() {
  # routed direct + no tree spawn: every orted is started by and talks to mpirun itself, so a lost host cuts no
  # other host off. OOB keepalives (after 2 s idle, 3 probes 1 s apart) on idle connections and tcp_retries2=2
  # (`up`) on busy ones let mpirun and an orted cut off from it notice a lost link 3–5 s after it went down,
  # instead of TCP's default of minutes; the ranks' own heartbeat (GLINT_PEER_TIMEOUT; docs/distributed.md
  # "Faults") names the rank.
  # shellcheck disable=SC2054  # tcp,self is one value
  local flags=(--allow-run-as-root --hostfile "$dir/hostfile" --bind-to none
    --mca plm_rsh_agent "$script agent" --mca plm_rsh_no_tree_spawn 1 --mca routed direct
    --mca btl tcp,self --mca pml ob1
    --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24"
    --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3
    -x GLINT_CLUSTER_DIR="$dir")
  on_host 0 timeout --kill-after=5 "${GLINT_CLUSTER_TIMEOUT:-600}" mpirun "${flags[@]}" "$@"
}

rank_pid() {
  local rank="$1" k candidate
  for ((k = 0; k < hosts; k++)); do
    for candidate in $(ip netns pids "$(ns_name "$k")" 2>/dev/null); do
      if { tr '\0' '\n' <"/proc/$candidate/environ"; } 2>/dev/null | grep -x "OMPI_COMM_WORLD_RANK=$rank" >/dev/null; then  # not -q: under pipefail its early exit fails tr
        echo "$candidate"
        return
      fi
    done
  done
}

pids() {
  local k candidate
  for ((k = 0; k < hosts; k++)); do
    for candidate in $(ip netns pids "$(ns_name "$k")" 2>/dev/null); do
      echo "$candidate $({ tr '\0' ' ' <"/proc/$candidate/cmdline"; } 2>/dev/null | cut -c1-120)"
    done
  done
}

command="${1:-}"
shift || true
case "$command" in
  check) check ;;
  up) up "$@" ;;
  down) down ;;
  mpirun) load_state && run_mpirun "$@" ;;
  exec) load_state && on_host "$@" ;;
  agent) load_state && agent "$@" ;;
  _inside) load_state && inside "$@" ;;
  link)
    load_state
    [[ "${2:-}" == up || "${2:-}" == down ]] || die "link K up|down"
    ip -n "$(ns_name "$1")" link set eth0 "$2"
    ;;
  rate)
    load_state
    [[ -z "${2:-}" || ( "$2" =~ ^[0-9]+$ && "$2" -lt "$hosts" ) ]] || die "rate RATE [K]: no host '$2'"
    for ((k = 0; k < hosts; k++)); do
      [[ -z "${2:-}" || "$2" == "$k" ]] || continue
      shape "" "$(root_veth "$k")" "$1" && shape "$(ns_name "$k")" eth0 "$1"
    done
    [[ -n "${2:-}" ]] || sed -i "s/^rate=.*/rate=$1/" "$dir/state"
    ;;
  address)
    load_state
    [[ "${1:-}" =~ ^[0-9]+$ && "$1" -lt "$hosts" ]] || die "address K: expected 0 to $((hosts - 1))"
    echo "$subnet.$(($1 + 1))"
    ;;
  attach)
    load_state
    ip -4 -o addr show dev "$(bridge_name)" | grep -q " $subnet.254/" ||
      ip addr add "$subnet.254/24" dev "$(bridge_name)"
    echo "$subnet.254"
    ;;
  model)
    load_state
    [[ -d "${1:-}" && ( -z "${2:-}" || "${2:-}" == link ) ]] || die "model DIR [link]: no directory '${1:-}'"
    for ((k = 0; k < hosts; k++)); do
      rm -rf "$dir/hosts/h$k/model"
      if [[ "${2:-}" == link ]] && cp -rl "$1" "$dir/hosts/h$k/model" 2>/dev/null; then continue; fi
      rm -rf "$dir/hosts/h$k/model"
      cp -r "$1" "$dir/hosts/h$k/model"
    done
    ;;
  rank-pid) load_state && rank_pid "$@" ;;
  pids) load_state && pids ;;
  *) sed -n '2,/^set -euo/p' "$script" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
