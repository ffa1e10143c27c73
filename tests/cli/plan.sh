#!/usr/bin/env bash
# glint plan as a black box: defaults (the embedded release config), headers-only reading of the golden
# checkpoints agreeing with glint inspect, formats, the CPU server, and clear errors.
# Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
data="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Default model: the released config, built in. Figures from JSON.
json="$("$glint" plan --hardware h100x8,v7x-8 --format json)"
jq -e '.preamble[0] | test("embedded release config")' <<<"$json" >/dev/null || fail "default model is not the release"
total="$(jq '.tables.parameters.rows[] | select(.group == "total") | .params' <<<"$json")"
[[ "$total" == "321323031390" ]] || fail "release total params $total"
[[ "$(jq '.tables.memory.rows | length' <<<"$json")" == "12" ]] || fail "2 topologies x 6 schemes expected"
[[ "$(jq -r '.tables.memory.rows[] | select(.topology == "h100x8" and .scheme == "A") | .over' <<<"$json")" \
  == "DOES NOT FIT" ]] || fail "bf16 on 8xH100 must not fit (642.7 GB)"
for table in assumptions parameters dtypes active schemes memory state roofline indexer hardware; do
  jq -e --arg t "$table" '.tables[$t].rows | length > 0' <<<"$json" >/dev/null || fail "table $table missing or empty"
done

# Headers-only reading of a checkpoint agrees with glint inspect, row for row.
for fixture in tiny-dense tiny-sparse; do
  plan_rows="$("$glint" plan --model "$data/golden/$fixture" --hardware h100x8 --format json |
    jq -c '[.tables.parameters.rows, .tables.dtypes.rows, .tables.active.rows]')"
  inspect_rows="$("$glint" inspect "$data/golden/$fixture" --json |
    jq -c '[.tables.parameters.rows, .tables.dtypes.rows, .tables.active.rows]')"
  [[ "$plan_rows" == "$inspect_rows" ]] || fail "$fixture: plan and inspect disagree"
  text="$("$glint" plan --model "$data/golden/$fixture" --hardware h100x8)"
  grep -q "safetensors headers" <<<"$text" || fail "$fixture: plan did not say it read the headers"
done
# A config file alone: config only.
text="$("$glint" plan --model "$data/golden/tiny-dense/config.json" --hardware b200x8)"
grep -q "(config only)" <<<"$text" || fail "config-only source not stated"

# Scheme filter, markdown, context/concurrency, assumptions shown overridden.
md="$("$glint" plan --hardware b200x8 --scheme d --context 131072 --concurrency 8 --assume mfu=0.5 --format markdown)"
grep -q '^| b200x8 | D |' <<<"$md" || fail "markdown memory row"
grep -q "131,072" <<<"$md" || fail "context not shown"
grep -q '^| mfu | 0.50 | fraction | 0.40 |' <<<"$md" || fail "override not shown beside its default"
! grep -q '^| b200x8 | A |' <<<"$md" || fail "--scheme D still shows A"

# CPU server from --memory / --bandwidth.
cpu="$("$glint" plan --hardware cpu --memory 768 --bandwidth 400 --scheme C --context 8192 --format json)"
[[ "$(jq -r '.tables.memory.rows[0].topology' <<<"$cpu")" == "cpu" ]] || fail "cpu row"
tokens="$(jq '.tables.roofline.rows[0].b1_tokens_per_s' <<<"$cpu")"
awk -v t="$tokens" 'BEGIN { exit !(t > 15 && t < 25) }' || fail "cpu batch-1 decode $tokens tok/s"

# A catalogue from a file replaces the built-in one.
cat > "$tmp/hw.json" <<'JSON'
{"chips": [{"name": "toy", "memory": {"value": 1, "unit": "TB", "source": "https://example.com/toy"},
  "memory_bandwidth": {"value": 1000, "unit": "GB/s", "source": "https://example.com/toy"},
  "peak": {"bf16": {"value": 100, "unit": "TFLOPS", "source": "https://example.com/toy"}},
  "interconnect": {"value": 100, "unit": "GB/s", "source": "https://example.com/toy"}}],
 "topologies": [{"name": "toy-2", "chip": "toy", "chips": 2}]}
JSON
text="$("$glint" plan --catalogue "$tmp/hw.json" --scheme R)"
grep -q "^  toy-2 " <<<"$text" || fail "--catalogue not used"

# Errors: clear message, exit 1.
expect_error() {
  local want="$1"; shift
  set +e
  out="$("$glint" plan "$@" 2>&1)"
  rc=$?
  set -e
  [[ $rc -ne 0 ]] || fail "plan $* succeeded (want an error containing '$want')"
  grep -q -- "$want" <<<"$out" || fail "plan $*: '$out' lacks '$want'"
}
expect_error "unknown hardware 'tpu-v9'; known: v6e-4, v6e-8" --hardware tpu-v9
expect_error "needs --memory GB and --bandwidth" --hardware cpu
expect_error "needs both --memory GB and --bandwidth" --memory 512
expect_error "unknown scheme 'Z'" --scheme Z
expect_error "unknown assumption 'speed'" --assume speed=2
expect_error "out of range" --threshold 1.5
expect_error "--context 0 is out of range" --context 0
expect_error "does not exist" --model "$tmp/nowhere"
mkdir "$tmp/bad"
sed 's/"hidden_size": 4096/"hidden_size": "big"/' "$data/glm-5.3-flash-config.json" > "$tmp/bad/config.json"
expect_error "'hidden_size' is \"big\"; expected an integer" --model "$tmp/bad"
sed 's/"n_routed_experts": 288/"n_routed_experts": 4/' "$data/glm-5.3-flash-config.json" > "$tmp/bad/config.json"
expect_error "num_experts_per_tok' is 8; expected at most n_routed_experts = 4" --model "$tmp/bad/config.json"
echo '{' > "$tmp/bad/config.json"
expect_error "config.json" --model "$tmp/bad"
echo '{"chips": []}' > "$tmp/empty.json"
expect_error "missing a non-empty 'chips' list" --catalogue "$tmp/empty.json"
# --hardware host: this machine measured now (≈ 4 s on one thread; small probe arrays: the figures are not the point), projected onto a made-up 2-socket server.
expect_error "describe --hardware host" --host-cores 8
expect_error "cannot be combined" --hardware host,v6e-8
expect_error "needs --socket-link" --hardware host --threads 1 --probe-mib 16 --host-sockets 2
host_json="$("$glint" plan --hardware host --threads 1 --probe-mib 32 --host-cores 24 --host-sockets 2 --socket-link 100 \
  --socket-bandwidth 200 --host-memory 768 --format json 2>"$tmp/host.err")" || fail "plan --hardware host: $(cat "$tmp/host.err")"
grep -q "measuring this machine on 1 threads" "$tmp/host.err" || fail "plan --hardware host: no progress line"
failures="$(jq -r '
  .tables.host_measurements.rows as $m | .tables.host_projection.rows as $p |
  (if ($p | length) != 2 then "projection rows: \($p | length), expected C and E" else empty end),
  ($p[] | select((.b1 > 0 and .b64 > .b1 and .prefill_512 > 0) | not) | "implausible row \(.)"),
  ($m[] | select(.figure == "server") | select(.value != 48) | "server cores \(.value), expected 48"),
  ($m[] | select(.figure == "bandwidth_efficiency" or .figure == "mfu") | select((.value > 0 and .value <= 1) | not) |
     "\(.figure) = \(.value) not in (0, 1]")' <<<"$host_json")"
[[ -z "$failures" ]] || fail "plan --hardware host: $failures"
# --ranks: glint's own collectives per step (plan/collectives.h; the counts are checked against a real run in
# tests/mpi/collectives_mpi_test).
ranks_json="$("$glint" plan --scheme C --ranks 2 --concurrency 16 --format json)"
[[ "$(jq '.tables.collectives.rows[0].calls' <<<"$ranks_json")" == 44 ]] ||
  fail "plan --ranks 2: decode of one sequence should be 1 broadcast + 42 MoE all-reduces (one per trunk MoE layer) + 1 gather of the logits (--lm-head-split-rows 4): $(jq -c '.tables.collectives.rows[0]' <<<"$ranks_json")"
calls="$("$glint" plan --scheme C --ranks 2 --lm-head-split-rows 0 --format json | jq '.tables.collectives.rows[0].calls')"
[[ "$calls" == 43 ]] || fail "plan --ranks 2 --lm-head-split-rows 0: $calls calls, expected 43 (no gather)"
dp_row="$("$glint" plan --scheme C --ranks 2 --dp-attention --format json | jq -c '.tables.collectives.rows[0]')"
[[ "$(jq '.calls' <<<"$dp_row")" == 86 && "$(jq '.all_reduces' <<<"$dp_row")" == 0 ]] ||
  fail "plan --ranks 2 --dp-attention: decode of one sequence should be 1 broadcast + 2 all-to-alls per MoE layer + 1 for the head, no all-reduce: $dp_row"
"$glint" plan --ranks 4 --tp 2 --dp-attention >"$tmp/dptp.txt" 2>&1 && fail "--dp-attention --tp 2 was accepted"
grep -q "dp-attention needs --tp 1" "$tmp/dptp.txt" || fail "--dp-attention --tp 2 message: $(cat "$tmp/dptp.txt")"
tp_calls="$("$glint" plan --scheme C --ranks 4 --tp 2 --format json | jq '.tables.collectives.rows[0].calls')"
(( tp_calls > 43 )) || fail "plan --ranks 4 --tp 2 should add the TP group's collectives: $tp_calls"
"$glint" plan --ranks 4 --tp 3 >"$tmp/tp3.txt" 2>&1 && fail "--tp 3 of 4 ranks was accepted"
grep -q "must be ≥ 1 and divide --ranks 4" "$tmp/tp3.txt" || fail "--tp 3 message: $(cat "$tmp/tp3.txt")"
"$glint" plan --link-latency 5 >"$tmp/ll.txt" 2>&1 && fail "--link-latency without --ranks was accepted"
grep -q "describe --ranks N > 1" "$tmp/ll.txt" || fail "--link-latency message: $(cat "$tmp/ll.txt")"
# docs/plan.md shows the binary's full output for the released model (scripts/update-plan-doc.sh writes it).
doc="$data/../../docs/plan.md"
documented="$(sed -n '/^<!-- plan-output-begin -->$/,/^<!-- plan-output-end -->$/p' "$doc" | sed '1d;$d')"
current="$("$glint" plan --format markdown)"
if [[ "$documented" != "$current" ]]; then
  diff <(echo "$documented") <(echo "$current") | head -20 >&2
  fail "docs/plan.md is out of date: run scripts/update-plan-doc.sh"
fi
echo "plan: ok"
