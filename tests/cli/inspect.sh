#!/usr/bin/env bash
# glint inspect on the golden checkpoints (figures checked by hand in tests/unit/census_test.cc) and on bad
# directories. Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
data="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Exact figures from the JSON: total params, tensor count, per-group rows.
json="$("$glint" inspect "$data/golden/tiny-dense" --json)"
row() { jq -r --arg g "$1" --arg c "$2" '.tables.parameters.rows[] | select(.group == $g) | .[$c]' <<<"$json"; }
[[ "$(row total params)" == "492606" ]] || fail "tiny-dense total params $(row total params)"
[[ "$(row total tensors)" == "352" ]] || fail "tiny-dense tensors $(row total tensors)"
[[ "$(row "routed experts" params)" == "147456" ]] || fail "routed experts $(row "routed experts" params)"
[[ "$(row "MTP layer" params)" == "102744" ]] || fail "MTP $(row "MTP layer" params)"
# Bytes add up to the file's data section: the file is header + data, so it must be larger by the header only.
data_bytes="$(row total bytes)"
file_bytes="$(stat -c %s "$data/golden/tiny-dense/model.safetensors")"
header_bytes="$(python3 -c "import struct,sys; print(struct.unpack('<Q', open(sys.argv[1],'rb').read(8))[0] + 8)" \
  "$data/golden/tiny-dense/model.safetensors")"
[[ "$((file_bytes - header_bytes))" -ge "${data_bytes%.*}" ]] || fail "bytes $data_bytes > data section"
active="$(jq -r '.tables.active.rows[] | select(.figure == "active: trunk") | .exact' <<<"$json")"
[[ "$active" == "279270" ]] || fail "active $active"
[[ "$(jq '.tables.problems.rows | length' <<<"$json")" == "0" ]] || fail "problems reported on a clean fixture"

json="$("$glint" inspect "$data/golden/tiny-sparse" --format json)"
[[ "$(row total params)" == "1953730" ]] || fail "tiny-sparse total params $(row total params)"

# The text table carries the same rows.
text="$("$glint" inspect "$data/golden/tiny-dense")"
grep -q "routed experts .*147,456" <<<"$text" || fail "text table lacks the routed experts row"
grep -q "total .*492,606" <<<"$text" || fail "text table lacks the total"

# Bad directories: clear messages, exit 1, never a crash.
expect_error() {
  local want="$1"; shift
  set +e
  out="$("$glint" inspect "$@" 2>&1)"
  rc=$?
  set -e
  [[ $rc -eq 1 ]] || fail "exit $rc for inspect $* (want 1): $out"
  grep -q -- "$want" <<<"$out" || fail "message for inspect $*: '$out' lacks '$want'"
}
expect_error "does not exist" "$tmp/nowhere"
expect_error "is a file" "$data/golden/tiny-dense/config.json"
mkdir "$tmp/empty"
expect_error "has no config.json" "$tmp/empty"
mkdir "$tmp/no-weights"
cp "$data/golden/tiny-dense/config.json" "$tmp/no-weights/"
expect_error "neither model.safetensors.index.json nor model.safetensors" "$tmp/no-weights"
mkdir "$tmp/truncated"
cp "$data/golden/tiny-dense/config.json" "$tmp/truncated/"
head -c 4000 "$data/golden/tiny-dense/model.safetensors" > "$tmp/truncated/model.safetensors"
expect_error "model.safetensors" "$tmp/truncated"
mkdir "$tmp/bad-config"
echo '{"text_config": {"hidden_size": 64}}' > "$tmp/bad-config/config.json"
cp "$data/golden/tiny-dense/model.safetensors" "$tmp/bad-config/"
expect_error "missing 'vocab_size'" "$tmp/bad-config"
# Weights of another config: every tensor reported, nothing crashes.
mkdir "$tmp/mismatch"
cp "$data/golden/tiny-sparse/config.json" "$tmp/mismatch/"
cp "$data/golden/tiny-dense/model.safetensors" "$tmp/mismatch/"
out="$("$glint" inspect "$tmp/mismatch" --json)"
[[ "$(jq '[.tables.problems.rows[] | select(.kind == "shape")] | length' <<<"$out")" -gt 0 ]] || fail "no shape rows"
[[ "$(jq '[.tables.problems.rows[] | select(.kind == "missing")] | length' <<<"$out")" -gt 0 ]] || fail "no missing rows"
set +e
"$glint" inspect "$data/golden/tiny-dense" --format yaml >/dev/null 2>"$tmp/err"
rc=$?
set -e
[[ $rc -eq 1 ]] && grep -q "expected table, markdown or json" "$tmp/err" || fail "unknown --format accepted"
echo "inspect: ok"
