#!/usr/bin/env bash
# The peer comparison in one command: glint against llama.cpp on the same model widths, engines then servers.
# docs/performance.md "Peer comparison" says what it measures, how the two models differ and how long it takes.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/../.." && pwd)
PEER_NAME=llama_cpp.sh
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
  cat <<EOF
usage: bench/peer/llama_cpp.sh LLAMA_CPP_SOURCE_DIR [options]

Builds llama-bench, llama-quantize and llama-server from a llama.cpp source tree (one with the Kimi-Linear
architecture), writes a random-weight Kimi-Linear GGUF at glint's bench widths with that tree's gguf-py, quantizes
it to Q8_0 and Q4_0, then runs both engines back to back and prints two tables with speed-ups:
  engines  prefill 512 and 2048 tokens and one-sequence decode, 1 thread and all threads,
           glint int8 against Q8_0 and glint int4 experts against Q4_0 (glint bench-model, llama-bench)
  servers  glint serve against llama-server under one glint bench workload: concurrency 1, 4, 16,
           256-token prompts of token ids, 64 generated tokens, tokens timed by logprobs
Nothing is copied into this repository; everything it makes goes under --out.

options:
  --out DIR           work directory: llama.cpp build, GGUFs, glint models it converts, logs, tables
                      (default: /tmp/glint-peer)
  --threads N         "all threads" (default: nproc)
  --glint BIN         glint binary (default: build/release/src/cli/glint, else build/ci/src/cli/glint)
  --glint-model DIR   glint's bench checkpoint (glint make-tiny --preset bench); made under --out if absent
                      and a container below must be converted (≈ 20 min on 2 cores)
  --glint-int8 DIR    int8 container (glint convert); default OUT/glint-bench-int8, converted if absent
  --glint-int4 DIR    int4-experts container (glint convert --experts int4); default OUT/glint-bench-int4
  --serve-int4        also compare the servers on int4 experts / Q4_0 (adds ≈ 25 min)
  --quick             short settings to check that everything runs: prefill 512 only, 1 repetition, all threads
                      only, servers at concurrency 1 and 4 with 16 generated tokens
  --build-jobs N      parallel compile jobs for llama.cpp (default: nproc)
  --llama-commit SHA  the tree's commit, for the report, when it is not a git work tree (e.g. a git archive)
  --skip-engines      only the server comparison
  --skip-servers      only the engine comparison
  --thp-always        transparent huge pages 'always' for the run (root; the previous mode is put back at exit):
                      weights llama.cpp repacks at load live in anonymous memory, on 4 KB pages under 'madvise'
  -h, --help          this text
EOF
}

# ---- arguments ----
LLAMA_SRC="" OUT=/tmp/glint-peer THREADS="" GLINT="" GLINT_MODEL="" GLINT_INT8="" GLINT_INT4=""
SERVE_INT4=0 QUICK=0 BUILD_JOBS="" SKIP_ENGINES=0 SKIP_SERVERS=0 LLAMA_COMMIT="" THP_ALWAYS=0 PEER_WEIGHTS=()

peer_option() {  # the remaining arguments; the options only this script takes
  PEER_OPTION_ARGS=2
  case "$1" in
    --glint-int4) need_value "$1" $#; GLINT_INT4=$2 ;;
    --llama-commit) need_value "$1" $#; LLAMA_COMMIT=$2 ;;
    --serve-int4) SERVE_INT4=1; PEER_OPTION_ARGS=1 ;;
    *) PEER_OPTION_ARGS=0 ;;
  esac
}

parse_args() {
  parse_peer_args LLAMA_CPP_SOURCE_DIR llama.cpp "$@"
  LLAMA_SRC=$PEER_SRC
}

# The tree must be llama.cpp with Kimi-Linear; its commit names the figures.
check_tree() {
  [[ -d $LLAMA_SRC ]] || die "'$LLAMA_SRC' is not a directory (expected a llama.cpp source tree)"
  LLAMA_SRC=$(cd "$LLAMA_SRC" && pwd)
  [[ -f $LLAMA_SRC/CMakeLists.txt && -f $LLAMA_SRC/tools/llama-bench/llama-bench.cpp ]] ||
    die "'$LLAMA_SRC' is not a llama.cpp source tree (no CMakeLists.txt and tools/llama-bench)"
  [[ -f $LLAMA_SRC/gguf-py/gguf/constants.py ]] || die "'$LLAMA_SRC' has no gguf-py/gguf/constants.py"
  grep -q '"kimi-linear"' "$LLAMA_SRC/gguf-py/gguf/constants.py" ||
    die "this llama.cpp has no Kimi-Linear architecture (gguf-py knows no \"kimi-linear\"); use a newer tree"
  if [[ -z $LLAMA_COMMIT ]]; then
    LLAMA_COMMIT=$(tree_commit "$LLAMA_SRC")
  fi
}

# ---- llama.cpp ----
PEER_CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF)
PEER_TARGETS=(llama-bench llama-quantize llama-server)

# Native build first (AMX on where the CPU has it); if that fails on llama.cpp's AMX code (gcc 12 has had trouble
# with it), build again without the AMX instructions and say so in the report.
build_llama() {
  local native=$OUT/llama.cpp-build noamx=$OUT/llama.cpp-build-noamx
  LLAMA_AMX="on where the CPU has it (-march=native)"
  grep -q amx_int8 /proc/cpuinfo || LLAMA_AMX="off (CPUID reports no AMX on this machine)"
  if [[ -f $noamx.why ]]; then  # an earlier run fell back: keep that build, and its reason
    build_llama_without_amx "$(cat "$noamx.why")"
    return
  fi
  say "building ${PEER_TARGETS[*]} of llama.cpp $LLAMA_COMMIT in $native (log $native.log; up to date: seconds)"
  if cmake_build "$native" "$native.log"; then
    LLAMA_BIN=$native/bin
    return
  fi
  grep -i 'error' "$native.log" | grep -qi amx || die "the llama.cpp build failed; see $native.log"
  say "the build failed in llama.cpp's AMX code ($(grep -i 'error' "$native.log" | grep -i -m1 amx)); building without AMX"
  build_llama_without_amx "llama.cpp's AMX code did not build with $(cc --version | head -1) (log $native.log)"
}

build_llama_without_amx() {  # why
  local noamx=$OUT/llama.cpp-build-noamx flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  say "building llama.cpp without AMX in $noamx (log $noamx.log)"
  cmake_build "$noamx" "$noamx.log" "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags" ||
    die "the llama.cpp build without AMX failed too; see $noamx.log"
  echo "$1" >"$noamx.why"
  LLAMA_AMX="OFF: $1"
  LLAMA_BIN=$noamx/bin
}

# ---- models ----
make_ggufs() {
  local f16=$OUT/kimi-linear-bench-f16.gguf type
  for type in Q8_0 Q4_0; do
    if [[ ! -s $OUT/kimi-linear-bench-$type.gguf ]]; then
      if [[ ! -s $f16 ]]; then
        say "writing $f16 (random weights, ≈ 15 GB) with the tree's gguf-py"
        PYTHONPATH="$LLAMA_SRC/gguf-py" "$PY" "$SCRIPT_DIR/kimi_linear_gguf.py" write --out "$f16.part"
        mv "$f16.part" "$f16"
      fi
      say "llama-quantize → $type"
      "$LLAMA_BIN/llama-quantize" "$f16" "$OUT/kimi-linear-bench-$type.gguf.part" "$type" "$THREADS" \
        >"$OUT/quantize-$type.log" 2>&1 || die "llama-quantize $type failed; see $OUT/quantize-$type.log"
      mv "$OUT/kimi-linear-bench-$type.gguf.part" "$OUT/kimi-linear-bench-$type.gguf"
    fi
    PYTHONPATH="$LLAMA_SRC/gguf-py" "$PY" "$SCRIPT_DIR/kimi_linear_gguf.py" check "$OUT/kimi-linear-bench-$type.gguf" >&2 ||
      die "$OUT/kimi-linear-bench-$type.gguf does not have the bench widths (delete it to rewrite it)"
  done
  rm -f "$f16"  # 15 GB, needed only to quantize
  PEER_WEIGHTS=("$OUT/kimi-linear-bench-Q8_0.gguf" "$OUT/kimi-linear-bench-Q4_0.gguf")
}

# A short llama-bench on each GGUF before the long runs: the file loads and runs in this llama.cpp. Any failure of
# the native build here falls back to the build without AMX, as a failed build does: gcc 12 has dropped the stores
# of llama.cpp's AMX tile configuration (SIGILL), and d32676d's AMX build aborts on AMX CPUs when llama-bench
# creates its context (GGML_ASSERT(*cur_backend_id != -1) in ggml_backend_sched_split_graph, exit 134). The report
# says which failure it was; a failure of the build without AMX stops the script.
smoke_test_llama() {
  local type rc log
  for type in Q8_0 Q4_0; do
    rc=0 log=$OUT/smoke-$type.log
    "$LLAMA_BIN/llama-bench" -m "$OUT/kimi-linear-bench-$type.gguf" -t "$THREADS" -p 16 -n 1 -r 1 >"$log" 2>&1 ||
      rc=$?
    if [[ $rc -ne 0 && $LLAMA_BIN != "$OUT/llama.cpp-build-noamx/bin" ]]; then
      local why
      why="llama-bench $type exited $rc$(exit_signal "$rc") with the native build ($(first_error_line "$log"); $log)"
      say "$why; building without AMX"
      build_llama_without_amx "$why"
      smoke_test_llama
      return
    fi
    [[ $rc -eq 0 ]] || die "llama-bench cannot run $OUT/kimi-linear-bench-$type.gguf (exit $rc); see $log"
  done
  grep -q 'AMX' "$OUT"/smoke-*.log && LLAMA_AMX="$LLAMA_AMX; llama-bench reports AMX buffers"
  return 0
}

glint_models() {
  GLINT_INT8=${GLINT_INT8:-$OUT/glint-bench-int8}
  GLINT_INT4=${GLINT_INT4:-$OUT/glint-bench-int4}
  GLINT_MODEL=${GLINT_MODEL:-$OUT/glint-bench-model}
  ensure_glint_container "$GLINT_INT8" int8
  ensure_glint_container "$GLINT_INT4" int4
}

# ---- the engines: prefill and one-sequence decode ----
engines() {
  local prompts=512,2048 reps=3 steps=16 threads_list=(1 "$THREADS") t
  [[ $QUICK == 1 ]] && prompts=512 reps=1 steps=4 threads_list=("$THREADS")
  [[ $THREADS == 1 ]] && threads_list=(1)
  mkdir -p "$OUT/engines"
  rm -f "$OUT"/engines/*
  for t in "${threads_list[@]}"; do
    local pair glint_w llama_w container
    for pair in int8:Q8_0 int4:Q4_0; do
      glint_w=${pair%%:*} llama_w=${pair##*:}
      container=$GLINT_INT8
      [[ $glint_w == int4 ]] && container=$GLINT_INT4
      say "glint bench-model, $glint_w experts, $t thread(s)"
      glint_bench_model "$container" "$t" "$prompts" "$steps" "$reps" "$OUT/engines/glint-$glint_w-t$t.log"
      say "llama-bench $llama_w, $t thread(s)"
      drop_glint_cached
      "$LLAMA_BIN/llama-bench" -m "$OUT/kimi-linear-bench-$llama_w.gguf" -t "$t" -p "$prompts" -n 0 -r "$reps" \
        -o json >"$OUT/engines/llama-$llama_w-prefill-t$t.json" 2>"$OUT/engines/llama-$llama_w-prefill-t$t.log" ||
        die "llama-bench failed; see $OUT/engines/llama-$llama_w-prefill-t$t.log"
      "$LLAMA_BIN/llama-bench" -m "$OUT/kimi-linear-bench-$llama_w.gguf" -t "$t" -p 0 -n "$steps" -d 64 -r "$reps" \
        -o json >"$OUT/engines/llama-$llama_w-decode-t$t.json" 2>"$OUT/engines/llama-$llama_w-decode-t$t.log" ||
        die "llama-bench failed; see $OUT/engines/llama-$llama_w-decode-t$t.log"
    done
  done
}

# ---- the servers ----
servers() {
  mkdir -p "$OUT/servers"
  rm -rf "${OUT:?}"/servers/*
  local pairs=(int8:Q8_0) pair glint_w llama_w port container log
  [[ $SERVE_INT4 == 1 ]] && pairs+=(int4:Q4_0)
  for pair in "${pairs[@]}"; do
    glint_w=${pair%%:*} llama_w=${pair##*:}
    container=$GLINT_INT8
    [[ $glint_w == int4 ]] && container=$GLINT_INT4
    port=$(free_port)
    start_glint_server "$container" "$port" "$OUT/servers/glint-serve-$glint_w.log"
    bench_server "glint-$glint_w" "$port"
    stop_server
    port=$(free_port) log=$OUT/servers/llama-server-$llama_w.log
    say "llama-server $llama_w on port $port"
    drop_glint_cached
    # 16 slots of 512 tokens: every request (256 + 64) fits its slot
    "$LLAMA_BIN/llama-server" -m "$OUT/kimi-linear-bench-$llama_w.gguf" --host 127.0.0.1 --port "$port" \
      -t "$THREADS" -np 16 -c 8192 --no-webui >"$log" 2>&1 &
    SERVER_PID=$!
    wait_healthy "$port" "$log"
    bench_server "llama-$llama_w" "$port"
    stop_server
  done
}

report() {
  local when=$1
  {
    echo "# glint against llama.cpp ($when)"
    echo
    report_machine
    echo "- glint containers: int8 $GLINT_INT8, int4 experts $GLINT_INT4"
    echo "- llama.cpp $LLAMA_COMMIT ($LLAMA_SRC); AMX $LLAMA_AMX; models $OUT/kimi-linear-bench-{Q8_0,Q4_0}.gguf"
    echo "- speed-up: glint ÷ llama.cpp for tokens/s, llama.cpp ÷ glint for times (> 1: glint is faster)"
    if [[ $SKIP_ENGINES == 0 ]]; then
      echo
      echo "## Engines (glint bench-model, llama-bench; decode after a 64-token context)"
      echo
      "$PY" "$SCRIPT_DIR/peer_tables.py" engines "$OUT"
    fi
    if [[ $SKIP_SERVERS == 0 ]]; then
      echo
      echo "## Servers (glint bench: 256-token prompts of token ids, tokens timed by logprobs)"
      echo
      "$PY" "$SCRIPT_DIR/peer_tables.py" servers "$OUT"
    fi
  } | tee "$OUT/peer.md"
}

main() {
  parse_args "$@"
  check_tree
  PEER_SRC=$LLAMA_SRC
  start_run "$LLAMA_SRC/gguf-py" gguf.MODEL_ARCH.KIMI_LINEAR
  build_llama
  make_ggufs
  smoke_test_llama
  glint_models
  run_and_report
}

# Sourced (by a test or a partial run), it only defines its functions.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
