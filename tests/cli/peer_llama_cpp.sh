#!/usr/bin/env bash
# bench/peer/llama_cpp.sh without building llama.cpp (which takes an hour on two cores):
#  (a) shellcheck is clean (skipped, with the reason, when shellcheck is absent);
#  (b) argument handling: every bad invocation exits 2 with a message naming what was wrong, before anything runs;
#  (c) the tables: peer_tables.py on fixture logs of glint bench-model, llama-bench and glint bench gives the
#      expected speed-ups;
#  (d) the GGUF writer at the tiny widths: the file it writes passes its own check, and a file with a wrong width
#      fails it. Needs numpy and llama.cpp's gguf-py: LLAMA_CPP_SOURCE_DIR=TREE, or a python3 that imports gguf;
#      skipped with the reason otherwise.
# Args (those of every tests/cli script): path-to-glint, tests/data dir; neither is needed here. Bounded: no
# build, no model, a few seconds.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
script=$root/bench/peer/llama_cpp.sh
# shellcheck source-path=SCRIPTDIR source=lib/peer_util.sh
source "$root/tests/cli/lib/peer_util.sh"

# ---- (a) ----
check_shell_scripts "${BASH_SOURCE[0]}" "$root/tests/cli/lib/peer_util.sh"

# ---- (b) ----
bash "$script" --help | grep -q 'usage: bench/peer/llama_cpp.sh LLAMA_CPP_SOURCE_DIR' || fail "--help prints no usage"
expect_error "LLAMA_CPP_SOURCE_DIR is required"
expect_error "'$work/none' is not a directory" "$work/none"
expect_error "unknown option '--bogus'" "$work" --bogus
expect_error "--threads 'two': expected a positive integer" "$work" --threads two
expect_error "--threads needs a value" "$work" --threads
expect_error "--build-jobs '0': expected a positive integer" "$work" --build-jobs 0
expect_error "one llama.cpp source directory expected" "$work" "$work"
expect_error "leave nothing to run" "$work" --skip-engines --skip-servers
expect_error "is not a llama.cpp source tree" "$work"
fake=$work/llama.cpp  # the files check_tree looks at, and nothing else
mkdir -p "$fake/tools/llama-bench" "$fake/gguf-py/gguf"
touch "$fake/CMakeLists.txt" "$fake/tools/llama-bench/llama-bench.cpp"
echo 'MODEL_ARCH_NAMES = {"llama": 1}' >"$fake/gguf-py/gguf/constants.py"
expect_error "this llama.cpp has no Kimi-Linear architecture" "$fake"
echo '    MODEL_ARCH.KIMI_LINEAR: "kimi-linear",' >>"$fake/gguf-py/gguf/constants.py"
expect_error "no python3 that imports numpy and the tree's gguf-py" "$fake" --out "$work/run"
[[ ! -e $work/run ]] || fail "llama_cpp.sh created --out before its checks passed"

# ---- (c) ----
out=$work/peer
mkdir -p "$out/engines" "$out/servers/glint-int8-c4" "$out/servers/llama-Q8_0-c4"
for weights in int8 int4; do
  cat >"$out/engines/glint-$weights-t2.log" <<EOF
== load 2: container (mmap, no conversion), $weights experts, 7.727 GB in 0.50 s = 15.45 GB/s
== prefill 512 tokens: 3.20 s = 160.0 tokens/s; int8 products 661 GOPS = 50% of the VNNI peak
== decode 1 sequence (context 64): 100.0 ms/step = 10.00 tokens/s; 2.084 GB of weights per step
EOF
done
for weights in Q8_0 Q4_0; do
  echo "[{\"n_prompt\": 512, \"n_gen\": 0, \"avg_ts\": 40.0, \"model_size\": 8000000000}]" \
    >"$out/engines/llama-$weights-prefill-t2.json"
  echo "[{\"n_prompt\": 0, \"n_gen\": 16, \"n_depth\": 64, \"avg_ts\": 5.0, \"model_size\": 8000000000}]" \
    >"$out/engines/llama-$weights-decode-t2.json"
done
"$python" "$root/bench/peer/peer_tables.py" engines "$out" >"$work/engines.md" || fail "peer_tables.py engines failed"
grep -qF '| prefill 512 tokens, tok/s | 2 | 160.0 | 40.0 | **4.00×** |' "$work/engines.md" ||
  fail "engine table: $(cat "$work/engines.md")"
grep -qF '| decode, 1 sequence, tok/s | 2 | 10.0 | 5.0 | **2.00×** |' "$work/engines.md" ||
  fail "engine table: $(cat "$work/engines.md")"
level() {  # ttft ms, tpot ms, total tok/s
  echo "{\"levels\": [{\"concurrency\": 4, \"failed\": 0, \"ttft_ms\": {\"median\": $1}, \"tpot_ms\": {\"median\": $2},
         \"total_throughput\": $3}]}"
}
level 1000 100 80 >"$out/servers/glint-int8-c4/results.json"
level 3000 250 20 >"$out/servers/llama-Q8_0-c4/results.json"
"$python" "$root/bench/peer/peer_tables.py" servers "$out" >"$work/servers.md" || fail "peer_tables.py servers failed"
grep -qF '| int8 / Q8_0 | 4 | 1,000 / 3,000 | **3.00×** | 100.0 / 250.0 | **2.50×** | 80.0 / 20.0 | **4.00×** | 0/0 |' \
  "$work/servers.md" || fail "server table: $(cat "$work/servers.md")"

# ---- (d) ----
gguf_path=""
if [[ -n ${LLAMA_CPP_SOURCE_DIR:-} ]]; then
  gguf_path=$LLAMA_CPP_SOURCE_DIR/gguf-py
fi
if ! PYTHONPATH=$gguf_path "$python" -c 'import numpy, gguf' 2>/dev/null; then
  echo "skipped (d): no gguf-py (set LLAMA_CPP_SOURCE_DIR to a llama.cpp tree with Kimi-Linear) or no numpy"
  echo "PASS (a-c)"
  exit 0
fi
check_gguf_writer "$root/bench/peer/kimi_linear_gguf.py" "$gguf_path" kimi-linear
echo "PASS"
