#!/usr/bin/env bash
# shellcheck disable=SC2154  # $base, $model, $work: set by tests/cluster/lib/cluster_util.sh and serve_util.sh
# Prefill/decode disaggregation across emulated hosts (docs/disaggregation.md, issue 33 item 5): a prefill server on
# host 0 and a decode server on host 1, each loading its own copy of glint-tiny over a shaped link, `glint router`
# on the machine in front of them, and a `--role both` server on the machine as the reference. Through the router:
# a greedy completion, a json_schema chat and an image chat answer what the both server answers; the decode server
# counted the transfers, with exactly the bytes the layout gives (slot + the prompt's blocks + the fp32 logits);
# the image request was transferred too (its patches to host 0, whose tower ran; host 1's did not). Then host 0's link
# is pulled while a state is on the wire (the link slowed so that the transfer takes seconds): the decode server
# gives up after --pd-timeout, prefills locally and answers the same text, within a bound; with the router's
# health check seeing host 0 gone, the next request carries no X-Glint-Prefill and is prefilled locally too. No
# slot or block stays held. Every step is bounded (curl --max-time, servers under `timeout`).
# Args: path-to-glint. Exits 77 when this machine cannot make hosts.
set -euo pipefail
glint="$1"
source "$(dirname "${BASH_SOURCE[0]}")/lib/cluster_util.sh"

router_pid=""
pd_cleanup() {
  [[ -z "$router_pid" ]] || kill -KILL "$router_pid" 2>/dev/null || true
  cluster_util_cleanup
}
trap pd_cleanup EXIT

make_hosts 2 10gbit
machine="$(hosts attach)"
prefill_addr="$(hosts address 0)"
decode_addr="$(hosts address 1)"
ENGINE=(--model "$model" --threads 1 --memory 64M --max-seqs 4 --max-model-len 512 --served-model-name tiny)

# start_on_host K NAME ARGS...: `glint serve ARGS` on host K at its address, port 8080, log $work/NAME.log.
start_on_host() {
  local k="$1" name="$2"
  shift 2
  hosts exec "$k" timeout 300 "$glint" serve --host "$(hosts address "$k")" --port 8080 "${ENGINE[@]}" "$@" \
    >"$work/$name.log" 2>&1 &
  local started=$!
  for _ in $(seq 1 600); do
    grep -qs "serving .* on http://" "$work/$name.log" && return
    kill -0 "$started" 2>/dev/null || break
    sleep 0.1
  done
  fail "$name server on host $k did not start: $(tail -5 "$work/$name.log")"
}
start_on_host 0 prefill --role prefill --pd-timeout 5
start_on_host 1 decode --role decode --pd-timeout 5 --pd-prefill-timeout 10
layout="$(grep -o 'slot [0-9]* B, block [0-9]* B of [0-9]* tokens, vocabulary [0-9]*' "$work/prefill.log")" ||
  fail "the prefill server's log does not give its layout"
read -r slot_bytes block_bytes block_tokens vocab <<<"$(tr -cs '0-9' ' ' <<<"$layout")"

# The reference: the same model as one `--role both` server on the machine (loopback).
start_server --model "$work/model-c" --threads 1 --memory 64M --max-seqs 4 --max-model-len 512 \
  --served-model-name tiny
both="$base"

timeout 300 "$glint" router --prefill "http://$prefill_addr:8080" --decode "http://$decode_addr:8080" --port 0 \
  --local-prefill-below 0 --health-interval 0.5 --backend-timeout 60 >"$work/router.log" 2>&1 &
router_pid=$!
for _ in $(seq 1 300); do grep -qs "routing .* on http://" "$work/router.log" && break; sleep 0.1; done
router="http://127.0.0.1:$(sed -n 's|.*routing .* on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$work/router.log")"
# healthy ROLE: true or false, as the router's /health reports the backend of that role.
healthy() {
  curl -s --max-time 5 "$router/health" | python3 -c "
import json, sys
print(str(next(b['healthy'] for b in json.load(sys.stdin)['backends'] if b['role'] == '$1')).lower())"
}
# Both backends healthy (the prefill server with its transfer port) before the first request.
for _ in $(seq 1 100); do
  [[ "$(healthy prefill)" == true && "$(healthy decode)" == true ]] && break
  sleep 0.1
done
[[ "$(healthy prefill)" == true && "$(healthy decode)" == true ]] ||
  fail "the router does not see both backends healthy: $(curl -s --max-time 5 "$router/health")"
echo "ok: prefill server on $prefill_addr, decode server on $decode_addr, router $router ($machine on the bridge)"

decode_metric() { curl -s --max-time 10 "http://$decode_addr:8080/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }
# ask URL PATH BODY OUT: the answer's text (completion or chat) to OUT, its prompt_tokens to OUT.tokens.
ask() {
  curl -s --max-time 60 -H "Content-Type: application/json" "$1$2" -d "$3" >"$work/answer.json" ||
    fail "no answer from $1$2"
  python3 - "$work/answer.json" "$4" <<'EOF' || fail "$1$2 answered: $(head -c 400 "$work/answer.json")"
import json, sys
d = json.load(open(sys.argv[1]))
c = d["choices"][0]
open(sys.argv[2], "w").write(repr(c["text"] if "text" in c else c["message"]["content"]) + "\n")
open(sys.argv[2] + ".tokens", "w").write(str(d["usage"]["prompt_tokens"]))
EOF
}
# same NAME PATH BODY: the router's answer equals the both server's; $pd_ms: how long the router's took.
same() {
  ask "$both" "$2" "$3" "$work/$1.both"
  local start
  start=$(date +%s%N)
  ask "$router" "$2" "$3" "$work/$1.pd"
  pd_ms=$((($(date +%s%N) - start) / 1000000))
  cmp -s "$work/$1.both" "$work/$1.pd" ||
    fail "$1: through the router $(cat "$work/$1.pd"), the both server $(cat "$work/$1.both")"
}
# expect_metric NAME VALUE WHY
expect_metric() {
  local got
  got="$(decode_metric "$1")"
  [[ "${got%.*}" == "$2" ]] || fail "$3: $1 is '$got', expected $2"
}

# A greedy completion: transferred, with exactly the bytes the layout gives for its prompt.
story='{"model": "tiny", "prompt": "Once upon a time there was a little girl who lived in a village near the forest. One day she", "max_tokens": 24, "temperature": 0, "ignore_eos": true}'
same completion /v1/completions "$story"
expect_metric glint:pd_transfers_total 1 "the completion"
tokens="$(cat "$work/completion.pd.tokens")"
blocks=$(((tokens + block_tokens - 1) / block_tokens))  # the blocks covering the prompt
predicted=$((slot_bytes + blocks * block_bytes + vocab * 4))
expect_metric glint:pd_transfer_bytes_total "$predicted" \
  "a $tokens-token prompt (slot $slot_bytes B + blocks of $block_bytes B per $block_tokens tokens + $vocab logits)"
echo "ok: greedy completion equal, 1 transfer of $predicted B ($tokens tokens)"

# Structured output: the grammar is applied on the decode server from the transferred logits.
schema='{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"], "additionalProperties": false}'
structured="{\"model\": \"tiny\", \"messages\": [{\"role\": \"user\", \"content\": \"Describe a person as JSON.\"}], \"max_tokens\": 48, \"temperature\": 0, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"person\", \"schema\": $schema, \"strict\": true}}}"
same structured /v1/chat/completions "$structured"
expect_metric glint:pd_transfers_total 2 "the json_schema chat"
echo "ok: json_schema chat equal: $(cat "$work/structured.pd")"

# An image: its patches go to the prefill server, whose tower runs (docs/disaggregation.md "Images"), same answer.
png="$(dirname "${BASH_SOURCE[0]}")/../data/vision_input/wide/input.png"
b64="$(base64 -w0 "$png")"
image="{\"model\": \"tiny\", \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {\"url\": \"data:image/png;base64,$b64\"}}, {\"type\": \"text\", \"text\": \"What is this?\"}]}], \"max_tokens\": 16, \"temperature\": 0}"
same image /v1/chat/completions "$image"
expect_metric glint:pd_transfers_total 3 "the image chat"
expect_metric glint:pd_local_prefills_total 0 "the image chat"
expect_metric glint_images_encoded_total 0 "the image chat (the decode server's tower)"
echo "ok: image chat equal, transferred with its image"

# Host 0's link pulled while a state is on the wire. Host 0's link is slowed to 1 Mbit/s, so that a state takes
# ≈ 2 s (the first 64 KiB pass at once: the bucket's burst), under the decode server's --pd-timeout of 5 s per
# frame: first a transfer at that rate that succeeds (and takes over 1.5 s: the cut below, 1 s after the request,
# falls inside the transfer), then the same with host 0's link pulled after 1 s. The router's health checks do not
# matter (the request was already placed): the decode server's read times out, it prefills locally.
hosts rate 1mbit 0
slow='{"model": "tiny", "prompt": "A ship sailed out of the harbour at dawn, its sails full of a cold northern wind, and the sailors sang as they worked. By noon", "max_tokens": 24, "temperature": 0, "ignore_eos": true}'
same slow /v1/completions "$slow"
expect_metric glint:pd_transfers_total 4 "the transfer over a 1 Mbit/s link"
((pd_ms > 1500)) || fail "the transfer over a 1 Mbit/s link took only $pd_ms ms: the cut below would miss it"
echo "ok: a transfer over a 1 Mbit/s link: same text after $pd_ms ms"
long='{"model": "tiny", "prompt": "The old lighthouse keeper climbed the stairs every evening, counting each step as the sea below grew dark and the wind rose over the rocks. That night", "max_tokens": 24, "temperature": 0, "ignore_eos": true}'
ask "$both" /v1/completions "$long" "$work/long.both"
start=$(date +%s%N)
ask "$router" /v1/completions "$long" "$work/long.pd" &
client=$!
sleep 1
hosts link 0 down
wait "$client" || fail "the request whose transfer was cut failed"
elapsed=$((($(date +%s%N) - start) / 1000000))
cmp -s "$work/long.both" "$work/long.pd" || fail "after the cut: $(cat "$work/long.pd"), expected $(cat "$work/long.both")"
((elapsed < 15000)) || fail "the request whose transfer was cut took $elapsed ms"
expect_metric glint:pd_transfer_failures_total 1 "the cut transfer"
expect_metric glint:pd_local_prefills_total 1 "the cut transfer"
expect_metric glint:pd_transfers_total 4 "the cut transfer"
grep -q "prefilling locally" "$work/decode.log" || fail "the fallback was not logged"
echo "ok: transfer cut by a pulled link: same text after $elapsed ms, prefilled on the decode server"

# The router's health check takes the prefill server out: the next request names no prefill server.
for _ in $(seq 1 100); do
  [[ "$(healthy prefill)" == false ]] && break
  sleep 0.1
done
[[ "$(healthy prefill)" == false ]] ||
  fail "the router still counts the unreachable prefill server healthy: $(curl -s --max-time 5 "$router/health")"
same story-again /v1/completions "$story"
((pd_ms < 15000)) || fail "a request with the prefill server gone took $pd_ms ms"
expect_metric glint:pd_transfer_failures_total 1 "a request with the prefill server out"
curl -s --max-time 10 "$router/metrics" | grep -q '^glint_router_decode_without_prefill_total 1' ||
  fail "the router did not count a decode without prefill"
echo "ok: prefill server unreachable: the router names none, the decode server answers in $pd_ms ms"

expect_metric glint_state_slots_used 0 "at the end"
expect_metric glint_kv_blocks_used 0 "at the end"
kill -TERM "$router_pid"
wait "$router_pid" || true
router_pid=""
stop_server
echo "PASS"
