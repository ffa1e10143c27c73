#!/usr/bin/env bash
# The CI sweep of docs/bench.md: `glint bench` against the real `glint serve` on the default model
# (models/glint-tiny), a short streaming sweep at concurrency 1 and 2, and the results checked with jq:
#  (a) the tokens the bench reports are the server's: every request's usage equals its max_tokens and built
#      prompt length, and the server's /metrics counters (generated tokens, prompt tokens, finished requests),
#      read before and after the run, grew by exactly the bench's totals plus its warm-up requests;
#  (b) the figures are consistent: all requests succeeded, tokens / duration = the reported tokens/s, the duration
#      is the span of the requests in requests.csv, TTFT <= E2E for every request and every summary statistic,
#      interactivity = 1000 / median TPOT, the Pareto points are the levels' figures;
#  (c) the report files exist and are non-empty, and pareto.png is a PNG;
# then bad invocations against the real server: an unknown model, prompts longer than the server's context, a
# request the server refuses (its 400 message must reach the user), a missing API key.
# Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
source "$(dirname "${BASH_SOURCE[0]}")/lib/serve_util.sh"  # $work, fail, start_server, stop_server, metric
command -v jq >/dev/null || fail "jq is required (scripts/setup.sh installs it)"

ENGINE=(--memory 64M --max-seqs 4 --max-model-len 512)
INPUT_LEN=32
OUTPUT_LEN=8
PROMPTS_PER_LEVEL=4
WARMUP_PER_LEVEL=1
start_server "${ENGINE[@]}"

# The server's counters, as `name value` lines (one scrape, so the three are from one instant).
COUNTERS='glint_generation_tokens_total|glint_prompt_tokens_total|glint_request_success_total\{finish_reason="length"\}'
scrape_counters() {
  curl -sf --max-time 10 "$base/metrics" | grep -E "^($COUNTERS) " >"$1" || fail "GET /metrics: no counters"
  [[ $(wc -l <"$1") -eq 3 ]] || fail "GET /metrics lacks a counter: $(cat "$1")"
}
counter() { awk -v n="$2" '$1 == n { print $2 }' "$1"; }  # counter FILE NAME
delta() { echo $(($(counter "$work/after" "$1") - $(counter "$work/before" "$1"))); }

# ---- the sweep ----
out="$work/out"
scrape_counters "$work/before"
"$glint" bench --base-url "$base" --input-len $INPUT_LEN --output-len $OUTPUT_LEN --concurrency 1,2 \
  --prompts-per-level $PROMPTS_PER_LEVEL --warmup-requests $WARMUP_PER_LEVEL --seed 1 --no-progress --out "$out" \
  >"$work/bench.out" 2>"$work/bench.err" || fail "glint bench exited $?: $(cat "$work/bench.out" "$work/bench.err")"
scrape_counters "$work/after"
cat "$work/bench.out"

# (c) the files first: the checks below read them.
for file in results.json results.csv requests.csv pareto.png pareto.dat pareto.gp; do
  [[ -s "$out/$file" ]] || fail "$out/$file is missing or empty"
done
[[ "$(head -c 8 "$out/pareto.png" | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]] || fail "pareto.png is not a PNG"
[[ $(wc -l <"$out/results.csv") -eq 3 ]] || fail "results.csv: expected a header and 2 levels: $(cat "$out/results.csv")"
level_row="+$PROMPTS_PER_LEVEL/$PROMPTS_PER_LEVEL +0 "  # concurrency, done/sent, failures
grep -Eq "^ +1 $level_row" "$work/bench.out" && grep -Eq "^ +2 $level_row" "$work/bench.out" ||
  fail "the summary table lacks a level row"

# Every failed check prints one line; none may be printed. near() allows a relative 1e-9 between figures computed
# from the same doubles (results.json prints them with 17 significant digits, so only the arithmetic rounds).
check_json() {  # check_json WHAT JQ-ARGS... <INPUT: runs jq; any line it prints is a failed check
  local what="$1"
  shift
  jq -r "$@" >"$work/failures" || fail "$what: jq failed"
  [[ ! -s "$work/failures" ]] || fail "$what: $(cat "$work/failures")"
}
JQ_LIB='
def near($a; $b): (($a - $b) | fabs) <= 1e-9 * ([1, ($a | fabs), ($b | fabs)] | max);
def check(cond; message): if cond then empty else message end;'

# (a) and (b) on results.json, with the server's counter deltas.
check_json "results.json" \
  --argjson generated "$(delta glint_generation_tokens_total)" \
  --argjson prompted "$(delta glint_prompt_tokens_total)" \
  --argjson finished "$(delta 'glint_request_success_total{finish_reason="length"}')" \
  "$JQ_LIB"'
. as $run | $run.config as $c |
check($run.interrupted == false and $run.stopped_by_error == ""; "the run was interrupted or stopped early"),
check([$run.levels[].concurrency] == [1, 2]; "levels \([$run.levels[].concurrency])"),
check($c.model == "glint-tiny" and $c.ignore_eos and $c.input_len_range == [$c.input_len, $c.input_len]
      and $c.output_len_range == [$c.output_len, $c.output_len]; "config \($c)"),
# (a) The server generated exactly what the bench counted: the measured requests plus the warm-up requests
# (fixed lengths and ignore_eos, so each warm-up request has input_len prompt and output_len generated tokens).
([$run.levels[].warmup_requests] | add) as $warmup |
check(([$run.levels[].output_tokens] | add) + $warmup * $c.output_len == $generated;
      "the server generated \($generated) tokens; the bench counted \([$run.levels[].output_tokens] | add) + \($warmup) warm-up requests × \($c.output_len)"),
check(([$run.levels[].input_tokens] | add) + $warmup * $c.input_len == $prompted;
      "the server read \($prompted) prompt tokens; the bench counted \([$run.levels[].input_tokens] | add) + \($warmup) × \($c.input_len)"),
check(([$run.levels[].completed] | add) + $warmup == $finished;
      "the server finished \($finished) requests (length); the bench completed \([$run.levels[].completed] | add) + \($warmup) warm-up"),
($run.levels[] as $l | ("c=\($l.concurrency): " + (
  # every request succeeded
  check($l.requests_planned == $c.prompts_per_level and $l.requests_sent == $l.requests_planned
        and $l.completed == $l.requests_sent and $l.failed == 0 and $l.cancelled == 0 and $l.skipped == 0
        and $l.errors == {} and $l.warmup_failed == 0 and $l.warmup_requests == $c.warmup_requests
        and $l.interrupted == false; "request counts \($l | {requests_planned, requests_sent, completed, failed, cancelled, skipped, errors, warmup_requests, warmup_failed})"),
  # (a) per level: the usage the server sent is what the bench reports, and it is what was asked for
  check($l.output_tokens == $l.usage_check.usage_completion_tokens and $l.output_tokens == $l.completed * $c.output_len
        and $l.input_tokens == $l.completed * $c.input_len; "tokens \($l | {input_tokens, output_tokens, usage_check})"),
  check($l.usage_check.output_length_mismatches == 0 and $l.usage_check.prompt_mismatches == 0
        and $l.usage_check.requests_without_usage == 0; "usage check \($l.usage_check)"),
  # a chunk carries at least one token (no speculative decoding), and every request had content
  check($l.usage_check.content_chunks <= $l.output_tokens and $l.usage_check.content_chunks >= $l.completed;
        "\($l.usage_check.content_chunks) content chunks for \($l.output_tokens) tokens"),
  # (b) throughput = tokens / duration
  check($l.duration_s > 0; "duration \($l.duration_s)"),
  check(near($l.output_throughput * $l.duration_s; $l.output_tokens);
        "output \($l.output_throughput) tok/s × \($l.duration_s) s ≠ \($l.output_tokens) tokens"),
  check(near($l.total_throughput * $l.duration_s; $l.input_tokens + $l.output_tokens);
        "total \($l.total_throughput) tok/s × \($l.duration_s) s ≠ \($l.input_tokens) + \($l.output_tokens) tokens"),
  check(near($l.request_throughput * $l.duration_s; $l.completed);
        "\($l.request_throughput) requests/s × \($l.duration_s) s ≠ \($l.completed) requests"),
  check(near($l.output_throughput_per_chip; $l.output_throughput / $c.chips)
        and near($l.total_throughput_per_chip; $l.total_throughput / $c.chips); "per-chip throughput"),
  check(near($l.interactivity_median * $l.tpot_ms.median; 1000); "interactivity \($l.interactivity_median) ≠ 1000 / \($l.tpot_ms.median)"),
  # (b) latencies: TTFT <= E2E for every statistic, each over every completed request
  (["mean", "median", "p90", "p99", "min", "max"][] as $k |
    check($l.ttft_ms[$k] <= $l.e2e_ms[$k]; "TTFT \($k) \($l.ttft_ms[$k]) ms > E2E \($k) \($l.e2e_ms[$k]) ms")),
  check($l.ttft_ms.count == $l.completed and $l.e2e_ms.count == $l.completed and $l.tpot_ms.count == $l.completed;
        "summary counts \($l.ttft_ms.count), \($l.e2e_ms.count), \($l.tpot_ms.count)"),
  check($l.ttft_ms.min > 0 and $l.e2e_ms.max <= $l.duration_s * 1000 * (1 + 1e-9); "latencies outside the level duration"),
  # at most `concurrency` requests were in flight, so the duration is at least the summed E2E / concurrency
  check($l.e2e_ms.mean * $l.e2e_ms.count / $l.concurrency <= $l.duration_s * 1000 * (1 + 1e-9);
        "the E2E times add up to more than \($l.concurrency) × the duration")
)))' <"$out/results.json"

# (a) and (b) per request on requests.csv: every row, and the level figures they add up to.
check_json "requests.csv" -R -s --slurpfile results "$out/results.json" \
  --argjson input_len $INPUT_LEN --argjson output_len $OUTPUT_LEN "$JQ_LIB"'
(split("\n") | map(select(length > 0) | split(","))) as $lines | ($lines[0]) as $header |
[$lines[1:][] | [$header, .] | transpose | map({(.[0]): .[1]}) | add] as $rows |
($rows | map(. + {concurrency: (.concurrency | tonumber)}) | group_by(.concurrency)) as $levels |
check(($rows | length) == ([$results[0].levels[].completed] | add); "\($rows | length) rows"),
($rows[] | "request c=\(.concurrency) #\(.index): " + (
  check(.outcome == "ok" and .http_status == "200" and .error == ""; "outcome \(.outcome) \(.http_status) \(.error)"),
  check((.usage_completion_tokens | tonumber) == $output_len and (.max_tokens | tonumber) == $output_len;
        "usage \(.usage_completion_tokens) completion tokens, max_tokens \(.max_tokens)"),
  check((.usage_prompt_tokens | tonumber) == $input_len and (.expected_prompt_tokens | tonumber) == $input_len;
        "usage \(.usage_prompt_tokens) prompt tokens, built \(.expected_prompt_tokens)"),
  check((.content_chunks | tonumber) >= 1 and (.content_chunks | tonumber) <= (.usage_completion_tokens | tonumber);
        "\(.content_chunks) chunks"),
  check((.ttft_ms | tonumber) <= (.e2e_ms | tonumber); "TTFT \(.ttft_ms) ms > E2E \(.e2e_ms) ms"),
  # the CSV prints seconds with 9 significant digits: 1e-3 ms is well above that rounding
  check(((.end_s | tonumber) - (.start_s | tonumber)) * 1000 - (.e2e_ms | tonumber) | fabs < 1e-3;
        "E2E \(.e2e_ms) ms ≠ end − start")
)),
($levels[] as $rows_of_level | ($rows_of_level[0].concurrency) as $conc |
  ($results[0].levels[] | select(.concurrency == $conc)) as $l | "level c=\($conc): " + (
  check(([$rows_of_level[].usage_completion_tokens | tonumber] | add) == $l.output_tokens;
        "requests.csv sums to \([$rows_of_level[].usage_completion_tokens | tonumber] | add) tokens, results.json \($l.output_tokens)"),
  check(([$rows_of_level[].end_s | tonumber] | max) - ([$rows_of_level[].start_s | tonumber] | min) - $l.duration_s | fabs < 1e-6;
        "duration \($l.duration_s) s is not last end − first send")
))' <"$out/requests.csv"

# (b) the plotted points are the levels' figures (pareto.dat prints 6 decimals).
check_json "pareto.dat" -R -s --slurpfile results "$out/results.json" '
[split("\n")[] | select(length > 0 and (startswith("#") | not)) | split(" ") | map(tonumber)] as $points |
def close($a; $b): (($a - $b) | fabs) <= 1e-5 * ([1, ($a | fabs)] | max);
if ($points | length) != 2 then "\($points | length) points" else
  ($results[0].levels[] as $l | ($points[] | select(.[0] == $l.concurrency)) as $p |
   if close($p[1]; $l.interactivity_median) and close($p[2]; $l.total_throughput_per_chip) then empty
   else "c=\($l.concurrency): point \($p) ≠ (\($l.interactivity_median), \($l.total_throughput_per_chip))" end)
end' <"$out/pareto.dat"
echo "sweep: tokens, throughput, latencies and files are consistent with the server's counters"

# ---- token ids drawn from the vocabulary, tokens timed by their logprobs (how a random-weight model is measured:
# its tokens often decode to no text, so counting content chunks would miss them) ----
"$glint" bench --base-url "$base" --prompt-format token-ids --token-id-range 0:256 --count-tokens logprobs \
  --input-len 16 --output-len 8 --concurrency 2 --prompts-per-level 4 --warmup-requests 0 --no-progress \
  --out "$work/ids" >"$work/ids.out" 2>&1 || fail "glint bench --count-tokens logprobs: $(cat "$work/ids.out")"
check_json "token-id-range + logprobs" "$JQ_LIB"'
.levels[0] as $l |
check($l.completed == 4; "completed \($l.completed) of 4"),
check($l.output_tokens == 32; "output tokens \($l.output_tokens), expected 4 × 8"),
check($l.usage_check.completion_vs_chunks_mismatches == 0; "tokens timed ≠ usage in \($l.usage_check.completion_vs_chunks_mismatches) requests"),
check(.config.token_counting == "logprobs"; "config.token_counting is \(.config.token_counting)")' <"$work/ids/results.json"
echo "token ids from a range, counted by logprobs: every token timed"

# ---- bad invocations against the real server: clear errors, and nothing generated ----
bench_fails() {  # bench_fails WHAT EXPECTED-TEXT ARGS...: glint bench must exit 1 and print EXPECTED-TEXT
  local what="$1" expected="$2"
  shift 2
  local status=0
  "$glint" bench --no-progress --out "$work/bad" --concurrency 1 --prompts-per-level 1 --warmup-requests 0 "$@" \
    >"$work/bad.out" 2>&1 || status=$?
  [[ $status -eq 1 ]] || fail "$what: exit status $status, expected 1: $(cat "$work/bad.out")"
  grep -qF -- "$expected" "$work/bad.out" || fail "$what: no '$expected' in: $(cat "$work/bad.out")"
}
generated_before="$(metric glint_generation_tokens_total)"
bench_fails "unknown model" "--model gpt-9 is not served; GET /v1/models lists: glint-tiny" \
  --base-url "$base" --model gpt-9 --input-len 8 --output-len 2
[[ ! -e "$work/bad" ]] || fail "an unusable server left an output directory"
bench_fails "prompt past the context" "the server's max_model_len is 512" \
  --base-url "$base" --input-len 600 --output-len 2
bench_fails "prompt plus output past the context" "requests need up to 500 + 20 = 520 tokens" \
  --base-url "$base" --input-len 500 --output-len 20
[[ "$(metric glint_generation_tokens_total)" == "$generated_before" ]] || fail "a refused invocation generated tokens"
# A request the server refuses: the sweep runs, and the server's own message is shown.
bench_fails "server refuses the requests" "temperature" \
  --base-url "$base" --input-len 8 --output-len 2 --extra-body '{"temperature": -1}'
grep -qF "http_400" "$work/bad.out" || fail "the refused requests are not counted as http_400: $(cat "$work/bad.out")"
stop_server

start_server "${ENGINE[@]}" --api-key sk-ci
bench_fails "missing API key" "--api-key" --base-url "$base" --input-len 8 --output-len 2
grep -qF "HTTP 401" "$work/bad.out" || fail "missing API key: no HTTP 401 in: $(cat "$work/bad.out")"
OPENAI_API_KEY=sk-ci "$glint" bench --base-url "$base" --input-len 8 --output-len 2 --concurrency 1 \
  --prompts-per-level 1 --warmup-requests 0 --no-progress --out "$work/keyed" >"$work/keyed.out" 2>&1 ||
  fail "glint bench with \$OPENAI_API_KEY: $(cat "$work/keyed.out")"
stop_server
echo "bench_glint_serve: all checks passed"
