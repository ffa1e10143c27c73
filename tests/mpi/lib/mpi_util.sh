# Shared by the black-box tests under mpirun (tests/mpi/cli_*.sh). Source it after setting $glint (the binary) and
# $mpirun. Unless a scratch directory $work exists already (tests/cli/lib/serve_util.sh makes one), it makes $work
# (removed at exit, with its own GLINT_CACHE_DIR) and `fail`. It defines:
#   fail MESSAGE          print FAIL and exit 1
#   ranks N ARGS...       glint ARGS under mpirun -np N on localhost, bounded by `timeout` (a hang fails the test)
#   rank_pid PID RANK     the pid of rank RANK's process below PID (mpirun, or a `timeout` running it)
#   wait_job SECONDS WHAT waits at most SECONDS for the background job $pid to end (else fail "WHAT"), clears
#                         $pid and sets $job_exit to its exit status (not in a subshell: it waits for a child)
#   chat_stream_text      the text of a streamed chat completion (SSE on stdin), as a Python repr on one line
#   long_prompt_answers   (with `post PATH JSON` defined, a server at $base) a long prompt's greedy completion
#                         twice, one repr a line: the second is a prefix-cache hit
#   write_batch_input FILE N  N greedy chat requests (custom_id r0 … rN−1) for `glint batch`
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

chat_stream_text() {
  python3 -c "
import json, sys
text = ''
for line in sys.stdin:
    if line.startswith('data: {'):
        for c in json.loads(line[6:])['choices']:
            text += c['delta'].get('content') or ''
print(repr(text))"
}

long_prompt_answers() {
  local long_prompt
  long_prompt="$(python3 -c "print(' '.join(['the story of a man who went to the sea'] * 20))")"
  for _ in 1 2; do
    post /v1/completions "{\"prompt\": \"$long_prompt\", \"max_tokens\": 8, \"temperature\": 0}" |
      python3 -c "import json,sys; print(repr(json.load(sys.stdin)['choices'][0]['text']))"
  done
}

write_batch_input() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as out:
    for i in range(int(sys.argv[2])):
        body = {"messages": [{"role": "system", "content": "You answer in one short line. " * 8},
                             {"role": "user", "content": f"Question number {i}?"}],
                "max_tokens": 8, "temperature": 0, "ignore_eos": True}
        out.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                              "body": body}) + "\n")
EOF
}
