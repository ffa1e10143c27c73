#!/usr/bin/env bash
# Black-box test of image input: `glint serve` with curl (data: URLs, file:// under --allowed-local-media-path,
# remote URLs, corrupt and oversized images, several images, /tokenize's expansion, chats with images on models
# with a tower and the refusal without one, the image metrics), `glint run --image` and `glint score --images`. The images are the oracle fixtures' PNGs (tests/data/vision_input).
# Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
data="$2"
source "$(dirname "${BASH_SOURCE[0]}")/lib/serve_util.sh"  # $work, fail, start_server, stop_server, metric

png="$data/vision_input/wide/input.png"  # 300 x 40: 16 image tokens with its own config, more with the release one
mkdir -p "$work/media/sub" "$work/outside"
cp "$png" "$work/media/sub/a.png"
cp "$png" "$work/outside/secret.png"
ln -s "$work/outside/secret.png" "$work/media/escape.png"
printf 'not an image at all' >"$work/media/bad.png"

start_server --memory 128M --max-seqs 4 --max-model-len 2048 --allowed-local-media-path "$work/media" \
  --max-image-bytes 100000
grep -q "image processor: defaults" "$work/server.log" || fail "the start-up log does not name the processor config"

# post_chat ENDPOINT PARTS-JSON: a one-message chat whose content is PARTS-JSON; prints the status.
post_chat() {
  printf '{"messages": [{"role": "user", "content": %s}]}' "$2" >"$work/req.json"
  curl -s -o "$work/body" -w "%{http_code}" --max-time 60 -H "Content-Type: application/json" \
    --data-binary "@$work/req.json" "$base$1"
}
field() { python3 -c "import json; print(json.load(open('$work/body'))$1)"; }
expect_400() {  # expect_400 STATUS PARAM TEXT
  [[ "$1" == 400 ]] || fail "expected 400, got $1: $(cat "$work/body")"
  [[ "$(field "['error']['param']")" == "$2" ]] || fail "param is not $2: $(cat "$work/body")"
  grep -qF "$3" "$work/body" || fail "no '$3' in $(cat "$work/body")"
}

b64="$(base64 -w0 "$png")"
image_part="{\"type\": \"image_url\", \"image_url\": {\"url\": \"data:image/png;base64,$b64\"}}"

# Two images and text: /tokenize expands both; the default model (glint-tiny, with an untrained tower) answers.
status="$(post_chat /tokenize "[$image_part, {\"type\": \"text\", \"text\": \"and\"}, $image_part]")"
[[ "$status" == 200 ]] || fail "tokenize with images: $status $(cat "$work/body")"
image_id="$(python3 -c "import json; t=json.load(open('$data/../../models/glint-tiny/tokenizer.json')); print([a['id'] for a in t['added_tokens'] if a['content']=='<|image|>'][0])")"
count="$(python3 -c "import json; print(json.load(open('$work/body'))['tokens'].count($image_id))")"
# 300 x 40 with the release config (16 to 8000 tokens): canvas 308 x 56 → 22 x 4 patches → 22 tokens each.
[[ "$count" == 44 ]] || fail "expected 2 x 22 image tokens, got $count"
status="$(post_chat /v1/chat/completions "[$image_part, {\"type\": \"text\", \"text\": \"what is it?\"}]")"
[[ "$status" == 200 ]] || fail "chat with an image on the default model: $status $(cat "$work/body")"

# Local files: inside the allowed directory works, '..' and symlinks out of it do not.
status="$(post_chat /tokenize "[{\"type\": \"image_url\", \"image_url\": {\"url\": \"file://$work/media/sub/../sub/a.png\"}}]")"
[[ "$status" == 200 ]] || fail "a file under the allowed directory: $status $(cat "$work/body")"
status="$(post_chat /tokenize "[{\"type\": \"image_url\", \"image_url\": {\"url\": \"file://$work/media/../outside/secret.png\"}}]")"
expect_400 "$status" "messages[0].content[0]" "no such file under --allowed-local-media-path"
status="$(post_chat /tokenize "[{\"type\": \"image_url\", \"image_url\": {\"url\": \"file://$work/media/escape.png\"}}]")"
expect_400 "$status" "messages[0].content[0]" "no such file under --allowed-local-media-path"

# Remote URLs, corrupt, unsupported and oversized images.
status="$(post_chat /v1/chat/completions "[{\"type\": \"text\", \"text\": \"x\"}, {\"type\": \"image_url\", \"image_url\": {\"url\": \"https://example.com/a.png\"}}]")"
expect_400 "$status" "messages[0].content[1]" "remote image URLs are not fetched"
status="$(post_chat /v1/chat/completions "[{\"type\": \"image_url\", \"image_url\": {\"url\": \"file://$work/media/bad.png\"}}]")"
expect_400 "$status" "messages[0].content[0]" "starts with none of the PNG, JPEG, WebP or GIF signatures"
status="$(post_chat /v1/chat/completions "[{\"type\": \"image_url\", \"image_url\": {\"url\": \"data:image/png;base64,$(head -c 60 "$png" | base64 -w0)\"}}]")"
expect_400 "$status" "messages[0].content[0]" "PNG image could not be decoded"
status="$(post_chat /v1/chat/completions "[{\"type\": \"image_url\", \"image_url\": {\"url\": \"data:image/bmp;base64,Qk0=\"}}]")"
expect_400 "$status" "messages[0].content[0]" "media type 'image/bmp' is not supported"
big="$(head -c 200000 /dev/zero | base64 -w0)"
status="$(post_chat /v1/chat/completions "[{\"type\": \"image_url\", \"image_url\": {\"url\": \"data:image/png;base64,$big\"}}]")"
expect_400 "$status" "messages[0].content[0]" "the limit is 100000 bytes (--max-image-bytes)"
status="$(post_chat /v1/chat/completions "[{\"type\": \"input_audio\"}]")"
expect_400 "$status" "messages[0].content[0]" "glint takes text and image_url parts"

# A text-only chat still works beside all this.
status="$(post_chat /v1/chat/completions '"Hello"')"
[[ "$status" == 200 ]] || fail "text chat after image errors: $status $(cat "$work/body")"
stop_server

# A model with a tower (make-tiny's, random weights) answers a chat turn with two images, streamed and not; the
# metrics count the images and their tokens.
"$glint" make-tiny --out "$work/vision" >/dev/null
start_server --model "$work/vision" --memory 128M --max-seqs 4 --max-model-len 2048
grep -q "vision tower: bf16 fast tower" "$work/server.log" || fail "no tower in the log: $(cat "$work/server.log")"
status="$(post_chat /v1/chat/completions "[$image_part, {\"type\": \"text\", \"text\": \"and\"}, $image_part]")"
[[ "$status" == 200 ]] || fail "chat with two images: $status $(cat "$work/body")"
[[ "$(field "['usage']['completion_tokens']")" -ge 1 ]] || fail "no tokens: $(cat "$work/body")"
prompt_tokens="$(field "['usage']['prompt_tokens']")"
[[ "$prompt_tokens" -gt 44 ]] || fail "the prompt should hold 2 x 22 image tokens: $(cat "$work/body")"
[[ "$(metric glint_images_total)" == 2 ]] || fail "glint_images_total: $(metric glint_images_total)"
[[ "$(metric glint_image_tokens_total)" == 44 ]] || fail "glint_image_tokens_total: $(metric glint_image_tokens_total)"
[[ "$(metric glint_images_encoded_total)" == 2 ]] || fail "glint_images_encoded_total: $(metric glint_images_encoded_total)"
printf '{"stream": true, "max_tokens": 4, "messages": [{"role": "user", "content": [%s]}]}' "$image_part" >"$work/req.json"
curl -sN --max-time 60 -H "Content-Type: application/json" --data-binary "@$work/req.json" \
  "$base/v1/chat/completions" >"$work/stream"
grep -q "data: \[DONE\]" "$work/stream" || fail "streamed chat with an image: $(cat "$work/stream")"
# Issue 37's image bomb: 16 JPEGs of a few hundred bytes whose headers claim 7000 x 7000 in one request are refused
# from the headers (the tower's step budget) within 1 s of the server's CPU and 100 MB of its peak RSS growth.
bomb="$(base64 -w0 "$data/../fuzz/corpus/image_decode/jpeg_bomb_7000")"
parts="$(printf '{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,%s"}},' $(yes "$bomb" | head -16))"
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
status_kb() { awk -v f="$1:" '$1 == f { print $2 }' "/proc/$pid/status"; }
echo 5 >"/proc/$pid/clear_refs"  # the peak RSS starts again from the current RSS
rss_before="$(status_kb VmRSS)" ticks_before="$(cpu_ticks)"
status="$(post_chat /v1/chat/completions "[${parts%,}]")"
cpu_ms=$(( ($(cpu_ticks) - ticks_before) * 1000 / $(getconf CLK_TCK) )) growth_kb=$(( $(status_kb VmHWM) - rss_before ))
echo "image bomb (16 x 7000x7000 JPEG): ${cpu_ms} ms CPU, +${growth_kb} KB peak RSS"
expect_400 "$status" "messages[0].content[0]" "becomes 7921 image tokens, more than the 512 one image may take"
(( cpu_ms < 1000 && growth_kb < 100 * 1024 )) || fail "the image bomb cost ${cpu_ms} ms CPU and +${growth_kb} KB RSS"
stop_server

# A model without a tower (make-tiny's with its vision_config removed): image requests are refused after
# validation, naming the reason; text requests are served.
mkdir -p "$work/text" && cp "$work/vision"/* "$work/text/"
python3 -c "import json; p='$work/text/config.json'; c=json.load(open(p)); del c['vision_config']; json.dump(c, open(p, 'w'))"
start_server --model "$work/text" --memory 128M --max-seqs 4 --max-model-len 2048
grep -q "no vision tower (the model's config.json has no vision_config" "$work/server.log" \
  || fail "the start-up log does not say the model has no tower: $(cat "$work/server.log")"
status="$(post_chat /v1/chat/completions "[$image_part, {\"type\": \"text\", \"text\": \"what is it?\"}]")"
expect_400 "$status" "messages[0].content[0]" "this server takes no images: the model's config.json has no vision_config"
[[ "$(field "['error']['code']")" == image_input_not_supported ]] || fail "wrong code: $(cat "$work/body")"
status="$(post_chat /v1/chat/completions '"Hello"')"
[[ "$status" == 200 ]] || fail "text chat on a text model: $status $(cat "$work/body")"
stop_server

# The flag's directory must exist.
if "$glint" serve --port 0 --allowed-local-media-path "$work/none" >"$work/out" 2>&1; then fail "missing dir accepted"; fi
grep -q "is not a directory" "$work/out" || fail "no message for a missing --allowed-local-media-path: $(cat "$work/out")"

# glint run --image: the images go before the prompt; the plain loop (the tower's rows in the prefill) and the
# engine (--speculative mtp: the tower runs inside a step) give the same greedy tokens, which differ from the
# text-only prompt's; a model without a tower says so.
run_ids() { "$glint" run --model "$work/vision" --prompt "Describe" --max-tokens 6 --temperature 0 --print-ids "$@" 2>"$work/err"; }
plain="$(run_ids --image "$png")" || fail "run --image: $(cat "$work/err")"
grep -q "prompt 30 tokens" "$work/err" || fail "run --image: 1 + 22 + 1 image tokens and the text expected: $(cat "$work/err")"
engine="$(run_ids --image "$png" --speculative mtp)" || fail "run --image --speculative mtp: $(cat "$work/err")"
[[ "$plain" == "$engine" ]] || fail "run --image: plain loop '$plain' != engine '$engine'"
[[ "$plain" != "$(run_ids)" ]] || fail "run --image gave the text-only prompt's tokens"
if "$glint" run --model "$work/text" --prompt "Describe" --image "$png" >"$work/out" 2>&1; then fail "--image on a text model ran"; fi
grep -q "needs the model's vision tower: the model's config.json has no vision_config" "$work/out" \
  || fail "--image on a text model: $(cat "$work/out")"
if "$glint" run --prompt "Describe" --image "$work/media/bad.png" >"$work/out" 2>&1; then fail "bad --image ran"; fi
grep -q -- "image $work/media/bad.png: not an image" "$work/out" || fail "bad --image message: $(cat "$work/out")"
if "$glint" run --tokens 1,2 --image "$png" >"$work/out" 2>&1; then fail "--image without --prompt ran"; fi
grep -q "needs --prompt" "$work/out" || fail "--image without --prompt: $(cat "$work/out")"
# glint score --images: sequences that hold the expanded placeholders, filled in order; the logits dump of the
# reference path is compared with itself (exact) and with the fast path (close); text-only scores differ; a
# placeholder count that is not whole images is refused.
python3 - "$work/vision/tokenizer.json" "$work/seqs.json" <<'PY'
import json, sys
ids = {a["content"]: a["id"] for a in json.load(open(sys.argv[1]))["added_tokens"]}
image = [ids["<|begin_of_image|>"]] + [ids["<|image|>"]] * 22 + [ids["<|end_of_image|>"]]
json.dump([[5, 6] + image + [7, 8, 9], image + image + [10]], open(sys.argv[2], "w"))
PY
"$glint" score --model "$work/vision" --tokens-file "$work/seqs.json" --images "$png" "$png" "$png" \
  --dump-logits "$work/logits.safetensors" >"$work/score" 2>&1 || fail "score --images: $(cat "$work/score")"
"$glint" score --model "$work/vision" --tokens-file "$work/seqs.json" --images "$png" "$png" "$png" \
  --token-by-token --reference "$work/logits.safetensors" >"$work/again" 2>&1 || fail "score --reference: $(cat "$work/again")"
awk '$1 == "0" || $1 == "1" { if ($7 != "100.00%") exit 1 }' "$work/again" || fail "token by token differs: $(cat "$work/again")"
"$glint" score --model "$work/vision" --tokens-file "$work/seqs.json" --images "$png" "$png" "$png" --fast \
  --reference "$work/logits.safetensors" >"$work/fast" 2>&1 || fail "score --fast --images: $(cat "$work/fast")"
"$glint" score --model "$work/vision" --tokens-file "$work/seqs.json" >"$work/text_only" 2>&1 || fail "score: $(cat "$work/text_only")"
[[ "$(awk '$1 == "all" { print $3 }' "$work/score")" != "$(awk '$1 == "all" { print $3 }' "$work/text_only")" ]] \
  || fail "score --images gave the text-only NLL"
if "$glint" score --model "$work/vision" --tokens-file "$work/seqs.json" --images "$png" "$png" >"$work/out" 2>&1; then
  fail "two images for three placeholders' worth scored"
fi
grep -q "sequence 1 holds 44 image placeholders but the --images it takes (in order) have 22 image tokens" "$work/out" \
  || fail "placeholder mismatch: $(cat "$work/out")"
# The placeholder is config.json's image_token_id: a model directory without tokenizer.json scores the same; a
# config whose id disagrees with the tokenizer's <|image|> is refused, naming both.
mkdir -p "$work/notok" "$work/disagree"
for f in "$work/vision"/*; do
  [[ "$(basename "$f")" == tokenizer.json ]] || ln -s "$f" "$work/notok/"
  [[ "$(basename "$f")" == config.json ]] || ln -s "$f" "$work/disagree/"
done
"$glint" score --model "$work/notok" --tokens-file "$work/seqs.json" --images "$png" "$png" "$png" >"$work/notok.out" 2>&1 \
  || fail "score --images without tokenizer.json: $(cat "$work/notok.out")"
[[ "$(awk '$1 == "all"' "$work/notok.out")" == "$(awk '$1 == "all"' "$work/score")" ]] \
  || fail "score --images without tokenizer.json differs: $(cat "$work/notok.out")"
python3 - "$work/vision/config.json" "$work/disagree/config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["image_token_id"] = config["image_token_id"] - 1
json.dump(config, open(sys.argv[2], "w"))
PY
if "$glint" score --model "$work/disagree" --tokens-file "$work/seqs.json" --images "$png" "$png" "$png" >"$work/out" 2>&1; then
  fail "a config whose image_token_id disagrees with the tokenizer scored"
fi
grep -q "config.json's image_token_id is .* but tokenizer.json's <|image|> is token" "$work/out" \
  || fail "disagreeing image ids: $(cat "$work/out")"
echo "image_input: OK"
