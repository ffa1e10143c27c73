#!/usr/bin/env bash
# The second peer comparison: glint against ik_llama.cpp on the same model widths, engines then servers.
# docs/performance.md "Peer comparison: ik_llama.cpp" says what it measures and how the two models differ.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/../.." && pwd)
PEER_NAME=ik_llama.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
  cat <<EOF
usage: bench/peer/ik_llama.sh IK_SOURCE_DIR [options]

Builds llama-bench and llama-server from an ik_llama.cpp source tree (one with the bailingmoe3 architecture,
-DGGML_NATIVE=ON), writes a random-weight bailingmoe3 GGUF at glint's bench widths directly as Q8_0 with that
tree's gguf-py, then runs both engines back to back and prints two tables with speed-ups:
  engines  prefill 512 and 4096 tokens and one-sequence decode, 1 thread and all threads: glint int8 (glint
           bench-model) against Q8_0 in llama-bench with -rtr 1, then with -rtr 1 -muge 1 (ik's best of the two)
  servers  glint serve against ik's llama-server (-rtr -no-gr) under one glint bench workload: concurrency 1, 4,
           16, 256-token prompts of token ids, 64 generated tokens, tokens timed by logprobs; each server first
           passes a correctness gate (N identical greedy prompts at once give one distinct answer)
Nothing is copied into this repository; everything it makes goes under --out.

options:
  --out DIR           work directory: ik build, GGUF, glint models it converts, logs, tables
                      (default: /tmp/glint-peer-ik)
  --threads N         "all threads" (default: nproc)
  --glint BIN         glint binary (default: build/release/src/cli/glint, else build/ci/src/cli/glint)
  --glint-model DIR   glint's bench checkpoint (glint make-tiny --preset bench); made under --out if absent
                      and the container below must be converted (≈ 20 min on 2 cores)
  --glint-int8 DIR    int8 container (glint convert); default OUT/glint-bench-int8, converted if absent
  --quick             short settings to check that everything runs: prefill 512 only, 1 repetition, all threads
                      only, gate with 4 sequences, servers at concurrency 1 and 4 with 16 generated tokens
  --build-jobs N      parallel compile jobs for ik_llama.cpp (default: nproc)
  --ik-commit SHA     the tree's commit, for the report, when it is not a git work tree (e.g. a git archive)
  --skip-engines      only the server comparison
  --skip-servers      only the engine comparison
  --thp-always        transparent huge pages 'always' for the run (root; the previous mode is put back at exit):
                      ik's -rtr copies its weights into anonymous memory, on 4 KB pages under 'madvise'
  -h, --help          this text
EOF
}

# ---- arguments ----
IK_SRC="" OUT=/tmp/glint-peer-ik THREADS="" GLINT="" GLINT_MODEL="" GLINT_INT8="" QUICK=0 BUILD_JOBS=""
SKIP_ENGINES=0 SKIP_SERVERS=0 IK_COMMIT="" THP_ALWAYS=0 PEER_WEIGHTS=()

peer_option() {  # the remaining arguments; the options only this script takes
  PEER_OPTION_ARGS=2
  case "$1" in
    --ik-commit) need_value "$1" $#; IK_COMMIT=$2 ;;
    *) PEER_OPTION_ARGS=0 ;;
  esac
}

parse_args() {
  parse_peer_args IK_SOURCE_DIR ik_llama.cpp "$@"
  IK_SRC=$PEER_SRC
}

# The tree must be ik_llama.cpp with bailingmoe3 (its loader, not its gguf-py, knows the architecture).
check_tree() {
  [[ -d $IK_SRC ]] || die "'$IK_SRC' is not a directory (expected an ik_llama.cpp source tree)"
  IK_SRC=$(cd "$IK_SRC" && pwd)
  [[ -f $IK_SRC/CMakeLists.txt && -f $IK_SRC/examples/llama-bench/llama-bench.cpp && -f $IK_SRC/src/llama-arch.cpp ]] ||
    die "'$IK_SRC' is not an ik_llama.cpp source tree (no CMakeLists.txt, examples/llama-bench, src/llama-arch.cpp)"
  [[ -f $IK_SRC/gguf-py/gguf/constants.py ]] || die "'$IK_SRC' has no gguf-py/gguf/constants.py"
  grep -q '"bailingmoe3"' "$IK_SRC/src/llama-arch.cpp" ||
    die "this ik_llama.cpp has no bailingmoe3 architecture (src/llama-arch.cpp); use a newer tree"
  IK_COMMIT=${IK_COMMIT:-$(tree_commit "$IK_SRC")}
}

# ---- ik_llama.cpp ----
PEER_CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF)
PEER_TARGETS=(llama-bench llama-server)

# The build's duration is kept beside it ($dir.took), for the reports of later runs that find it up to date.
build_ik() {
  local dir=$OUT/ik_llama.cpp-build started=$SECONDS
  say "building ${PEER_TARGETS[*]} of ik_llama.cpp $IK_COMMIT in $dir (log $dir.log; up to date: seconds)"
  [[ -x $dir/bin/llama-server && -x $dir/bin/llama-bench ]] || rm -f "$dir.took"
  cmake_build "$dir" "$dir.log" || die "the ik_llama.cpp build failed; see $dir.log"
  [[ -f $dir.took ]] || echo "$(((SECONDS - started) / 60)) min with $BUILD_JOBS jobs ($(date -u +%F))" >"$dir.took"
  IK_BIN=$dir/bin
  IK_BUILD_TIME=$(cat "$dir.took")
  check_vnni "$dir"
}

# -march=native must have reached ggml's kernels: where the CPU has VNNI, the int8 dot products use vpdpbusd.
check_vnni() {  # build dir
  local lib count
  if ! grep -qE 'avx512_vnni|avx_vnni' /proc/cpuinfo; then
    IK_VNNI="not checked: CPUID reports no VNNI on this machine"
    return
  fi
  command -v objdump >/dev/null || die "objdump is missing (apt-get install binutils)"
  lib=$(find "$1" -name 'libggml.so' -o -name 'libggml.a' | head -n1)
  [[ -n $lib ]] || lib=$IK_BIN/llama-bench  # a static build links ggml into the binary
  count=$(objdump -d --no-show-raw-insn "$lib" | grep -c vpdpbusd || true)
  [[ $count -gt 0 ]] || die "the CPU has VNNI but $lib has no vpdpbusd: -march=native did not reach ggml (see $1.log)"
  IK_VNNI="$count vpdpbusd instructions in $(basename "$lib")"
}

# ---- the model ----
make_gguf() {
  GGUF=$OUT/bailingmoe3-bench-Q8_0.gguf
  GGUF_TIME="written before this run"
  if [[ ! -s $GGUF ]]; then
    local started=$SECONDS
    say "writing $GGUF (random Q8_0 weights, ≈ 8 GB) with the tree's gguf-py"
    PYTHONPATH="$IK_SRC/gguf-py:$SCRIPT_DIR" "$PY" "$SCRIPT_DIR/bailingmoe3_gguf.py" write --out "$GGUF.part" >&2 ||
      die "writing the GGUF failed"
    mv "$GGUF.part" "$GGUF"
    GGUF_TIME="$((SECONDS - started)) s in this run"
  fi
  PYTHONPATH="$IK_SRC/gguf-py:$SCRIPT_DIR" "$PY" "$SCRIPT_DIR/bailingmoe3_gguf.py" check "$GGUF" >&2 ||
    die "$GGUF does not have the bench widths (delete it to rewrite it)"
  PEER_WEIGHTS=("$GGUF")
}

# A short llama-bench before the long runs: the file loads and runs in this tree with run-time repacking.
smoke_test_ik() {
  local log=$OUT/smoke.log rc=0
  "$IK_BIN/llama-bench" -m "$GGUF" -t "$THREADS" -p 16 -n 1 -r 1 -rtr 1 >"$log" 2>&1 || rc=$?
  [[ $rc -eq 0 ]] || die "llama-bench cannot run $GGUF (exit $rc$(exit_signal "$rc"): $(first_error_line "$log")); see $log"
}

# ---- the engines: prefill and one-sequence decode ----
# Per thread count: glint, then ik with -rtr 1, then ik with -rtr 1 -muge 1, so each pair of figures is taken
# minutes apart. ik's decode runs after the same 64-token context as glint's (-gp 64,N times only the N tokens).
engines() {
  local prompts=512,4096 reps=3 steps=16 threads_list=(1 "$THREADS") t variant
  [[ $QUICK == 1 ]] && prompts=512 reps=1 steps=4 threads_list=("$THREADS")
  [[ $THREADS == 1 ]] && threads_list=(1)
  mkdir -p "$OUT/engines"
  rm -f "$OUT"/engines/*
  for t in "${threads_list[@]}"; do
    say "glint bench-model, int8, $t thread(s)"
    glint_bench_model "$GLINT_INT8" "$t" "$prompts" "$steps" "$reps" "$OUT/engines/glint-int8-t$t.log"
    for variant in rtr rtr-muge; do
      local flags=(-rtr 1)
      [[ $variant == rtr-muge ]] && flags+=(-muge 1)
      say "ik llama-bench Q8_0 ${flags[*]}, $t thread(s)"
      ik_bench "$OUT/engines/ik-$variant-prefill-t$t" -t "$t" -p "$prompts" -n 0 -r "$reps" "${flags[@]}"
      ik_bench "$OUT/engines/ik-$variant-decode-t$t" -t "$t" -p 0 -n 0 -gp "64,$steps" -r "$reps" "${flags[@]}"
    done
  done
}

ik_bench() {  # output path without extension, llama-bench options...
  local base=$1
  shift
  drop_glint_cached
  "$IK_BIN/llama-bench" -m "$GGUF" "$@" -o json >"$base.json" 2>"$base.log" ||
    die "llama-bench failed; see $base.log"
}

# ---- the servers ----
# Before any figure, the correctness gate; a server that fails it is not timed.
gate() {  # name, port
  local sequences=16 log=$OUT/servers/gate-$1.log
  [[ $QUICK == 1 ]] && sequences=4
  say "greedy gate on $1: 1 request alone, then $sequences identical at once"
  "$PY" "$SCRIPT_DIR/greedy_gate.py" --base-url "http://127.0.0.1:$2" --sequences "$sequences" >"$log" 2>&1 ||
    die "$1 fails the correctness gate, so its speed is not measured: $(cat "$log")"
  GATES+=("$1: $(cat "$log")")
}

servers() {
  mkdir -p "$OUT/servers"
  rm -rf "${OUT:?}"/servers/*
  GATES=()
  local port log
  port=$(free_port)
  start_glint_server "$GLINT_INT8" "$port" "$OUT/servers/glint-serve-int8.log"
  gate glint-int8 "$port"
  bench_server glint-int8 "$port"
  stop_server
  port=$(free_port) log=$OUT/servers/ik-server-Q8_0.log
  say "ik llama-server Q8_0 on port $port"
  drop_glint_cached
  # 16 slots of 512 tokens: every request (256 + 64) fits its slot. -no-gr: graph reuse off, as the issue runs it.
  # Started in OUT/servers: it writes llama.log into its working directory.
  pushd "$OUT/servers" >/dev/null
  "$IK_BIN/llama-server" -m "$GGUF" --host 127.0.0.1 --port "$port" -t "$THREADS" -np 16 -c 8192 -rtr -no-gr \
    --webui none >"$log" 2>&1 &
  SERVER_PID=$!
  popd >/dev/null
  wait_healthy "$port" "$log"
  gate ik-Q8_0 "$port"
  bench_server ik-Q8_0 "$port"
  stop_server
  # ik splits a mixed batch into single tokens when sequence ids repeat in it (src/llama.cpp); say when it did
  local chunked
  chunked=$(grep -c 'single-token chunking' "$log" || true)
  IK_CHUNKING="ik's server log has $chunked \"single-token chunking\" warnings"
  [[ $chunked -gt 0 ]] && IK_CHUNKING="$IK_CHUNKING (first: $(grep -m1 'single-token chunking' "$log" | cut -c1-160))"
  return 0
}

report() {
  local when=$1 gate_line
  {
    echo "# glint against ik_llama.cpp ($when)"
    echo
    report_machine
    echo "- glint container: int8 $GLINT_INT8"
    echo "- ik_llama.cpp $IK_COMMIT ($IK_SRC), -DGGML_NATIVE=ON: build $IK_BUILD_TIME; VNNI: $IK_VNNI"
    echo "- model $GGUF (bailingmoe3, random Q8_0): $GGUF_TIME"
    echo "- speed-up: glint ÷ ik for tokens/s, ik ÷ glint for times (> 1: glint is faster); engines against ik's" \
      "better configuration of the two"
    if [[ $SKIP_ENGINES == 0 ]]; then
      echo
      echo "## Engines (glint bench-model, ik llama-bench; decode after a 64-token context)"
      echo
      "$PY" "$SCRIPT_DIR/peer_tables.py" engines "$OUT" --peer ik
    fi
    if [[ $SKIP_SERVERS == 0 ]]; then
      echo
      echo "## Servers (glint bench: 256-token prompts of token ids, tokens timed by logprobs; ik -rtr -no-gr)"
      echo
      for gate_line in "${GATES[@]}"; do
        echo "- $gate_line"
      done
      echo "- $IK_CHUNKING"
      echo
      "$PY" "$SCRIPT_DIR/peer_tables.py" servers "$OUT" --peer ik
    fi
  } | tee "$OUT/peer.md"
}

main() {
  parse_args "$@"
  check_tree
  PEER_SRC=$IK_SRC
  start_run "$IK_SRC/gguf-py" "import gguf.quants; gguf.GGMLQuantizationType.Q8_0"
  build_ik
  make_gguf
  smoke_test_ik
  GLINT_INT8=${GLINT_INT8:-$OUT/glint-bench-int8}
  GLINT_MODEL=${GLINT_MODEL:-$OUT/glint-bench-model}
  ensure_glint_container "$GLINT_INT8" int8
  run_and_report
}

# Sourced (by a test or a partial run), it only defines its functions.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
