#!/usr/bin/env bash
# The vision tower in a `glint convert` container (docs/vision.md "In a container"): a container of glint-tiny
# answers image prompts exactly as its checkpoint does (greedy tokens identical, with and without MTP drafts;
# the bf16 tower's rows are bit-identical, tests/unit/vision_tower_test.cc), `glint serve` on the container
# takes images, an int8 tower is kept as converted, and a container written without the tower (before it held one)
# is refused with the fix. Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
data="$2"
source "$(dirname "${BASH_SOURCE[0]}")/lib/serve_util.sh"  # $work, fail, start_server, stop_server, metric
tiny="$data/../../models/glint-tiny"
png="$data/vision_input/wide/input.png"

"$glint" convert --model "$tiny" --out "$work/c" >"$work/convert" 2>&1 || fail "convert: $(cat "$work/convert")"
run_ids() { "$glint" run --prompt "Describe" --max-tokens 8 --temperature 0 --print-ids "$@" 2>"$work/err"; }
direct="$(run_ids --model "$tiny" --image "$png")" || fail "run on the checkpoint: $(cat "$work/err")"
from_container="$(run_ids --model "$work/c" --image "$png")" || fail "run on the container: $(cat "$work/err")"
[[ "$direct" == "$from_container" ]] || fail "image prompt: checkpoint '$direct' != container '$from_container'"
[[ "$direct" != "$(run_ids --model "$work/c")" ]] || fail "the container's image prompt gave the text-only tokens"
drafted="$(run_ids --model "$work/c" --image "$png" --speculative mtp)" || fail "run --speculative mtp: $(cat "$work/err")"
[[ "$drafted" == "$direct" ]] || fail "container with MTP drafts '$drafted' != '$direct'"

# glint serve on the container takes images (it used to answer 400).
start_server --model "$work/c" --memory 128M --max-seqs 2 --max-model-len 1024
grep -q "vision tower: bf16 fast tower" "$work/server.log" || fail "no tower in the log: $(cat "$work/server.log")"
printf '{"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,%s"}}, {"type": "text", "text": "what?"}]}]}' \
  "$(base64 -w0 "$png")" >"$work/req.json"
status="$(curl -s -o "$work/body" -w "%{http_code}" --max-time 60 -H "Content-Type: application/json" \
  --data-binary "@$work/req.json" "$base/v1/chat/completions")"
[[ "$status" == 200 ]] || fail "chat with an image on the container: $status $(cat "$work/body")"
[[ "$(metric glint_images_encoded_total)" == 1 ]] || fail "glint_images_encoded_total: $(metric glint_images_encoded_total)"
stop_server

# --vision-weights int8: the container holds the int8 tower, and a load takes it as stored.
"$glint" convert --model "$tiny" --out "$work/c8" --vision-weights int8 >"$work/convert" 2>&1 \
  || fail "convert --vision-weights int8: $(cat "$work/convert")"
run_ids --model "$work/c8" --image "$png" >/dev/null || fail "run on the int8 container: $(cat "$work/err")"
start_server --model "$work/c8" --memory 128M --max-seqs 2 --max-model-len 1024
grep -q "vision tower: int8 fast tower" "$work/server.log" || fail "no int8 tower in the log: $(cat "$work/server.log")"
stop_server

# A container from before the tower was stored (no "vision" metadata key; made here by renaming the key in place,
# which keeps the header's length): images are refused with the fix, text still runs.
python3 - "$work/c/model.glint" <<'PY'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
at = data.find(b'"vision":"bf16"')
assert at > 0, "no vision key in the container header"
data[at:at + 8] = b'"visiom"'
open(path, "wb").write(data)
PY
if run_ids --model "$work/c" --image "$png" >/dev/null; then fail "an old container took an image"; fi
grep -q "did not store the vision tower; re-run \`glint convert --model CHECKPOINT --out DIR\`" "$work/err" \
  || fail "old container message: $(cat "$work/err")"
run_ids --model "$work/c" >/dev/null || fail "text on an old container: $(cat "$work/err")"
echo "vision_container: OK"
