#!/usr/bin/env bash
# Prefill/decode disaggregation (docs/disaggregation.md), black box on the embedded tiny model over loopback: a
# prefill server, a decode server and a `both` server. /health reports the roles and the transfer port; a request
# with X-Glint-Prefill gives the decode server the same greedy text as the `both` server (completions, chat, and a chat
# with an image whose tower runs on the prefill server, logprobs compared too), and /metrics counts the transfer; a short prompt, and one whose prefix the decode server holds, are prefilled locally; a stalled prefill server (SIGSTOP) and a dead one
# (SIGKILL) fall back to a local prefill with the same text, counted as failures; with --pd-fallback fail the request
# fails with 503; bad headers answer 400; nothing stays leased; each transfer's phases are on both servers' /metrics,
# summing to the total; with --transfer-secret-file a pair holding the secret transfers and a decode server without
# it is refused, counted, and a secret file others may read stops the server. Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
ENGINE=(--memory 128M --max-seqs 4 --max-model-len 512 --served-model-name tiny)
source "$(dirname "${BASH_SOURCE[0]}")/lib/pd_util.sh" # $work, fail, start, json, metric
# post BASE PATH BODY [HEADER [CURL ARGS...]]: prints the HTTP status; the body goes to $work/body.
post() {
  local extra=()
  [[ $# -ge 4 ]] && extra=(-H "$4" "${@:5}")
  curl -s -o "$work/body" -w "%{http_code}" --max-time 60 "$1$2" -H 'Content-Type: application/json' \
    "${extra[@]+"${extra[@]}"}" -d "$3"
}

start prefill --role prefill
prefill_pid=$last_pid
prefill=$last_base
start decode --role decode --local-prefill-below 8 --pd-timeout 2
decode=$last_base
start both
both=$last_base

[[ "$(curl -s "$prefill/health" | json 'd["role"]')" == prefill ]] || fail "prefill /health role"
transfer_port="$(curl -s "$prefill/health" | json 'd["transfer_port"]')"
[[ "$transfer_port" =~ ^[0-9]+$ && "$transfer_port" -gt 0 ]] || fail "no transfer_port in the prefill /health"
[[ "$(curl -s "$decode/health" | json 'd["role"]')" == decode ]] || fail "decode /health role"
[[ "$(curl -s "$both/health" | json 'd["role"]')" == both ]] || fail "both /health role"
from="X-Glint-Prefill: 127.0.0.1:$transfer_port"

long='{"prompt": "Once upon a time there was a little girl who lived in a village near the forest. One day", "max_tokens": 24, "temperature": 0, "ignore_eos": true}'
chat='{"messages": [{"role": "user", "content": "Tell me a story about a cat."}], "max_tokens": 24, "temperature": 0}'
[[ "$(post "$both" /v1/completions "$long")" == 200 ]] || fail "both: $(cat "$work/body")"
expected="$(json 'd["choices"][0]["text"]' <"$work/body")"
[[ -n "$expected" ]] || fail "the both server generated no text"
[[ "$(post "$both" /v1/chat/completions "$chat")" == 200 ]] || fail "both chat: $(cat "$work/body")"
expected_chat="$(json 'd["choices"][0]["message"]["content"]' <"$work/body")"

[[ "$(post "$decode" /v1/completions "$long" "$from")" == 200 ]] || fail "decode: $(cat "$work/body")"
[[ "$(json 'd["choices"][0]["text"]' <"$work/body")" == "$expected" ]] || fail "disaggregated text differs"
[[ "$(post "$decode" /v1/chat/completions "$chat" "$from")" == 200 ]] || fail "decode chat: $(cat "$work/body")"
[[ "$(json 'd["choices"][0]["message"]["content"]' <"$work/body")" == "$expected_chat" ]] || fail "chat differs"
[[ "$(metric "$decode" glint:pd_transfers_total)" == 2 ]] || fail "pd_transfers_total is not 2"
bytes="$(metric "$decode" glint:pd_transfer_bytes_total)"
[[ "${bytes%.*}" -gt 0 ]] || fail "no transfer bytes counted"

# An image chat: its patches travel to the prefill server, whose tower runs; the decode server's never does.
b64="$(base64 -w0 "$2/vision_input/wide/input.png")"
image="{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {\"url\": \"data:image/png;base64,$b64\"}}, {\"type\": \"text\", \"text\": \"What is this?\"}]}], \"max_tokens\": 16, \"temperature\": 0, \"logprobs\": true, \"top_logprobs\": 3}"
[[ "$(post "$both" /v1/chat/completions "$image")" == 200 ]] || fail "both image chat: $(cat "$work/body")"
expected_image="$(json 'json.dumps(d["choices"][0]["logprobs"]) + d["choices"][0]["message"]["content"]' <"$work/body")"
[[ "$(post "$decode" /v1/chat/completions "$image" "$from")" == 200 ]] || fail "decode image chat: $(cat "$work/body")"
[[ "$(json 'json.dumps(d["choices"][0]["logprobs"]) + d["choices"][0]["message"]["content"]' <"$work/body")" == \
  "$expected_image" ]] || fail "the image chat's text or logprobs differ through the transfer"
[[ "$(metric "$decode" glint:pd_transfers_total)" == 3 ]] || fail "the image chat was not transferred"
[[ "$(metric "$decode" glint_images_encoded_total)" == 0 ]] || fail "the decode server ran its tower"
[[ "$(metric "$prefill" glint_images_encoded_total)" == 1 ]] || fail "the prefill server did not run its tower"
# The prefill server's side: 3 states sent, streamed layer by layer (how much before the prefill ended is a race on
# a model this small: only bounded here).
[[ "$(metric "$prefill" glint:pd_states_sent_total)" == 3 ]] || fail "the prefill server did not count 3 states"
sent="$(metric "$prefill" glint:pd_sent_bytes_total)"
early="$(metric "$prefill" glint:pd_sent_before_prefill_end_bytes_total)"
[[ "${sent%.*}" -gt "${bytes%.*}" && "${early%.*}" -le "${sent%.*}" ]] ||
  fail "prefill bytes sent $sent (before the end $early), decode bytes for the first two $bytes"
grep -q "sent before its prefill ended" "$work/prefill.log" || fail "the overlap was not logged"
# Where the time goes: each transfer's phases recorded on both sides, each observed once a transfer, summing to the
# total (docs/disaggregation.md "Where the time goes").
phases_add_up() { # BASE FAMILY COUNT
  curl -s --max-time 10 "$1/metrics" | python3 -c '
import re, sys
family, count = sys.argv[1], int(sys.argv[2])
sums, counts = {}, {}
for line in sys.stdin:
    m = re.fullmatch(re.escape(family) + r"_(sum|count)\{phase=\"(\w+)\"\} (\S+)", line.strip())
    if m:
        (sums if m[1] == "sum" else counts)[m[2]] = float(m[3])
total = sums.pop("total", 0)
ok = len(sums) >= 4 and set(counts.values()) == {count} and 0 < sum(sums.values()) <= total * (1 + 1e-9)
sys.exit(0 if ok else 1)' "$2" "$3"
}
phases_add_up "$decode" glint:pd_transfer_phase_seconds 3 || fail "the decode server's transfer phases"
phases_add_up "$prefill" glint:pd_prefill_phase_seconds 3 || fail "the prefill server's transfer phases"

# Short: prefilled here.
[[ "$(post "$decode" /v1/completions '{"prompt": "Hi", "max_tokens": 4, "temperature": 0}' "$from")" == 200 ]] ||
  fail "short prompt: $(cat "$work/body")"
[[ "$(metric "$decode" glint:pd_local_prefills_total)" == 1 ]] || fail "the short prompt was not prefilled locally"

# A prompt whose prefix this server already holds (its first 256 tokens, up to a checkpoint, from a local run):
# with X-Glint-Local-Prefill-Below 100 the 44 left are computed here, no transfer.
ids="$(python3 -c 'print(",".join(str(100 + i * 7 % 3000) for i in range(300)))')"
cached="{\"prompt\": [$ids], \"max_tokens\": 4, \"temperature\": 0}"
[[ "$(post "$decode" /v1/completions "$cached")" == 200 ]] || fail "long local prompt: $(cat "$work/body")"
[[ "$(post "$decode" /v1/completions "$cached" "$from" -H "X-Glint-Local-Prefill-Below: 100")" == 200 ]] ||
  fail "cached prompt: $(cat "$work/body")"
[[ "$(metric "$decode" glint:pd_local_prefills_total)" == 2 ]] || fail "the cached prompt was transferred"
[[ "$(metric "$decode" glint:pd_transfers_total)" == 3 ]] || fail "the cached prompt was transferred"
grep -q "prefix cache holds 256 of its 300 tokens" "$work/decode.log" || fail "the reason was not logged"

# Bad headers: 400 naming the header.
[[ "$(post "$decode" /v1/completions "$long" "X-Glint-Prefill: nowhere")" == 400 ]] || fail "bad X-Glint-Prefill"
grep -q "X-Glint-Prefill" "$work/body" || fail "the 400 does not name the header"
[[ "$(post "$decode" /v1/completions "$long" "X-Glint-Local-Prefill-Below: many")" == 400 ]] ||
  fail "bad X-Glint-Local-Prefill-Below"

# A stalled prefill server: the transfer times out (--pd-timeout 2) and the prompt is prefilled here.
kill -STOP "$prefill_pid"
[[ "$(post "$decode" /v1/completions "$long" "$from")" == 200 ]] || fail "stalled: $(cat "$work/body")"
[[ "$(json 'd["choices"][0]["text"]' <"$work/body")" == "$expected" ]] || fail "fallback text differs (stalled)"
kill -CONT "$prefill_pid"
[[ "$(metric "$decode" glint:pd_transfer_failures_total)" == 1 ]] || fail "the stall was not counted"
grep -q "prefilling locally" "$work/decode.log" || fail "the fallback was not logged"

# A dead one: the same, at once.
kill -KILL "$prefill_pid"
wait "$prefill_pid" 2>/dev/null || true
[[ "$(post "$decode" /v1/completions "$long" "$from")" == 200 ]] || fail "dead: $(cat "$work/body")"
[[ "$(json 'd["choices"][0]["text"]' <"$work/body")" == "$expected" ]] || fail "fallback text differs (dead)"
[[ "$(metric "$decode" glint:pd_transfer_failures_total)" == 2 ]] || fail "the dead server was not counted"
[[ "$(metric "$decode" glint:pd_local_prefills_total)" == 4 ]] || fail "local prefills not counted"
# Nothing leased or held once every request finished.
[[ "$(metric "$decode" glint_state_slots_used)" == 0 ]] || fail "a slot is still held"
[[ "$(metric "$decode" glint_kv_blocks_used)" == 0 ]] || fail "blocks are still held"

# A shared secret (--transfer-secret-file): a pair that holds it transfers; a decode server without it is refused
# (and prefills here), counted on the prefill server; the secret is in no log; a file others may read is refused.
(umask 077 && head -c 32 /dev/urandom | base64 >"$work/secret")
start secure_prefill --role prefill --transfer-secret-file "$work/secret"
secure_prefill=$last_base
secure_from="X-Glint-Prefill: 127.0.0.1:$(curl -s "$secure_prefill/health" | json 'd["transfer_port"]')"
start secure_decode --role decode --local-prefill-below 8 --transfer-secret-file "$work/secret"
[[ "$(post "$last_base" /v1/completions "$long" "$secure_from")" == 200 ]] || fail "authenticated: $(cat "$work/body")"
[[ "$(json 'd["choices"][0]["text"]' <"$work/body")" == "$expected" ]] || fail "the authenticated text differs"
[[ "$(metric "$last_base" glint:pd_transfers_total)" == 1 ]] || fail "the authenticated transfer was not counted"
# (A prompt the decode server has not seen: one whose prefix it holds would be prefilled here without asking.)
fresh='{"prompt": "The quick brown fox jumps over the lazy dog while the farmer watches from the old red barn", "max_tokens": 4, "temperature": 0}'
[[ "$(post "$decode" /v1/completions "$fresh" "$secure_from")" == 200 ]] || fail "unauthenticated: $(cat "$work/body")"
[[ "$(metric "$secure_prefill" glint:pd_authentication_failures_total)" == 1 ]] || fail "the refusal was not counted"
[[ "$(metric "$secure_prefill" glint:pd_states_sent_total)" == 1 ]] || fail "a state went to an unauthenticated peer"
grep -q "requires the shared secret" "$work/decode.log" || fail "the decode server did not log the refusal"
! grep -qF "$(cat "$work/secret")" "$work"/*.log || fail "the secret is in a log"
chmod 644 "$work/secret"
! timeout 60 "$glint" serve --port 0 "${ENGINE[@]}" --role prefill --transfer-secret-file "$work/secret" \
  >"$work/readable.log" 2>&1 || fail "a secret file others may read was taken"
grep -q "chmod 600" "$work/readable.log" || fail "the refusal of a readable secret file does not say why"

# --pd-fallback fail: 503 with the reason.
start strict --role decode --pd-fallback fail --pd-timeout 2 --local-prefill-below 8
[[ "$(post "$last_base" /v1/completions "$long" "$from")" == 503 ]] || fail "--pd-fallback fail did not fail"
grep -q "prefill server" "$work/body" || fail "the 503 does not say why: $(cat "$work/body")"
echo "PASS"
