#!/usr/bin/env bash
# bench/peer/ik_llama.sh without building ik_llama.cpp (which takes most of an hour on two cores):
#  (a) shellcheck is clean (skipped, with the reason, when shellcheck is absent);
#  (b) argument handling: every bad invocation exits 2 with a message naming what was wrong, before anything runs;
#  (c) the tables: peer_tables.py --peer ik on fixture logs of glint bench-model, ik's llama-bench (its tgN@ppM
#      decode test) and glint bench gives the expected speed-ups over ik's better configuration;
#  (d) the correctness gate against a stub server: one answer passes, answers that differ under load fail it;
#  (e) the GGUF writer at the tiny widths: the file it writes passes its own check, and the bench check rejects it.
#      Needs numpy and ik's gguf-py: IK_SOURCE_DIR=TREE, or a python3 that imports gguf; skipped with the reason
#      otherwise.
#  (f) the helpers that keep the two engines' memory apart (bench/peer/lib.sh): the transparent-huge-page mode read,
#      set to 'always' and put back (on a stand-in for the kernel's file), and the page-cache drop of a just-written
#      file (its pages counted by mincore; skipped, with the reason, on tmpfs).

# Args (those of every tests/cli script): path-to-glint, tests/data dir; neither is needed here. Bounded: no
# build, no model, a few seconds.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
script=$root/bench/peer/ik_llama.sh
# shellcheck source-path=SCRIPTDIR source=lib/peer_util.sh
source "$root/tests/cli/lib/peer_util.sh"
stub_pid=""
stop_stub() {
  [[ -z $stub_pid ]] || kill "$stub_pid" 2>/dev/null || true
}
cleanup_commands+=(stop_stub)

# ---- (a) ----
check_shell_scripts "${BASH_SOURCE[0]}" "$root/tests/cli/lib/peer_util.sh"

# ---- (b) ----
bash "$script" --help | grep -q 'usage: bench/peer/ik_llama.sh IK_SOURCE_DIR' || fail "--help prints no usage"
expect_error "IK_SOURCE_DIR is required"
expect_error "'$work/none' is not a directory" "$work/none"
expect_error "unknown option '--serve-int4'" "$work" --serve-int4
expect_error "--threads '0': expected a positive integer" "$work" --threads 0
expect_error "--out needs a value" "$work" --out
expect_error "--build-jobs 'x': expected a positive integer" "$work" --build-jobs x
expect_error "one ik_llama.cpp source directory expected" "$work" "$work"
expect_error "leave nothing to run" "$work" --skip-engines --skip-servers
expect_error "is not an ik_llama.cpp source tree" "$work"
fake=$work/ik  # the files check_tree looks at, and nothing else
mkdir -p "$fake/examples/llama-bench" "$fake/src" "$fake/gguf-py/gguf"
touch "$fake/CMakeLists.txt" "$fake/examples/llama-bench/llama-bench.cpp" "$fake/gguf-py/gguf/constants.py"
echo '{ LLM_ARCH_BAILINGMOE2, "bailingmoe2" },' >"$fake/src/llama-arch.cpp"
expect_error "this ik_llama.cpp has no bailingmoe3 architecture" "$fake"
echo '{ LLM_ARCH_BAILINGMOE3, "bailingmoe3" },' >>"$fake/src/llama-arch.cpp"
expect_error "no python3 that imports numpy and the tree's gguf-py" "$fake" --out "$work/run"
[[ ! -e $work/run ]] || fail "ik_llama.sh created --out before its checks passed"

# ---- (c) ----
out=$work/peer
mkdir -p "$out/engines" "$out/servers/glint-int8-c4" "$out/servers/ik-Q8_0-c4"
cat >"$out/engines/glint-int8-t2.log" <<EOF
== load 2: container (mmap, no conversion), int8 experts, 7.727 GB in 0.50 s = 15.45 GB/s
== prefill 512 tokens: 3.20 s = 160.0 tokens/s; int8 products 661 GOPS = 50% of the VNNI peak
== prefill 4096 tokens: 32.00 s = 128.0 tokens/s; int8 products 661 GOPS = 50% of the VNNI peak
== decode 1 sequence (context 64): 100.0 ms/step = 10.00 tokens/s; 2.084 GB of weights per step
EOF
ik_json() {  # prefill 512 tok/s, prefill 4096 tok/s, decode tok/s, variant
  echo "[{\"n_prompt\": 512, \"n_gen\": 0, \"test\": \"pp512\", \"avg_ts\": $1, \"model_size\": 8100000000},
         {\"n_prompt\": 4096, \"n_gen\": 0, \"test\": \"pp4096\", \"avg_ts\": $2, \"model_size\": 8100000000}]" \
    >"$out/engines/ik-$4-prefill-t2.json"
  echo "[{\"n_prompt\": 64, \"n_gen\": 16, \"test\": \"tg16@pp64\", \"avg_ts\": $3, \"model_size\": 8100000000}]" \
    >"$out/engines/ik-$4-decode-t2.json"
}
ik_json 40.0 30.0 5.0 rtr
ik_json 80.0 20.0 4.0 rtr-muge
"$python" "$root/bench/peer/peer_tables.py" engines "$out" --peer ik >"$work/engines.md" ||
  fail "peer_tables.py engines --peer ik failed"
for row in '| prefill 512 tokens, tok/s | 2 | 160.0 | 40.0 | 80.0 | **2.00×** |' \
  '| prefill 4,096 tokens, tok/s | 2 | 128.0 | 30.0 | 20.0 | **4.27×** |' \
  '| decode, 1 sequence, tok/s | 2 | 10.0 | 5.0 | 4.0 | **2.00×** |' '| weights, GB | | 7.727 | 8.100 | 8.100 | |'; do
  grep -qF "$row" "$work/engines.md" || fail "engine table lacks '$row': $(cat "$work/engines.md")"
done
level() {  # ttft ms, tpot ms, total tok/s
  echo "{\"levels\": [{\"concurrency\": 4, \"failed\": 0, \"ttft_ms\": {\"median\": $1}, \"tpot_ms\": {\"median\": $2},
         \"total_throughput\": $3}]}"
}
level 1000 100 80 >"$out/servers/glint-int8-c4/results.json"
level 2000 150 40 >"$out/servers/ik-Q8_0-c4/results.json"
"$python" "$root/bench/peer/peer_tables.py" servers "$out" --peer ik >"$work/servers.md" ||
  fail "peer_tables.py servers --peer ik failed"
grep -qF '| int8 / Q8_0 | 4 | 1,000 / 2,000 | **2.00×** | 100.0 / 150.0 | **1.50×** | 80.0 / 40.0 | **2.00×** | 0/0 |' \
  "$work/servers.md" || fail "server table: $(cat "$work/servers.md")"

# ---- (d) ----
# A stub /v1/completions. STUB_MODE: legacy / content answer one text in the legacy logprobs form (glint's) or the
# chat form with token ids (llama-server's); drift-text / drift-logprob answer differently from the third request
# on, in the text or only in a logprob (as a server that mixes up sequences would; glint's random bench model
# decodes its tokens to empty text, so there only the logprobs tell).
cat >"$work/stub.py" <<'EOF'
import http.server, json, os, threading
count, lock, mode = [0], threading.Lock(), os.environ["STUB_MODE"]
class Stub(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self.reply({"data": [{"id": "stub"}]})
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert request["temperature"] == 0 and request["logprobs"] == 1 and isinstance(request["prompt"], list)
        with lock:
            count[0] += 1
            n = count[0]
        drift = n >= 3 and mode.startswith("drift")
        text = f" t{n}" if drift and mode == "drift-text" else " t5 t6"
        logprobs = [-1.5, -2.0 - (0.5 if drift and mode == "drift-logprob" else 0.01 * (n % 2))]
        if mode == "content":
            choice_logprobs = {"content": [{"id": 5 + i, "token": f" t{5 + i}", "logprob": lp}
                                           for i, lp in enumerate(logprobs)]}
        else:
            choice_logprobs = {"tokens": ["", ""], "token_logprobs": logprobs}
        self.reply({"choices": [{"text": text, "logprobs": choice_logprobs}]})
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
print(server.server_address[1], flush=True)
server.serve_forever()
EOF
gate_against() {  # stub mode; prints the gate's exit status
  local port rc=0
  STUB_MODE=$1 "$python" "$work/stub.py" >"$work/port" &
  stub_pid=$!
  for _ in $(seq 50); do [[ -s $work/port ]] && break; sleep 0.1; done
  port=$(cat "$work/port")
  timeout 30 "$python" "$root/bench/peer/greedy_gate.py" --base-url "http://127.0.0.1:$port" --sequences 4 \
    --timeout 10 >"$work/gate" 2>&1 || rc=$?
  kill "$stub_pid"
  wait "$stub_pid" 2>/dev/null || true
  stub_pid=""
  : >"$work/port"
  echo "$rc"
}
for mode in legacy content; do  # logprobs 0.01 apart pass: within the tolerance of batched rounding
  [[ $(gate_against $mode) == 0 ]] || fail "the gate rejects one answer ($mode): $(cat "$work/gate")"
  grep -qF "greedy gate passed: 1 alone + 4 at once" "$work/gate" || fail "gate message: $(cat "$work/gate")"
done
for mode in drift-text drift-logprob; do
  [[ $(gate_against $mode) == 1 ]] || fail "the gate passes differing answers ($mode): $(cat "$work/gate")"
  grep -qF "greedy gate FAILED: 3 of 4 answers sent at once differ" "$work/gate" ||
    fail "gate message ($mode): $(cat "$work/gate")"
done

# ---- (f) ----
(
  # shellcheck disable=SC2030,SC2034  # these globals are lib.sh's, set here in a subshell on purpose
  PEER_NAME=peer-test THP_FILE=$work/thp PY=$python
  # shellcheck source-path=SCRIPTDIR source=../../bench/peer/lib.sh
  source "$root/bench/peer/lib.sh"
  echo 'always [madvise] never' >"$THP_FILE"
  [[ $(thp_mode) == madvise ]] || fail "thp_mode of '$(cat "$THP_FILE")': $(thp_mode)"
  set_thp_always 2>"$work/thp.err"
  [[ $(cat "$THP_FILE") == always ]] || fail "set_thp_always wrote '$(cat "$THP_FILE")'"
  grep -qF "set to 'always' for this run (were 'madvise'" "$work/thp.err" || fail "message: $(cat "$work/thp.err")"
  restore_thp
  [[ $(cat "$THP_FILE") == madvise ]] || fail "restore_thp wrote '$(cat "$THP_FILE")'"
  echo '[always] madvise never' >"$THP_FILE"
  set_thp_always 2>/dev/null
  [[ -z $THP_BEFORE && $(cat "$THP_FILE") == '[always] madvise never' ]] || fail "set_thp_always rewrote 'always'"
  THP_FILE=$work/no-thp
  [[ $(thp_mode) == unknown ]] || fail "thp_mode without the file: $(thp_mode)"
  rc=0
  (set_thp_always) 2>"$work/thp.err" || rc=$?
  [[ $rc -eq 2 ]] && grep -qF "this kernel has no $work/no-thp" "$work/thp.err" ||
    fail "set_thp_always without the file: exit $rc, $(cat "$work/thp.err")"
  # A file just written (dirty pages, which DONTNEED alone leaves) must leave the cache; residency from mincore(2).
  head -c 1048576 /dev/urandom >"$work/weights"
  resident() {
    "$python" - "$1" <<'PYEOF'
import ctypes, mmap, os, sys
size = os.path.getsize(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
with open(sys.argv[1], "rb") as f:
    base = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
    if base in (None, ctypes.c_void_p(-1).value):
        sys.exit("mmap failed: " + os.strerror(ctypes.get_errno()))
    vec = (ctypes.c_ubyte * ((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE))()
    if libc.mincore(base, size, vec) != 0:
        sys.exit("mincore failed: " + os.strerror(ctypes.get_errno()))
    print(sum(v & 1 for v in vec))
PYEOF
  }
  drop_cached "$work/weights" "$work/not-made-yet" || fail "drop_cached failed"
  if [[ $(stat -f -c %T "$work") == tmpfs ]]; then
    echo "skipped (f) page-cache drop: $work is on tmpfs, whose pages cannot leave memory"
  else
    pages=$(resident "$work/weights") || fail "reading the page-cache residency of $work/weights failed"
    [[ $pages == 0 ]] || fail "drop_cached left $pages pages of a just-written file in the page cache"
  fi
) || exit 1

# ---- (e) ----
gguf_path=$root/bench/peer
[[ -z ${IK_SOURCE_DIR:-} ]] || gguf_path=$IK_SOURCE_DIR/gguf-py:$gguf_path
if ! PYTHONPATH=$gguf_path "$python" -c 'import numpy, gguf, gguf.quants' 2>/dev/null; then
  echo "skipped (e): no gguf-py (set IK_SOURCE_DIR to an ik_llama.cpp tree) or no numpy"
  echo "PASS (a-d, f)"
  exit 0
fi
check_gguf_writer "$root/bench/peer/bailingmoe3_gguf.py" "$gguf_path" bailingmoe3
echo "PASS"
