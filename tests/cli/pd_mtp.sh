#!/usr/bin/env bash
# Prefill/decode disaggregation with speculative decoding (docs/disaggregation.md "Speculative decoding"), black box
# on the embedded tiny model (its trained MTP layer) over loopback: a prefill and a decode server both started with
# --speculative mtp --speculative-tokens 2, and an aggregated `both` server with the same flags. The decode server
# gives the aggregated server's text and logprobs (a completion, a chat, a 100-token prompt in 4 chunks of the
# 32-token budget, n = 2 greedy, and n = 2 seeded sampling — whose tokens depend on the drafts, so a decode server
# whose MTP cache lacked the prompt's rows would differ), transfers every prompt and computes none itself, and its
# speculation counters equal the aggregated server's (drafts verified and accepted: it drafted right after the first
# token as the aggregated server does after its prefill). A pair with the MTP layer on one side only is refused on
# both sides naming the flag (the decode server then prefills locally, counted). Nothing stays held.
# Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
SPEC=(--speculative mtp --speculative-tokens 2)
ENGINE=(--memory 128M --max-seqs 4 --max-model-len 512 --max-batch-tokens 32 --served-model-name tiny)
source "$(dirname "${BASH_SOURCE[0]}")/lib/pd_util.sh" # $work, fail, start, json, metric
# post BASE PATH BODY [HEADER]: prints the HTTP status; the body goes to $work/body.
post() {
  local extra=()
  [[ $# -ge 4 ]] && extra=(-H "$4")
  curl -s -o "$work/body" -w "%{http_code}" --max-time 60 "$1$2" -H 'Content-Type: application/json' \
    "${extra[@]+"${extra[@]}"}" -d "$3"
}

start prefill --role prefill "${SPEC[@]}"
prefill=$last_base
start decode --role decode --local-prefill-below 8 --pd-fallback local "${SPEC[@]}"
decode=$last_base
start both "${SPEC[@]}"
both=$last_base
from="X-Glint-Prefill: 127.0.0.1:$(curl -s "$prefill/health" | json 'd["transfer_port"]')"

# Each request once on the aggregated server and once through the transfer: the same text and logprobs.
completion='{"prompt": "Once upon a time there was a little girl who lived in a village near the forest. One day", "max_tokens": 24, "temperature": 0, "ignore_eos": true, "logprobs": 2}'
chat='{"messages": [{"role": "user", "content": "Tell me a story about a cat."}], "max_tokens": 24, "temperature": 0}'
ids="$(python3 -c 'print(",".join(str(100 + i * 7 % 3000) for i in range(100)))')"
chunked="{\"prompt\": [$ids], \"max_tokens\": 16, \"temperature\": 0, \"ignore_eos\": true}"
forked='{"prompt": "The little dog ran across the garden and", "max_tokens": 16, "temperature": 0, "ignore_eos": true, "n": 2}'
# Seeded sampling: its tokens depend on the draft distributions (the acceptance test, the residual draw), so this one
# tells an MTP cache without the prompt's rows (greedy tokens never depend on the drafts).
sampled='{"prompt": "The old king looked at the sea and", "max_tokens": 32, "temperature": 1.0, "seed": 7, "ignore_eos": true, "n": 2}'
answer='json.dumps([[c.get("text", c.get("message", {}).get("content")), c.get("logprobs")] for c in d["choices"]])'
n=0
for case in completion chat chunked forked sampled; do
  body="${!case}"
  path=/v1/completions
  [[ "$case" == chat ]] && path=/v1/chat/completions
  [[ "$(post "$both" "$path" "$body")" == 200 ]] || fail "both $case: $(cat "$work/body")"
  expected="$(json "$answer" <"$work/body")"
  [[ "$(post "$decode" "$path" "$body" "$from")" == 200 ]] || fail "decode $case: $(cat "$work/body")"
  [[ "$(json "$answer" <"$work/body")" == "$expected" ]] || fail "$case differs through the transfer"
  n=$((n + 1))
  [[ "$(metric "$decode" glint:pd_transfers_total)" == "$n" ]] || fail "$case was not transferred"
done
[[ "$(metric "$decode" glint:pd_local_prefills_total)" == 0 ]] || fail "the decode server prefilled a prompt itself"
[[ "$(metric "$prefill" glint:pd_states_sent_total)" == 5 ]] || fail "the prefill server did not send 5 states"

# The same drafts: verifications, drafted and accepted tokens equal the aggregated server's, some accepted (each
# server publishes its counters at the end of its round: waited for).
for _ in $(seq 1 50); do
  [[ "$(speculation "$decode")" == "$(speculation "$both")" ]] && break
  sleep 0.1
done
read -r drafts drafted accepted <<<"$(speculation "$both")"
[[ "${accepted%.*}" -gt 0 ]] || fail "the aggregated server accepted no draft ($drafts $drafted $accepted)"
[[ "$(speculation "$decode")" == "$drafts $drafted $accepted" ]] ||
  fail "the decode server's speculation ($(speculation "$decode")) is not the aggregated one ($drafts $drafted $accepted)"

# The MTP layer on one side only: refused on both sides, naming the flag; the decode server prefills here.
start plain_prefill --role prefill
plain_from="X-Glint-Prefill: 127.0.0.1:$(curl -s "$last_base/health" | json 'd["transfer_port"]')"
fresh='{"prompt": "The quick brown fox jumps over the lazy dog while the farmer watches from the old red barn", "max_tokens": 4, "temperature": 0}'
[[ "$(post "$decode" /v1/completions "$fresh" "$plain_from")" == 200 ]] || fail "mismatched pair: $(cat "$work/body")"
[[ "$(metric "$decode" glint:pd_transfer_failures_total)" == 1 ]] || fail "the mismatched pair was not counted"
[[ "$(metric "$decode" glint:pd_local_prefills_total)" == 1 ]] || fail "the mismatched pair was not prefilled here"
grep -q "start both servers with --speculative mtp" "$work/decode.log" || fail "the decode server did not say why"
grep -q "start both servers with --speculative mtp" "$work/plain_prefill.log" || fail "the prefill server did not say why"

[[ "$(metric "$decode" glint_state_slots_used)" == 0 ]] || fail "a slot is still held"
[[ "$(metric "$decode" glint_kv_blocks_used)" == 0 ]] || fail "blocks are still held"
[[ "$(metric "$prefill" glint_state_slots_used)" == 0 ]] || fail "a slot is still held on the prefill server"
echo "PASS"
