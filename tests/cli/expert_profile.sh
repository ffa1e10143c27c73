#!/usr/bin/env bash
# --expert-profile from a serving run (docs/expert-cache.md "Hot experts from a profile"): `glint serve
# --expert-trace` writes the routing of the requests it served; a later start with --expert-profile of that trace
# reads its hottest experts at start-up and keeps them (the log says how many), and serves the same greedy text.
# Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
data="$2"
source "$(dirname "${BASH_SOURCE[0]}")/lib/serve_util.sh"  # $work, fail, start_server, stop_server
"$glint" convert --model "$data/../../models/glint-tiny" --out "$work/tiny" >/dev/null 2>&1
ENGINE=(--model "$work/tiny" --memory 64M --max-seqs 4 --max-model-len 512 --expert-memory 2M)
complete() {  # complete PROMPT: prints the greedy completion's text
  printf '{"prompt": "%s", "max_tokens": 24, "temperature": 0, "ignore_eos": true}' "$1" >"$work/req.json"
  local status
  status=$(curl -s -o "$work/body" -w "%{http_code}" --max-time 60 -H "Content-Type: application/json" \
             --data-binary "@$work/req.json" "$base/v1/completions")
  [[ "$status" == 200 ]] || fail "completion: HTTP $status: $(head -c 300 "$work/body")"
  python3 -c "import json; print(json.load(open('$work/body'))['choices'][0]['text'])"
}

start_server "${ENGINE[@]}" --expert-trace "$work/serve.trace"
without=$(complete "Once upon a time, there was a little dog who")
complete "The little girl went to the park" >/dev/null
stop_server
passes=$(grep -c . "$work/serve.trace" || true)
(( passes > 0 )) || fail "the serving run wrote no routing trace"

start_server "${ENGINE[@]}" --expert-profile "$work/serve.trace"
kept=$(sed -n "s/.*expert cache: kept the \([0-9]*\) most used experts of .*/\1/p" "$work/server.log")
[[ -n "$kept" ]] && (( kept > 0 )) || fail "no experts kept from the profile at start-up"
with=$(complete "Once upon a time, there was a little dog who")
stop_server
[[ "$with" == "$without" ]] || fail "greedy text differs with the profile: '$with' vs '$without'"
# A profile without --expert-memory is refused, naming both flags.
if "$glint" run --model "$work/tiny" --prompt hi --max-tokens 1 --expert-profile "$work/serve.trace" \
     >"$work/out" 2>&1; then
  fail "--expert-profile without --expert-memory accepted"
fi
grep -q -- "--expert-memory" "$work/out" || fail "no message naming --expert-memory: $(cat "$work/out")"
echo "expert_profile: ok ($passes passes traced, $kept experts kept)"
