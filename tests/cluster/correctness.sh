#!/usr/bin/env bash
# shellcheck disable=SC2154  # $base: set by start_cluster_server (tests/cli/lib/serve_util.sh)
# glint across 2 and 4 emulated hosts (docs/distributed.md "Several hosts on one machine"), each host loading the
# weights from its own copy of the container, against one process: greedy `run` text identical at --tp 1 and --tp 2
# (and --tp 2 --ep 2 on 4 hosts); `score` logits within the tolerance of docs/distributed.md "Tolerance" (top-1
# identical, mean KL ≤ 1e-6: the MoE sum and the split sublayers round in another order) and bit-identical to the
# same layout on one host over shared memory (the transport never changes a bit); `serve` answers identical.
# Args: path-to-glint, [mpirun]. Exits 77 when this machine cannot make hosts.
set -euo pipefail
glint="$1"
mpirun="${2:-mpirun}"
source "$(dirname "${BASH_SOURCE[0]}")/lib/cluster_util.sh"

RUN=(run --prompt "Once upon a time" --max-tokens 24 --temperature 0 --threads 1)
echo '[[97, 11, 1879, 0, 358, 1079, 264, 1614, 13, 509], [785, 3974, 1387, 3883, 342, 916, 279, 1567]]' \
  >"$work/tokens.json"
SCORE=(score --fast --tokens-file "$work/tokens.json" --threads 1)
make_hosts 2 10gbit  # the container, converted once
"$glint" "${RUN[@]}" --model "$work/model-c" >"$work/run1.txt" 2>/dev/null
"$glint" "${SCORE[@]}" --model "$work/model-c" --dump-logits "$work/one.safetensors" >/dev/null 2>&1 ||
  fail "score on one process"

# serve_answers OUT: a completion and a streamed chat at temperature 0 from the server at $base (on host 0).
serve_answers() {
  on_host0 curl -s --max-time 60 -H "Content-Type: application/json" "$base/v1/completions" \
    -d '{"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}' |
    python3 -c "import json,sys; print(repr(json.load(sys.stdin)['choices'][0]['text']))" >"$1"
  on_host0 curl -sN --max-time 60 -H "Content-Type: application/json" "$base/v1/chat/completions" \
    -d '{"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 16, "temperature": 0,
         "stream": true}' | python3 -c '
import json, sys
text = ""
for line in sys.stdin:
    if line.startswith("data: {"):
        for choice in json.loads(line[6:])["choices"]:
            text += choice["delta"].get("content") or ""
print(repr(text))' >>"$1"
}
SERVE=(--model "$model" --threads 1 --memory 32M --max-seqs 2)
start_cluster_server 1 "${SERVE[@]}"
serve_answers "$work/serve1.txt"
stop_cluster_server

for n in 2 4; do
  [[ $n == 2 ]] || make_hosts "$n" 10gbit
  layouts=("--tp 1" "--tp 2")
  [[ $n == 4 ]] && layouts+=("--tp 2 --ep 2")
  for layout in "${layouts[@]}"; do
    read -ra flags <<<"$layout"
    what="$n hosts $layout"
    cluster "$n" "${RUN[@]}" --model "$model" "${flags[@]}" >"$work/run.txt" 2>"$work/run.log" ||
      fail "run on $what: $(tail -5 "$work/run.log")"
    cmp -s "$work/run1.txt" "$work/run.txt" || fail "run on $what differs: $(cat "$work/run.txt") vs $(cat "$work/run1.txt")"
    grep -q "loaded $model " "$work/run.log" || fail "run on $what: no rank loaded $model"
    cluster "$n" "${SCORE[@]}" --model "$model" "${flags[@]}" --reference "$work/one.safetensors" \
      --dump-logits "$work/hosts.safetensors" >"$work/score.txt" 2>"$work/score.log" ||
      fail "score on $what: $(tail -5 "$work/score.log")"
    awk '$1 == "0" || $1 == "1" { n++; if ($7 != "100.00%" || $8 > 1e-6) exit 1 } END { exit n != 2 }' \
      "$work/score.txt" || fail "score on $what is not one process's within the tolerance: $(cat "$work/score.txt")"
    timeout 120 "$mpirun" --oversubscribe --allow-run-as-root --mca btl self,vader -np "$n" "$glint" "${SCORE[@]}" \
      --model "$work/model-c" "${flags[@]}" --dump-logits "$work/local.safetensors" >/dev/null 2>&1 ||
      fail "score -np $n $layout on one host"
    cmp -s "$work/local.safetensors" "$work/hosts.safetensors" ||
      fail "score on $what is not bit-identical to the same layout on one host"
    echo "ok: run and score on $what"
  done
  start_cluster_server "$n" "${SERVE[@]}"
  serve_answers "$work/serve.txt"
  stop_cluster_server
  cmp -s "$work/serve1.txt" "$work/serve.txt" ||
    fail "serve on $n hosts answers $(cat "$work/serve.txt"), one process $(cat "$work/serve1.txt")"
  echo "ok: serve on $n hosts"
done
echo "PASS"
