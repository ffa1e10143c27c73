#!/usr/bin/env bash
# What a link costs (docs/distributed.md "What a link costs"): over 2 emulated hosts (tests/cluster/hosts.sh) with
# links shaped to each rate, (1) the fixed cost and bandwidth of one glint all-reduce (glint_collective_bench),
# (2) bench-model's decode step at 1 and 16 sequences and prefill of 512 tokens for each layout of $LAYOUTS, 1 thread
# per host, and (3) what `glint plan` predicts for the same layout with --link-latency and --link-bandwidth set to
# (1): the plan's time in collectives against the measured one, and the step it implies (the same layout's step over
# shared memory on this host + the plan's collectives on the link). A run of 1 process × 2 threads is the baseline.
# Root only (namespaces); never run it on a busy machine — the figures would be the other work's.
#
#   [REPEAT=2] [LAYOUTS="ep tp"] bench/cluster_links.sh GLINT COLLECTIVE_BENCH MODEL_DIR [RATES="1gbit 10gbit 25gbit"]
#       [--quick]
#
# Layouts: ep (--tp 1: attention replicated, experts by id), tp (--tp 2: attention, dense MLP and every expert split
# over the 2 ranks), tp-ep (--tp 2 --experts-by-id: attention split, experts whole by id — vLLM's "expert parallel").
#
# MODEL_DIR: a glint convert container (e.g. of `glint make-tiny --preset bench`). --quick: tiny sizes, one rate
# (the smoke test tests/cluster/links.sh runs it so that the script keeps working).
# $MPI_FLAGS (words) go to every mpirun across the hosts, e.g.
#   MPI_FLAGS="--mca btl_tcp_eager_limit 1048576 --mca btl_tcp_max_send_size 1048576"
# to measure Open MPI's TCP transport without its rendezvous below 1 MiB (docs/distributed.md "What a link costs").
set -euo pipefail
glint="$(readlink -f "$1")"
collective_bench="$(readlink -f "$2")"
model_source="$(readlink -f "$3")"
rates="${4:-1gbit 10gbit 25gbit}"
quick="${5:-}"
[[ "$rates" == --quick ]] && { rates=10gbit; quick=--quick; }
hosts_script="$(dirname "$(readlink -f "$0")")/../tests/cluster/hosts.sh"
bash "$hosts_script" check

work="$(mktemp -d)"
export GLINT_CLUSTER_DIR="$work/cluster" GLINT_CLUSTER_TIMEOUT=1800
trap 'bash "$hosts_script" down; rm -rf "$work"' EXIT
hosts() { bash "$hosts_script" "$@"; }
read -ra mpi_flags <<<"${MPI_FLAGS:-}"

repeat="${REPEAT:-2}"  # alternated triplets (one process, shared memory, across hosts) per layout and rate
read -ra layouts <<<"${LAYOUTS:-ep tp}"
layout_flags() {
  case "$1" in
    ep) echo "--tp 1" ;;
    tp) echo "--tp 2" ;;
    tp-ep) echo "--tp 2 --experts-by-id" ;;
    *) echo "unknown layout '$1' in LAYOUTS (expected ep, tp or tp-ep)" >&2; return 1 ;;
  esac
}
layout_text() {
  case "$1" in
    ep) echo "EP (--tp 1): attention replicated, experts by id" ;;
    tp) echo "TP (--tp 2): attention, dense MLP and expert columns split" ;;
    tp-ep) echo "TP attention + experts by id (--tp 2 --experts-by-id)" ;;
  esac
}
for layout in "${layouts[@]}"; do layout_flags "$layout" >/dev/null; done
# shellcheck disable=SC2054  # 1,16 is one value
if [[ "$quick" == --quick ]]; then
  repeat=1
  BENCH=(--prompts 512 --batches 1,16 --context 8 --steps 2 --repetitions 1 --probe-mib 8)
  COLLECTIVE=(0.05 65536)
else
  BENCH=(--prompts 512 --batches 1,16 --context 64 --steps 8 --repetitions 3)
  COLLECTIVE=(0.5 16777216)
fi

# step_times FILE: "STEP MS_PER_STEP MS_IN_COLLECTIVES" for prefill and each decode batch of a bench-model report
# (the collectives 0 for one process, which has none).
step_times() {
  python3 - "$1" <<'PY'
import re, sys
units = {"ns": 1e-6, "µs": 1e-3, "ms": 1.0, "s": 1e3}
steps, last = {}, None
for line in open(sys.argv[1]):
    m = re.match(r"== prefill (\d+) tokens: [\d.]+ s = ([\d.]+) tokens/s", line)
    if m:  # from the rate: the seconds are printed to 10 ms only
        last = f"prefill-{m[1]}"
        steps[last] = [int(m[1]) / float(m[2]) * 1e3, 0.0]
    m = re.match(r"== decode (\d+) sequences? \(context \d+\): ([\d.]+) ms/step", line)
    if m:
        last = f"decode-{m[1]}"
        steps[last] = [float(m[2]), 0.0]
    m = re.search(r"([\d.]+) (ns|µs|ms|s) in collectives", line)
    if m and last:
        steps[last][1] = float(m[1]) * units[m[2]]
for name, (step, collectives) in steps.items():
    print(f"{name} {step:.4f} {collectives:.4f}")
PY
}

# step_medians FILE...: "STEP MS_PER_STEP MS_IN_COLLECTIVES", each the median over the reports (step_times).
step_medians() {
  local file
  for file in "$@"; do step_times "$file"; done | python3 -c '
import statistics, sys
rows = {}
for line in sys.stdin:
    name, step, collectives = line.split()
    rows.setdefault(name, []).append((float(step), float(collectives)))
for name, values in rows.items():
    print(name, "%.4f" % statistics.median(v[0] for v in values), "%.4f" % statistics.median(v[1] for v in values))'
}

# plan_collectives FILE CONCURRENCY: "STEP MS_IN_COLLECTIVES" from glint plan's collectives table.
plan_collectives() {
  python3 - "$1" "$2" <<'PY'
import re, sys
units = {"ns": 1e-6, "µs": 1e-3, "ms": 1.0, "s": 1e3}
names = {"decode, 1 sequence": "decode-1", f"decode, {sys.argv[2]} sequences": f"decode-{sys.argv[2]}",
         "prefill 512 tokens": "prefill-512"}
header = None
for line in open(sys.argv[1]):
    cells = re.split(r"\s{2,}", line.strip())
    if "in collectives" in cells:
        header = cells
        continue
    if header and cells and cells[0] in names and len(cells) == len(header):
        value, unit = cells[header.index("in collectives")].split()
        print(names[cells[0]], f"{float(value) * units[unit]:.4f}")
PY
}

# The baseline, 1 process × 2 threads: run once up front (a check that it runs), then once in every triplet.
one_process() {
  "$glint" bench-model --model "$model_source" --threads 2 "${BENCH[@]}" >"$1" 2>&1 || { tail "$1"; exit 1; }
}
echo "== baseline: 1 process, 2 threads"
one_process "$work/one.txt"
step_times "$work/one.txt" | awk '{ printf "  %-12s %10.3f ms/step\n", $1, $2 }'
for rate in $rates; do
  hosts down
  hosts up 2 "$rate" >/dev/null
  # Each host's own path to the container, hard-linked: the same pages, so the two hosts do not hold two copies
  # of a bench-size model in one machine's page cache (2 × 7.7 GB of 24 GB evicts it, and every run then measures
  # the disk); the correctness tests (tests/cluster/correctness.sh) copy instead.
  hosts model "$model_source" link
  model="$GLINT_CLUSTER_DIR/here/model"
  echo "== $rate: one all-reduce between 2 hosts"
  hosts mpirun "${mpi_flags[@]}" -np 2 "$collective_bench" "${COLLECTIVE[@]}" | tee "$work/collective.txt" | sed 's/^/  /'
  read -r latency bandwidth < <(sed -n 's/^glint plan: --link-latency \([0-9.]*\) --link-bandwidth \([0-9.]*\)$/\1 \2/p' \
    "$work/collective.txt")
  [[ -n "$bandwidth" ]] || { echo "no fit from glint_collective_bench"; exit 1; }
  bandwidth="$(awk -v b="$bandwidth" 'BEGIN { print (b > 0.001 ? b : 0.001) }')"
  for layout in "${layouts[@]}"; do
    read -ra flags < <(layout_flags "$layout")
    # One process × 2 threads, the same layout as 2 ranks × 1 thread on this host over shared memory, and across
    # the 2 hosts, alternately $repeat times (this VM's speed drifts between minutes by up to 1.7×; a triplet run
    # back to back sees the same machine), medians compared. Over shared memory a step is the compute, the ranks'
    # waits for each other (expert imbalance, the shared expert on the last rank) and a near-free exchange — what
    # the plan's time on the link is added to.
    rm -f "$work"/one-*.txt "$work"/shm-*.txt "$work"/link-*.txt
    for rep in $(seq 1 "$repeat"); do
      one_process "$work/one-$rep.txt"
      mpirun --allow-run-as-root --bind-to none -np 2 "${mpi_flags[@]}" "$glint" bench-model --model "$model_source" \
        --threads 1 "${flags[@]}" "${BENCH[@]}" >"$work/shm-$rep.txt" 2>&1 || { tail "$work/shm-$rep.txt"; exit 1; }
      hosts mpirun "${mpi_flags[@]}" -np 2 "$glint" bench-model --model "$model" --threads 1 "${flags[@]}" \
        "${BENCH[@]}" >"$work/link-$rep.txt" 2>&1 || { tail "$work/link-$rep.txt"; exit 1; }
    done
    step_medians "$work"/one-*.txt >"$work/one.med"
    step_medians "$work"/shm-*.txt >"$work/shm.med"
    step_medians "$work"/link-*.txt >"$work/link.med"
    # The plan's collectives depend on --tp only (--experts-by-id moves the same bytes).
    "$glint" plan --model "$model_source" --ranks 2 "${flags[@]:0:2}" --concurrency 16 --link-latency "$latency" \
      --link-bandwidth "$bandwidth" >"$work/plan.txt" 2>&1 || { tail "$work/plan.txt"; exit 1; }
    echo "== $rate, $(layout_text "$layout"), 2 hosts × 1 thread; plan at --link-latency $latency --link-bandwidth $bandwidth; medians of $repeat alternated triplets"
    printf "  %-12s %10s %14s %12s %16s %14s %10s %14s\n" step "ms/step" "ms collectives" "shm ms/step" \
      "plan collectives" "plan step ms" "plan/meas" "vs 1 proc × 2"
    join <(sort "$work/link.med") <(plan_collectives "$work/plan.txt" 16 | sort) |
      join - <(sort "$work/shm.med") | join - <(sort "$work/one.med") |
      awk '{ predicted = $5 + $4
             printf "  %-12s %10.3f %14.3f %12.3f %16.3f %14.3f %10.2f %13.2fx\n", $1, $2, $3, $5, $4, predicted,
                    predicted / $2, $7 / $2 }'
  done
done
echo "plan step = the same layout's step over shared memory on one host (shm, run alternately with the link's) + the plan's time in collectives on the link;"
echo "vs 1 proc × 2 = the one-process step time (median of the same triplets) ÷ this layout's across hosts (above 1: faster than one process with both threads)"
