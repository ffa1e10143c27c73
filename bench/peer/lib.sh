# shellcheck shell=bash
# shellcheck disable=SC2034  # the globals set here are read by the sourcing script
# Shared by the peer scripts (bench/peer/llama_cpp.sh, bench/peer/ik_llama.sh): messages, argument checks, the
# peer's CMake build, glint's side of the comparison (containers, bench-model, glint serve) and the server
# workload. Sourced, never run; the sourcing script sets PEER_NAME (its file name, for messages) first, and the
# globals each function names (OUT, GLINT, QUICK, THREADS, PY, ...) before calling it.

die() {
  echo "$PEER_NAME: error: $*" >&2
  exit 2
}

say() {
  echo "== peer: $*" >&2
}

need_value() {  # flag, value count left
  [[ $2 -ge 2 ]] || die "$1 needs a value"
}

positive_int() {  # flag, value
  [[ $2 =~ ^[1-9][0-9]{0,5}$ ]] || die "$1 '$2': expected a positive integer"
}

# The options both scripts take. Sets PEER_OPTION_ARGS to the number of arguments the option at $1 used (0: not
# one of these), for the caller to shift.
common_option() {  # the remaining arguments
  PEER_OPTION_ARGS=2
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --out) need_value "$1" $#; OUT=$2 ;;
    --threads) need_value "$1" $#; positive_int "$1" "$2"; THREADS=$2 ;;
    --glint) need_value "$1" $#; GLINT=$2 ;;
    --glint-model) need_value "$1" $#; GLINT_MODEL=$2 ;;
    --glint-int8) need_value "$1" $#; GLINT_INT8=$2 ;;
    --build-jobs) need_value "$1" $#; positive_int "$1" "$2"; BUILD_JOBS=$2 ;;
    --quick) QUICK=1; PEER_OPTION_ARGS=1 ;;
    --skip-engines) SKIP_ENGINES=1; PEER_OPTION_ARGS=1 ;;
    --skip-servers) SKIP_SERVERS=1; PEER_OPTION_ARGS=1 ;;
    --thp-always) THP_ALWAYS=1; PEER_OPTION_ARGS=1 ;;
    *) PEER_OPTION_ARGS=0 ;;
  esac
}

# The arguments: the options above, the script's own through its peer_option (which sets PEER_OPTION_ARGS as
# common_option does), and one source directory, left in PEER_SRC.
parse_peer_args() {  # the source directory's name in the usage line, the peer's name, the arguments...
  local usage_name=$1 peer=$2
  shift 2
  PEER_SRC=""
  while [[ $# -gt 0 ]]; do
    common_option "$@"
    [[ $PEER_OPTION_ARGS -gt 0 ]] || peer_option "$@"
    if [[ $PEER_OPTION_ARGS -gt 0 ]]; then
      shift "$PEER_OPTION_ARGS"
      continue
    fi
    [[ $1 != -* ]] || die "unknown option '$1' (see --help)"
    [[ -z $PEER_SRC ]] || die "one $peer source directory expected, got '$PEER_SRC' and '$1'"
    PEER_SRC=$1
    shift
  done
  [[ -n $PEER_SRC ]] || { usage >&2; die "$usage_name is required"; }
  [[ $SKIP_ENGINES == 1 && $SKIP_SERVERS == 1 ]] && die "--skip-engines and --skip-servers leave nothing to run"
  THREADS=${THREADS:-$(nproc)}
  BUILD_JOBS=${BUILD_JOBS:-$(nproc)}
}

tree_commit() {  # source tree: its short commit, for the report
  git -C "$1" rev-parse --short=8 HEAD 2>/dev/null || echo "unknown (not a git work tree)"
}

# Debian's python3 first: python3-numpy (scripts/setup.sh) installs there; PYTHON=... overrides. The tree's
# gguf-py must import and pass the peer's own check (a Python expression after `import numpy, gguf`).
find_python() {  # gguf-py directory, check
  local candidate
  for candidate in "${PYTHON:-}" /usr/bin/python3 python3; do
    [[ -n $candidate ]] || continue
    if PYTHONPATH="$1" "$candidate" -c "import numpy, gguf; $2" 2>/dev/null; then
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

# After the checks, before anything is made: the tools, glint, the work directory, the load at the start.
start_run() {  # the tree's gguf-py directory, the check find_python runs
  command -v cmake >/dev/null || die "cmake is missing (scripts/setup.sh)"
  command -v curl >/dev/null || die "curl is missing (scripts/setup.sh)"
  find_python "$1" "$2"
  find_glint
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
  RUN_STARTED=$SECONDS
  if [[ ${THP_ALWAYS:-0} == 1 ]]; then
    set_thp_always
  elif [[ $(thp_mode) != always ]]; then
    say "transparent huge pages are '$(thp_mode)': the peer's repacked weights (anonymous memory) stay on 4 KB" \
      "pages, which is not the peer at its best (measured for ik: prefill 1.20x with 'always');" \
      "--thp-always sets it for the run"
  fi
}

# ---- the machine's memory between engines ----
# Transparent huge pages. Run-time repacking (ik's -rtr, llama.cpp's CPU repack) copies the weights into anonymous
# memory, which the kernel backs with 2 MB pages only under 'always' ('madvise', a common default, leaves them on
# 4 KB pages unless the program asks, and the peers do not; glint advises its own mappings). Measured on a 2-core
# Zen 5 (docs/performance.md): ik's 512-token prefill 1.04-1.39x with 'always', its run-to-run spread a third.
# --thp-always sets 'always' for the run and puts the previous mode back at exit.
THP_FILE=${THP_FILE:-/sys/kernel/mm/transparent_hugepage/enabled}
THP_BEFORE=""
thp_mode() {  # the bracketed choice of THP_FILE ("unknown" where the kernel has none)
  local line
  [[ -r $THP_FILE ]] || { echo unknown; return; }
  line=$(cat "$THP_FILE")
  if [[ $line =~ \[([a-z]+)\] ]]; then
    echo "${BASH_REMATCH[1]}"
  else
    echo "$line"
  fi
}

set_thp_always() {
  local mode
  mode=$(thp_mode)
  [[ $mode != unknown ]] || die "--thp-always: this kernel has no $THP_FILE (no transparent huge pages)"
  [[ $mode == always ]] && return 0
  [[ -w $THP_FILE ]] || die "--thp-always needs to write $THP_FILE (run as root), which is '$mode' now"
  echo always >"$THP_FILE" || die "--thp-always: writing 'always' to $THP_FILE failed"
  THP_BEFORE=$mode
  say "transparent huge pages set to 'always' for this run (were '$mode'; put back at exit)"
}

restore_thp() {
  [[ -z $THP_BEFORE ]] && return 0
  echo "$THP_BEFORE" >"$THP_FILE" 2>/dev/null || echo "$PEER_NAME: could not put '$THP_BEFORE' back into $THP_FILE" >&2
  THP_BEFORE=""
}

# The page cache. Both engines' weights (≈ 7.5 GB each, and a repacked copy of the peer's) do not fit a 24 GB
# machine together: whichever ran last had evicted part of the other's file, which then came back in 4 KB pages
# (glint's container 65-74 % on 2 MB pages instead of 99 %). Before each engine runs, the other's files leave the
# cache (posix_fadvise DONTNEED: pages a live process maps stay), so each runs as it would alone on the machine.
# DONTNEED leaves dirty pages (a GGUF written minutes before), so the file is written back first.
drop_cached() {  # files...; those that do not exist are skipped (not made yet)
  "$PY" - "$@" <<'PYEOF'
import os, sys
for path in sys.argv[1:]:
    if os.path.isfile(path):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
PYEOF
}

drop_glint_cached() {  # before a peer's run: glint's containers
  local files=("$GLINT_INT8/model.glint")
  [[ -n ${GLINT_INT4:-} ]] && files+=("$GLINT_INT4/model.glint")
  drop_cached "${files[@]}"
}

# The comparisons the options ask for, then the script's report.
run_and_report() {
  [[ $SKIP_ENGINES == 1 ]] || engines
  [[ $SKIP_SERVERS == 1 ]] || servers
  report "$([[ $QUICK == 1 ]] && echo "--quick settings, not for publishing" || echo "full settings")"
  say "done in $(((SECONDS - RUN_STARTED) / 60)) min; tables in $OUT/peer.md"
}

# ---- the peer's build ----
# Configures once (a build directory with a CMakeCache.txt is reused) and builds PEER_TARGETS of PEER_SRC with
# PEER_CMAKE_FLAGS plus the extra configure flags; the log says why when it fails.
cmake_build() {  # build dir, log, extra configure flags...
  local dir=$1 log=$2
  shift 2
  if [[ ! -f $dir/CMakeCache.txt ]]; then
    cmake -S "$PEER_SRC" -B "$dir" "${PEER_CMAKE_FLAGS[@]}" "$@" >"$log" 2>&1 || return 1
  fi
  cmake --build "$dir" --config Release -j "$BUILD_JOBS" --target "${PEER_TARGETS[@]}" >>"$log" 2>&1
}

# ---- glint's side ----
# A container converted from the bench checkpoint unless it is there; the checkpoint is made first if missing.
ensure_glint_container() {  # container dir, experts (int8|int4)
  [[ -f $1/model.glint ]] && return 0
  if [[ ! -f $GLINT_MODEL/model.safetensors ]]; then
    say "no bench checkpoint at $GLINT_MODEL: glint make-tiny --preset bench (≈ 20 min)"
    "$GLINT" make-tiny --preset bench --out "$GLINT_MODEL" >&2
  fi
  say "glint convert --experts $2 → $1"
  "$GLINT" convert --model "$GLINT_MODEL" --out "$1" --experts "$2" >&2
}

glint_bench_model() {  # container, threads, prompt lengths, decode steps, repetitions, log
  drop_cached "${PEER_WEIGHTS[@]}"
  "$GLINT" bench-model --model "$1" --threads "$2" --prompts "$3" --batches 1 --context 64 --steps "$4" \
    --repetitions "$5" >"$6" 2>&1 || die "glint bench-model failed; see $6"
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
peer_cleanup() {
  stop_server
  restore_thp
}
trap peer_cleanup EXIT

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

start_glint_server() {  # container, port, log
  say "glint serve $1 on port $2"
  drop_cached "${PEER_WEIGHTS[@]}"
  "$GLINT" serve --model "$1" --port "$2" --threads "$THREADS" --max-seqs 16 --memory 2G --no-request-log \
    >"$3" 2>&1 &
  SERVER_PID=$!
  wait_healthy "$2" "$3"
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

# The report's first lines: the machine and glint's build.
report_machine() {
  echo "- machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs," \
    "$THREADS threads as \"all\"; load average at the start $LOAD_START, at the end $(cut -d' ' -f1 /proc/loadavg)"
  echo "- glint $(git -C "$REPO_DIR" rev-parse --short=7 HEAD 2>/dev/null || echo unknown) ($GLINT)"
  local thp
  thp="'$(thp_mode)'"
  [[ -n $THP_BEFORE ]] && thp+=" (set by --thp-always; '$THP_BEFORE' before)"
  echo "- transparent huge pages: $thp, each engine run with the other's weights dropped from the page cache"
}

# " (SIGILL)" for an exit status of 128 + a signal number, nothing otherwise.
exit_signal() {  # exit status
  [[ $1 -gt 128 ]] && echo " (SIG$(kill -l $(($1 - 128)) 2>/dev/null || echo "$(($1 - 128))"))"
  return 0
}

# The first line of a log that says what went wrong (an assertion, an error), else its last line.
first_error_line() {  # log
  local line
  line=$(grep -m1 -E 'GGML_ASSERT|error|Error|abort|Illegal' "$1" 2>/dev/null || true)
  [[ -n $line ]] || line=$(tail -n1 "$1" 2>/dev/null || true)
  echo "${line:0:200}"
}
