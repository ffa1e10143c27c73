#!/usr/bin/env bash
# The trained default model models/glint-tiny (docs/training.md) through the glint binary:
#  - `glint score` on held-out token sequences against the logits of the PyTorch training tool (tools/train, an
#    independent implementation, float64 on the same exported weights): every row's max |Δlogit| ≤ 1e-3 × std,
#    top-1 agreement 100 %, mean KL ≤ 1e-6 nats, and the held-out perplexity is the recorded one (1e-4 relative);
#  - `glint run --temperature 0` reproduces the PyTorch greedy continuations of the recorded prompts (plain text
#    and GLM's chat template), token for token.
# Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
data="$2"
model="$data/../../models/glint-tiny"
expected="$data/glint-tiny/expected.json"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$glint" score --model "$model" --tokens-file "$data/glint-tiny/crosscheck_tokens.json" \
  --reference "$data/glint-tiny/crosscheck_logits.safetensors" >"$work/score" 2>"$work/score.err" ||
  { cat "$work/score.err" >&2; fail "glint score failed"; }
cat "$work/score"
# Columns: seq tokens mean-NLL ppl max|dlogit| max/std top-1 mean-KL
awk '$1 ~ /^[0-9]+$/ { n++; if ($6 + 0 > 1e-3 || $7 != "100.00%" || $8 + 0 > 1e-6) bad = 1 }
     END { exit (bad || n != 2) }' "$work/score" || fail "glint score disagrees with the PyTorch logits"
recorded=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["crosscheck_nll_per_token"])' "$expected")
measured=$(awk '$1 == "all" { print $3 }' "$work/score")
awk -v a="$measured" -v b="$recorded" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * b) }' ||
  fail "held-out NLL $measured nats/token, recorded $recorded"
echo "held-out NLL $measured nats/token (recorded $recorded)"

count=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["greedy"]))' "$expected")
[[ $count -ge 3 ]] || fail "expected.json has $count greedy cases"
for ((i = 0; i < count; i++)); do
  prompt=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["greedy"][int(sys.argv[2])]["prompt"], end="")' \
    "$expected" "$i")
  want=$(python3 -c 'import json,sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["greedy"][int(sys.argv[2])]["ids"])))' \
    "$expected" "$i")
  n=$(wc -w <<<"$want")
  got=$("$glint" run --model "$model" --prompt "$prompt" --temperature 0 --max-tokens 24 --print-ids 2>/dev/null |
    tr -s ' \n' ' ' | sed 's/ *$//')
  [[ "$got" == "$want" ]] || fail "greedy continuation of '$prompt': got [$got], PyTorch [$want]"
  echo "greedy '$prompt': $n tokens identical"
done
echo "glint_tiny: all checks passed"
