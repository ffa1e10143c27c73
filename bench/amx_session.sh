#!/usr/bin/env bash
# Issue 36's AMX work that only a CPU exposing AMX can do, in one command, in the order the work needs it. Sessions
# land on a machine with AMX only now and then (`grep -c amx_int8 /proc/cpuinfo`; hypervisors may hide it), so
# this is what to run first on one:
#   1. tests: every test case that runs on the tile unit (ctest -R 'Hardware|Amx' in the build). On a CPU that
#      shows AMX a case that still skips did not get the tiles (CPUID, or the kernel refused the tile-data
#      permission): counted as a failure here, its reason printed.
#   2. kernels: glint_kernel_bench's int8 prefill products at the AVX-512 level (isa:2), the AMX level as
#      dispatched (isa:3) and the AMX tile walks at every token count (isa:4-7: the four walks of gemm_i8.h
#      AmxWalk, the engine's last), MLA attention in fp32, AVX512-BF16 (rounding fp32 rows, and over a bf16
#      cache in place) and on AMX-BF16 tiles (mla::AttendBf16Amx, dispatched where AMX), and the indexer's int8 scores
#      (generic, VNNI, AMX); medians of --repetitions, then tables with the ratio that decides each dispatch
#      (bench/lib/amx_summary.py).
#   3. model, with --model DIR (a `glint convert` output, e.g. the bench model): `bench-model` prefill 512 and 4,096
#      tokens at --isa amx and --isa avx512, alternating, --rounds times: the lines with the rates, the products'
#      share of the peak and the profile.
# Everything is written under --out (tests.log, kernels.json, kernels.txt, model.txt) and summarised at the end.
# Exits 1 when a test failed or skipped, 2 on a bad flag or a missing build, 0 otherwise. On a CPU without AMX it
# says so and exits 3 having run nothing (there is nothing to learn here). Quiet machine
# only: nothing else running, no helpers, no builds (the load average is printed at each start).
#
#   bench/amx_session.sh [--build DIR] [--model DIR] [--rounds 2] [--repetitions 3] [--out DIR] [--skip-tests]
#       [--kernel-bench PATH] [--cpuinfo FILE]
# --kernel-bench and --cpuinfo stand in for the build's benchmark and /proc/cpuinfo (tests/cli/amx_session.sh).
set -euo pipefail
here="$(dirname "$(readlink -f "$0")")"
build="$here/../build/ci"
[[ -d "$here/../build/release" ]] && build="$here/../build/release"
model="" rounds=2 repetitions=3 out=amx-session skip_tests=0 kernel_bench="" cpuinfo=/proc/cpuinfo
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --skip-tests) skip_tests=1; shift; continue ;;
    -h | --help) usage ;;
  esac
  [[ $# -ge 2 ]] || { echo "amx_session.sh: $1 needs a value" >&2; exit 2; }
  case "$1" in
    --build) build="$2" ;;
    --model) model="$2" ;;
    --rounds) rounds="$2" ;;
    --repetitions) repetitions="$2" ;;
    --out) out="$2" ;;
    --kernel-bench) kernel_bench="$2" ;;
    --cpuinfo) cpuinfo="$2" ;;
    *) usage ;;
  esac
  shift 2
done
die() { echo "amx_session.sh: $*" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ && "$repetitions" =~ ^[1-9][0-9]*$ ]] ||
  die "--rounds and --repetitions take positive integers, got '$rounds' and '$repetitions'"
[[ -r "$cpuinfo" ]] || die "cannot read $cpuinfo"

flags="$(grep -m1 '^flags' "$cpuinfo" || true)"
missing=""
for flag in amx_tile amx_int8 amx_bf16; do [[ " $flags " == *" $flag "* ]] || missing+=" $flag"; done
if [[ -n "$missing" ]]; then
  echo "amx_session.sh: this CPU does not show${missing} in $cpuinfo: nothing here needs AMX to run, so nothing was" \
    "run (issue 36's AMX items wait for a machine that exposes it)"
  exit 3
fi

[[ -n "$kernel_bench" ]] || kernel_bench="$build/bench/glint_kernel_bench"
[[ -x "$kernel_bench" ]] || die "no kernel benchmark at $kernel_bench: build it (cmake --build --preset ci --target" \
  "glint_kernel_bench) or pass --build / --kernel-bench"
if [[ -n "$model" ]]; then
  glint="$build/src/cli/glint"
  [[ -x "$glint" ]] || die "no glint at $glint (pass --build)"
  [[ -f "$model/model.glint" ]] || die "--model $model holds no model.glint: give a \`glint convert\` output"
fi
mkdir -p "$out"
load() { cut -d' ' -f1-3 /proc/loadavg; }
failed=0

if [[ "$skip_tests" == 0 ]]; then
  echo "== 1. tests on the tile unit (load $(load))"
  [[ -f "$build/CTestTestfile.cmake" ]] || die "no tests in $build (build the ci preset, or pass --skip-tests)"
  if (cd "$build" && ctest -R 'Hardware|Amx' --output-on-failure) > "$out/tests.log" 2>&1; then
    echo "   passed: $(grep -E 'tests passed' "$out/tests.log" || echo '?')"
  else
    echo "   FAILED: $(grep -E 'tests passed|tests failed' "$out/tests.log" || echo 'see the log')"
    failed=1
  fi
  # ctest's summary names each case that did not run: "<number> - <name> (Skipped)".
  skipped="$(grep -E '^[[:space:]]*[0-9]+ - .*\(Skipped\)$' "$out/tests.log" || true)"
  if [[ -n "$skipped" ]]; then
    echo "   $(wc -l <<<"$skipped") case(s) skipped on a CPU that shows AMX — they did not get the tiles (run one"
    echo "   alone for its reason, e.g. the kernel's tile-data permission):"
    head -20 <<<"$skipped" | sed 's/^[[:space:]]*/     /'
    failed=1
  fi
fi

echo "== 2. kernels (load $(load); medians of $repetitions)"
filter='Prefill/LinearI8/.*isa:[2-7]/|MlaAttend|Indexer/Int8Scores'
"$kernel_bench" --benchmark_filter="$filter" --benchmark_repetitions="$repetitions" \
  --benchmark_report_aggregates_only=true --benchmark_out="$out/kernels.json" --benchmark_out_format=json \
  > "$out/kernels.log" 2>&1 || die "the kernel benchmark failed (see $out/kernels.log)"
python3 "$here/lib/amx_summary.py" "$out/kernels.json" | tee "$out/kernels.txt"

if [[ -n "$model" ]]; then
  echo "== 3. model: prefill 512 and 4,096 tokens, --isa amx against avx512, $rounds alternating round(s)"
  : > "$out/model.txt"
  for ((r = 1; r <= rounds; ++r)); do
    for isa in amx avx512; do
      echo "-- round $r, --isa $isa, $(date -u +%T), load $(load)" | tee -a "$out/model.txt"
      "$glint" bench-model --model "$model" --threads "$(nproc)" --isa "$isa" --prompts 512,4096 --batches 1 \
        --context 64 --steps 2 --repetitions 3 2>&1 |
        grep -E 'triad|== prefill|prefill profile' | tee -a "$out/model.txt" | sed 's/^/   /'
    done
  done
fi

echo "== written under $out/:" "$out"/*
exit "$failed"
