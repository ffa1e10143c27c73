#!/usr/bin/env bash
# Black-box test of `glint serve` on the embedded tiny model with curl: every endpoint, the error paths, limits,
# a fuzz corpus of malformed requests (tests/data/server_fuzz), disconnects seen through /metrics, the API key,
# and a graceful SIGTERM. Each server runs on a free loopback port and is stopped (killed if need be) at the end.
# Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
data="$2"
source "$(dirname "${BASH_SOURCE[0]}")/lib/serve_util.sh"  # $work, fail, start_server, stop_server, metric

ENGINE=(--memory 128M --max-seqs 8 --max-model-len 1024)

# request METHOD PATH [BODY-FILE] [CURL ARGS...]: prints the status; the body goes to $work/body.
request() {
  local method="$1" path="$2" body="${3:-}"
  shift 3 || shift $#
  local args=(-s -o "$work/body" -w "%{http_code}" -X "$method" --max-time 60 "$@")
  [[ -n "$body" ]] && args+=(-H "Content-Type: application/json" --data-binary "@$body")
  curl "${args[@]}" "$base$path"
}

post() {  # post PATH JSON [CURL ARGS...]: prints the status
  local path="$1" json="$2"
  shift 2
  printf '%s' "$json" >"$work/req.json"
  request POST "$path" "$work/req.json" "$@"
}

json() { python3 -c "import json,sys; d=json.load(open('$work/body')); print($1)"; }

expect_status() {  # expect_status WANT GOT WHAT
  [[ "$2" == "$1" ]] || fail "$3: expected HTTP $1, got $2: $(head -c 400 "$work/body")"
}

expect_error() {  # expect_error STATUS GOT WHAT [CODE]: an OpenAI-shaped error body
  expect_status "$1" "$2" "$3"
  python3 - "$work/body" "${4:-}" <<'EOF' || fail "$3: not an OpenAI error: $(head -c 400 "$work/body")"
import json, sys
error = json.load(open(sys.argv[1]))["error"]
assert set(error) >= {"message", "type", "param", "code"}, error
assert isinstance(error["message"], str) and error["message"], error
if sys.argv[2]:
    assert error["code"] == sys.argv[2], error
EOF
}

start_server "${ENGINE[@]}" --served-model-name tiny
grep -q "on http://127.0.0.1:" "$work/server.log" || fail "does not bind loopback by default"

# ---- plain endpoints ----
expect_status 200 "$(request GET /health)" "health"
[[ "$(json 'd["status"]')" == ok ]] || fail "health body"
expect_status 200 "$(request GET /v1/models)" "models"
[[ "$(json 'd["data"][0]["id"]')" == tiny ]] || fail "models: $(cat "$work/body")"
max_len="$(json 'd["data"][0]["max_model_len"]')"
[[ "$max_len" == 1024 ]] || fail "max_model_len $max_len"

expect_status 200 "$(post /tokenize '{"prompt": "Hello world"}')" "tokenize"
tokens="$(json 'json.dumps(d["tokens"])')"
[[ "$(json 'd["count"]')" -ge 2 ]] || fail "tokenize count"
expect_status 200 "$(post /detokenize "{\"tokens\": $tokens}")" "detokenize"
[[ "$(json 'd["prompt"]')" == "Hello world" ]] || fail "detokenize round trip: $(cat "$work/body")"
expect_status 200 "$(post /tokenize '{"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true}')" "tokenize messages"
chat_prompt_tokens="$(json 'd["count"]')"

# ---- chat ----
# The request log never has prompt text (unless --log-prompts).
expect_status 200 "$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "secret-marker-4711"}], "max_tokens": 1}')" "private prompt"
grep -q "POST /v1/chat/completions 200" "$work/server.log" || fail "no request log line"
if grep -q "secret-marker-4711" "$work/server.log"; then fail "the prompt text reached the log"; fi
expect_status 200 "$(post /v1/chat/completions '{"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "ignore_eos": true, "temperature": 0}')" "chat"
python3 - "$work/body" "$chat_prompt_tokens" <<'EOF' || fail "chat body: $(cat "$work/body")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["object"] == "chat.completion" and d["model"] == "tiny", d
c = d["choices"][0]
assert c["message"]["role"] == "assistant" and c["finish_reason"] == "length", c
assert "reasoning_content" in c["message"], c
u = d["usage"]
assert u["completion_tokens"] == 5 and u["prompt_tokens"] == int(sys.argv[2]), u
assert u["total_tokens"] == u["prompt_tokens"] + 5, u
EOF

# Streaming: chunks, then the usage chunk, then [DONE].
printf '%s' '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}' >"$work/req.json"
curl -sN --max-time 60 -H "Content-Type: application/json" --data-binary "@$work/req.json" "$base/v1/chat/completions" >"$work/stream"
python3 - "$work/stream" <<'EOF' || fail "chat stream: $(head -c 2000 "$work/stream")"
import json, sys
events = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events[-3:]
chunks = [json.loads(e) for e in events[:-1]]
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant", chunks[0]
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
assert finishes == ["length"], finishes
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4, chunks[-1]
EOF

# n > 1, logprobs, stop strings, seed.
expect_status 200 "$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "ignore_eos": true, "n": 2, "logprobs": true, "top_logprobs": 2, "seed": 1}')" "chat n=2"
[[ "$(json 'len(d["choices"])')" == 2 ]] || fail "n=2"
[[ "$(json 'len(d["choices"][1]["logprobs"]["content"][0]["top_logprobs"])')" == 2 ]] || fail "top_logprobs"
[[ "$(json 'd["usage"]["completion_tokens"]')" == 6 ]] || fail "n=2 usage"

# A named tool_choice gives a tool call (the random model fills the arguments). Cut by max_tokens, the arguments
# are the text generated so far (finish_reason length), never a made-up "{}" nor part of a closing tag; a call that
# closed has a JSON object.
expect_status 200 "$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "Weather?"}], "max_tokens": 8, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}')" "tool call"
python3 - "$work/body" <<'EOF' || fail "tool call body: $(cat "$work/body")"
import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
call = c["message"]["tool_calls"][0]
assert call["function"]["name"] == "get_weather" and call["id"].startswith("call_"), call
arguments = call["function"]["arguments"]
if c["finish_reason"] == "length":
    assert arguments != "{}" and "</" not in arguments, call
else:
    assert c["finish_reason"] == "tool_calls" and isinstance(json.loads(arguments), dict), c
EOF

# ---- completions ----
expect_status 200 "$(post /v1/completions '{"prompt": "Once upon a time", "max_tokens": 4, "ignore_eos": true, "logprobs": 1, "echo": false}')" "completion"
[[ "$(json 'd["object"]')" == text_completion ]] || fail "completion object"
[[ "$(json 'len(d["choices"][0]["logprobs"]["tokens"])')" == 4 ]] || fail "completion logprobs"
expect_status 200 "$(post /v1/completions '{"prompt": [[5, 6], [7, 8, 9]], "max_tokens": 2, "ignore_eos": true}')" "completion prompt list"
[[ "$(json 'len(d["choices"])')" == 2 && "$(json 'd["usage"]["prompt_tokens"]')" == 5 ]] || fail "prompt list: $(cat "$work/body")"
printf '%s' '{"prompt": "Hi", "max_tokens": 3, "ignore_eos": true, "stream": true}' >"$work/req.json"
curl -sN --max-time 60 --data-binary "@$work/req.json" "$base/v1/completions" >"$work/stream"
tail -c 20 "$work/stream" | grep -q "data: \[DONE\]" || fail "completion stream end"

# ---- errors ----
expect_error 400 "$(post /v1/chat/completions '{not json')" "malformed JSON"
expect_error 400 "$(post /v1/chat/completions '{"messages": "hi"}')" "wrong type"
expect_error 400 "$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}], "top_p": 0}')" "invalid value"
printf '{"messages": [{"role": "user", "content": "\xff"}]}' >"$work/bad_utf8.json"
expect_error 400 "$(request POST /v1/chat/completions "$work/bad_utf8.json")" "invalid UTF-8"
expect_error 404 "$(post /v1/chat/completions '{"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}')" "unknown model" model_not_found
python3 -c "import json; print(json.dumps({'prompt': [5] * 1100}))" >"$work/long.json"
expect_error 400 "$(request POST /v1/completions "$work/long.json")" "prompt too long" context_length_exceeded
expect_error 400 "$(post /v1/completions '{"prompt": "x", "max_tokens": 2000}')" "max_tokens past the context" context_length_exceeded
expect_error 404 "$(request GET /v1/nothing)" "unknown route"
expect_error 405 "$(request GET /v1/chat/completions)" "wrong method"
head -c 20000000 /dev/zero | tr '\0' ' ' >"$work/huge.json"
expect_error 413 "$(request POST /v1/completions "$work/huge.json")" "body too large"
header_args=()
for i in $(seq 1 8); do header_args+=(-H "X-Filler-$i: $(head -c 5000 /dev/zero | tr '\0' a)"); done
expect_error 431 "$(request GET /v1/models "" "${header_args[@]}")" "headers too large"
expect_error 431 "$(request GET /v1/models "" -H "X-Long: $(head -c 40000 /dev/zero | tr '\0' a)")" "one header line beyond the header limit"

# ---- the fuzz corpus: every malformed body is a 4xx on every endpoint, and the server stays up ----
for body in "$data"/server_fuzz/*.body; do
  for path in /v1/chat/completions /v1/completions; do
    status="$(request POST "$path" "$body")"
    [[ "$status" =~ ^4[0-9][0-9]$ ]] || fail "$(basename "$body") on $path: HTTP $status $(head -c 300 "$work/body")"
  done
  for path in /tokenize /detokenize; do
    status="$(request POST "$path" "$body")"
    [[ "$status" =~ ^[24][0-9][0-9]$ ]] || fail "$(basename "$body") on $path: HTTP $status"
  done
done
expect_status 200 "$(request GET /health)" "health after the fuzz corpus"

# ---- a client that disconnects mid-stream leaves no running request and no used blocks ----
printf '%s' '{"prompt": "Tell me a story", "max_tokens": 1000, "ignore_eos": true, "stream": true}' >"$work/req.json"
curl -sN --max-time 60 --data-binary "@$work/req.json" "$base/v1/completions" 2>/dev/null | head -c 300 >/dev/null || true
idle=""
for _ in $(seq 1 200); do
  if [[ "$(metric glint_requests_running)" == 0 && "$(metric glint_kv_blocks_used)" == 0 &&
        "$(metric glint_state_slots_used)" == 0 && "$(metric glint_requests_waiting)" == 0 ]]; then idle=1; break; fi
  sleep 0.1
done
[[ -n "$idle" ]] || fail "a disconnected client's request still runs: $(curl -s "$base/metrics" | grep -E '^glint_(requests|kv_blocks|state_slots)')"
curl -s --max-time 10 "$base/metrics" >"$work/metrics"
grep -q 'glint_request_success_total{finish_reason="abort"} [1-9]' "$work/metrics" || fail "no aborted request counted"
for name in 'vllm:num_requests_running{model_name="tiny"}' 'vllm:prompt_tokens_total{model_name="tiny"}' \
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="tiny",position="0"}' \
            glint_time_to_first_token_seconds_count vllm:e2e_request_latency_seconds_bucket; do
  grep -qF "$name" "$work/metrics" || fail "metric $name missing"
done

# ---- SIGTERM while a request streams: it finishes, then the server exits 0 ----
printf '%s' '{"prompt": "Hi", "max_tokens": 60, "ignore_eos": true, "stream": true}' >"$work/req.json"
curl -sN --max-time 120 --data-binary "@$work/req.json" "$base/v1/completions" >"$work/last_stream" &
curl_pid=$!
for _ in $(seq 1 400); do [[ -s "$work/last_stream" ]] && break; sleep 0.05; done  # up to 20 s on a loaded machine
stop_server
wait "$curl_pid" || true
tail -c 20 "$work/last_stream" | grep -q "data: \[DONE\]" || fail "the in-flight stream was cut by SIGTERM"

# ---- the API key: --api-key, and $GLINT_API_KEY ----
for how in flag env; do
  if [[ $how == flag ]]; then
    start_server "${ENGINE[@]}" --api-key sk-local
  else
    GLINT_API_KEY=sk-local start_server "${ENGINE[@]}"
  fi
  expect_status 200 "$(request GET /health)" "health without a key ($how)"
  expect_error 401 "$(request GET /v1/models)" "no key ($how)" invalid_api_key
  expect_error 401 "$(request GET /metrics "" -H "Authorization: Bearer nope")" "wrong key ($how)"
  expect_error 401 "$(post /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}]}')" "chat without a key ($how)"
  expect_status 200 "$(request GET /v1/models "" -H "Authorization: Bearer sk-local")" "right key ($how)"
  expect_status 200 "$(post /v1/completions '{"prompt": "x", "max_tokens": 1}' -H "Authorization: Bearer sk-local")" "completion with key ($how)"
  stop_server
done

# ---- bad flags ----
if "$glint" serve --port 70000 "${ENGINE[@]}" >"$work/out" 2>&1; then fail "--port 70000 accepted"; fi
grep -q "port must be in" "$work/out" || fail "bad --port message: $(cat "$work/out")"
echo "serve: all checks passed"
