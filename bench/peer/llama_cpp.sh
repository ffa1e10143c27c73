#!/usr/bin/env bash
# The peer comparison in one command: glint against llama.cpp on the same model widths, engines then servers.
# docs/performance.md "Peer comparison" says what it measures, how the two models differ and how long it takes.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/../.." && pwd)

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
  -h, --help          this text
EOF
}

die() {
  echo "llama_cpp.sh: error: $*" >&2
  exit 2
}

say() {
  echo "== peer: $*" >&2
}

# ---- arguments ----
LLAMA_SRC="" OUT=/tmp/glint-peer THREADS="" GLINT="" GLINT_MODEL="" GLINT_INT8="" GLINT_INT4=""
SERVE_INT4=0 QUICK=0 BUILD_JOBS="" SKIP_ENGINES=0 SKIP_SERVERS=0 LLAMA_COMMIT=""

need_value() {  # flag, value count left
  [[ $2 -ge 2 ]] || die "$1 needs a value"
}

positive_int() {  # flag, value
  [[ $2 =~ ^[1-9][0-9]{0,5}$ ]] || die "$1 '$2': expected a positive integer"
}

parse_args() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      -h | --help) usage; exit 0 ;;
      --out) need_value "$1" $#; OUT=$2; shift 2 ;;
      --threads) need_value "$1" $#; positive_int "$1" "$2"; THREADS=$2; shift 2 ;;
      --glint) need_value "$1" $#; GLINT=$2; shift 2 ;;
      --glint-model) need_value "$1" $#; GLINT_MODEL=$2; shift 2 ;;
      --glint-int8) need_value "$1" $#; GLINT_INT8=$2; shift 2 ;;
      --glint-int4) need_value "$1" $#; GLINT_INT4=$2; shift 2 ;;
      --build-jobs) need_value "$1" $#; positive_int "$1" "$2"; BUILD_JOBS=$2; shift 2 ;;
      --llama-commit) need_value "$1" $#; LLAMA_COMMIT=$2; shift 2 ;;
      --serve-int4) SERVE_INT4=1; shift ;;
      --quick) QUICK=1; shift ;;
      --skip-engines) SKIP_ENGINES=1; shift ;;
      --skip-servers) SKIP_SERVERS=1; shift ;;
      -*) die "unknown option '$1' (see --help)" ;;
      *)
        [[ -z $LLAMA_SRC ]] || die "one llama.cpp source directory expected, got '$LLAMA_SRC' and '$1'"
        LLAMA_SRC=$1; shift ;;
    esac
  done
  [[ -n $LLAMA_SRC ]] || { usage >&2; die "LLAMA_CPP_SOURCE_DIR is required"; }
  [[ $SKIP_ENGINES == 1 && $SKIP_SERVERS == 1 ]] && die "--skip-engines and --skip-servers leave nothing to run"
  THREADS=${THREADS:-$(nproc)}
  BUILD_JOBS=${BUILD_JOBS:-$(nproc)}
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
    LLAMA_COMMIT=$(git -C "$LLAMA_SRC" rev-parse --short=7 HEAD 2>/dev/null || echo "unknown (not a git work tree)")
  fi
}

# Debian's python3 first: python3-numpy (scripts/setup.sh) installs there; PYTHON=... overrides.
find_python() {
  local candidate
  for candidate in "${PYTHON:-}" /usr/bin/python3 python3; do
    [[ -n $candidate ]] || continue
    if PYTHONPATH="$LLAMA_SRC/gguf-py" "$candidate" -c 'import numpy, gguf; gguf.MODEL_ARCH.KIMI_LINEAR' 2>/dev/null; then
      PY=$candidate
      return
    fi
  done
  die "no python3 that imports numpy and the tree's gguf-py (apt-get install python3-numpy; scripts/setup.sh)"
}

find_glint() {
  if [[ -z $GLINT ]]; then
    for GLINT in "$REPO_DIR/build/release/src/cli/glint" "$REPO_DIR/build/ci/src/cli/glint"; do
      [[ -x $GLINT ]] && break
    done
  fi
  [[ -x $GLINT ]] || die "no glint binary (build it: cmake --preset release && cmake --build --preset release \
--target glint; or pass --glint BIN)"
}

# ---- llama.cpp ----
LLAMA_CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF)
LLAMA_TARGETS=(llama-bench llama-quantize llama-server)

cmake_build() {  # build dir, log, extra configure flags...
  local dir=$1 log=$2
  shift 2
  if [[ ! -f $dir/CMakeCache.txt ]]; then
    cmake -S "$LLAMA_SRC" -B "$dir" "${LLAMA_CMAKE_FLAGS[@]}" "$@" >"$log" 2>&1 || return 1
  fi
  cmake --build "$dir" --config Release -j "$BUILD_JOBS" --target "${LLAMA_TARGETS[@]}" >>"$log" 2>&1
}

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
  say "building ${LLAMA_TARGETS[*]} of llama.cpp $LLAMA_COMMIT in $native (log $native.log; up to date: seconds)"
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
}

# A short llama-bench on each GGUF before the long runs: the file loads and runs in this llama.cpp. An illegal
# instruction in the native build (gcc 12 has dropped the stores of llama.cpp's AMX tile configuration before)
# falls back to the build without AMX, as a failed build does.
smoke_test_llama() {
  local type rc
  for type in Q8_0 Q4_0; do
    rc=0
    "$LLAMA_BIN/llama-bench" -m "$OUT/kimi-linear-bench-$type.gguf" -t "$THREADS" -p 16 -n 1 -r 1 \
      >"$OUT/smoke-$type.log" 2>&1 || rc=$?
    if [[ $rc -eq 132 && $LLAMA_BIN != "$OUT/llama.cpp-build-noamx/bin" ]]; then
      say "llama-bench died of an illegal instruction (see $OUT/smoke-$type.log); building without AMX"
      build_llama_without_amx "llama-bench died of SIGILL with the native build ($OUT/smoke-$type.log)"
      smoke_test_llama
      return
    fi
    [[ $rc -eq 0 ]] || die "llama-bench cannot run $OUT/kimi-linear-bench-$type.gguf (exit $rc); see $OUT/smoke-$type.log"
  done
  grep -q 'AMX' "$OUT"/smoke-*.log && LLAMA_AMX="$LLAMA_AMX; llama-bench reports AMX buffers"
  return 0
}

glint_models() {
  GLINT_INT8=${GLINT_INT8:-$OUT/glint-bench-int8}
  GLINT_INT4=${GLINT_INT4:-$OUT/glint-bench-int4}
  GLINT_MODEL=${GLINT_MODEL:-$OUT/glint-bench-model}
  local dir experts
  for experts in int8 int4; do
    dir=$GLINT_INT8
    [[ $experts == int4 ]] && dir=$GLINT_INT4
    [[ -f $dir/model.glint ]] && continue
    if [[ ! -f $GLINT_MODEL/model.safetensors ]]; then
      say "no bench checkpoint at $GLINT_MODEL: glint make-tiny --preset bench (≈ 20 min)"
      "$GLINT" make-tiny --preset bench --out "$GLINT_MODEL" >&2
    fi
    say "glint convert --experts $experts → $dir"
    "$GLINT" convert --model "$GLINT_MODEL" --out "$dir" --experts "$experts" >&2
  done
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
      "$GLINT" bench-model --model "$container" --threads "$t" --prompts "$prompts" --batches 1 --context 64 \
        --steps "$steps" --repetitions "$reps" >"$OUT/engines/glint-$glint_w-t$t.log" 2>&1 ||
        die "glint bench-model failed; see $OUT/engines/glint-$glint_w-t$t.log"
      say "llama-bench $llama_w, $t thread(s)"
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
SERVER_PID=""
stop_server() {
  if [[ -n $SERVER_PID ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}
trap stop_server EXIT

free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_healthy() {  # port, log; up to 15 minutes (a cold 8 GB load from a slow disk)
  local i
  for ((i = 0; i < 900; i++)); do
    kill -0 "$SERVER_PID" 2>/dev/null || die "the server exited while starting; see $2"
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    sleep 1
  done
  die "the server did not answer /health within 15 minutes; see $2"
}

# One glint bench run per concurrency level, so that each level gets 4 × its concurrency requests.
bench_server() {  # name, port
  local c input=256 output=64 levels=(1 4 16) factor=4
  [[ $QUICK == 1 ]] && output=16 levels=(1 4) factor=1
  for c in "${levels[@]}"; do
    say "glint bench against $1, concurrency $c"
    "$GLINT" bench --base-url "http://127.0.0.1:$2" --prompt-format token-ids --token-id-range 3:154820 \
      --count-tokens logprobs --input-len "$input" --output-len "$output" --concurrency "$c" \
      --prompts-per-level $((factor * c)) --warmup-requests "$c" --request-timeout 600 --seed 16 --no-progress \
      --label "$1" --out "$OUT/servers/$1-c$c" >"$OUT/servers/$1-c$c.log" 2>&1 ||
      die "glint bench failed; see $OUT/servers/$1-c$c.log"
  done
}

servers() {
  mkdir -p "$OUT/servers"
  rm -rf "${OUT:?}"/servers/*
  local pairs=(int8:Q8_0) pair glint_w llama_w port container log
  [[ $SERVE_INT4 == 1 ]] && pairs+=(int4:Q4_0)
  for pair in "${pairs[@]}"; do
    glint_w=${pair%%:*} llama_w=${pair##*:}
    container=$GLINT_INT8
    [[ $glint_w == int4 ]] && container=$GLINT_INT4
    port=$(free_port) log=$OUT/servers/glint-serve-$glint_w.log
    say "glint serve $container on port $port"
    "$GLINT" serve --model "$container" --port "$port" --threads "$THREADS" --max-seqs 16 --memory 2G \
      --no-request-log >"$log" 2>&1 &
    SERVER_PID=$!
    wait_healthy "$port" "$log"
    bench_server "glint-$glint_w" "$port"
    stop_server
    port=$(free_port) log=$OUT/servers/llama-server-$llama_w.log
    say "llama-server $llama_w on port $port"
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
    echo "- machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs," \
      "$THREADS threads as \"all\"; load average at the start $LOAD_START, at the end $(cut -d' ' -f1 /proc/loadavg)"
    echo "- glint $(git -C "$REPO_DIR" rev-parse --short=7 HEAD 2>/dev/null || echo unknown) ($GLINT);" \
      "int8 $GLINT_INT8, int4 experts $GLINT_INT4"
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
  command -v cmake >/dev/null || die "cmake is missing (scripts/setup.sh)"
  command -v curl >/dev/null || die "curl is missing (scripts/setup.sh)"
  find_python
  find_glint
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
  local started=$SECONDS
  build_llama
  make_ggufs
  smoke_test_llama
  glint_models
  [[ $SKIP_ENGINES == 1 ]] || engines
  [[ $SKIP_SERVERS == 1 ]] || servers
  report "$([[ $QUICK == 1 ]] && echo "--quick settings, not for publishing" || echo "full settings")"
  say "done in $(((SECONDS - started) / 60)) min; tables in $OUT/peer.md"
}

# Sourced (by a test or a partial run), it only defines its functions.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
