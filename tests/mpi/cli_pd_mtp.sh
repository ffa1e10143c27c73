#!/usr/bin/env bash
# Prefill/decode disaggregation with speculative decoding and servers of several ranks (docs/disaggregation.md
# "Speculative decoding", "Several ranks"), on the embedded tiny model over loopback, every server with
# --speculative mtp: a 2-rank prefill and decode server at --tp 1 and at --tp 2 (the MTP layer's rows read from rank 0
# for an export, written on every rank for an import, the last pair's hidden row sent to the followers inline), and
# `both` servers of the same numerics — one process (= --tp 1 on any ranks, bit for bit) and 2 ranks at --tp 2. Each
# pairing at one --tp gives its `both` server's text for a completion, a chat, a 100-token prompt in 4 chunks, n = 2
# greedy and n = 2 seeded sampling (whose tokens depend on the drafts, so an MTP cache without the prompt's rows on
# any rank would differ), and its decode server counts the drafts its `both` server counted for the same requests.
# Crossed (--tp 1 → 2 and 2 → 1) the greedy text is the one-process server's (sampled text is not compared: --tp 2
# rounds differently from one process). Nothing stays held. Args: path-to-glint, tests/data dir, mpirun.
set -euo pipefail
glint="$1"
mpirun="$3"
ENGINE=(--memory 64M --max-seqs 4 --max-model-len 512 --max-batch-tokens 32 --threads 1 --served-model-name tiny
  --speculative mtp)
source "$(dirname "${BASH_SOURCE[0]}")/../cli/lib/pd_util.sh" # $work, fail, start, json, metric
source "$(dirname "${BASH_SOURCE[0]}")/lib/mpi_util.sh"        # MPIRUN_LOCAL
source "$(dirname "${BASH_SOURCE[0]}")/lib/pd_sets.sh"         # serve, transfer_header, request_set, answers
# Each set also holds a seeded sampled request: its tokens depend on the draft distributions, so an MTP cache without
# the prompt's rows on any rank would give other text (greedy text never depends on the drafts).
sampled() { echo "/v1/completions {\"prompt\": \"The old king of $1 looked at the sea and\", \"max_tokens\": 24, \"temperature\": 1.0, \"seed\": 7, \"n\": 2, \"ignore_eos\": true}"; }
{ request_set "little girl" 100 && sampled Arles; } >"$work/A.requests"
{ request_set "old fisherman" 200 && sampled Brest; } >"$work/B.requests"
settled() { # BASE: its counters once published (at the end of its round)
  local before
  before="$(speculation "$1")"
  sleep 0.3
  [[ "$(speculation "$1")" == "$before" ]] || sleep 1
  speculation "$1"
}

# expect SET BOTH: BOTH's answers to SET ($work/SET.expected) and its drafts for them ($work/SET.drafts).
expect() {
  read -r d0 t0 a0 <<<"$(settled "$2")"
  answers "$1" "$2" >"$work/$1.expected"
  read -r d1 t1 a1 <<<"$(settled "$2")"
  echo "$((${d1%.*} - ${d0%.*})) $((${t1%.*} - ${t0%.*})) $((${a1%.*} - ${a0%.*}))" >"$work/$1.drafts"
  read -r _ _ accepted <<<"$(cat "$work/$1.drafts")"
  [[ "$accepted" -gt 0 ]] || fail "the both server accepted no draft of set $1"
}
request_set "young baker" 300 >"$work/C.requests"
serve both 1
expect A "$last_base"
answers C "$last_base" >"$work/C.expected"
serve both_tp2 2 --tp 2
expect B "$last_base"

serve prefill_tp1 2 --role prefill
prefill_tp1=$last_base
serve decode_tp1 2 --role decode --local-prefill-below 4 --pd-timeout 30
decode_tp1=$last_base
serve prefill_tp2 2 --role prefill --tp 2
prefill_tp2=$last_base
serve decode_tp2 2 --role decode --tp 2 --local-prefill-below 4 --pd-timeout 30
decode_tp2=$last_base

same_answers() { # NAME SET DECODE PREFILL
  answers "$2" "$3" "$(transfer_header "$4")" >"$work/$1.txt"
  cmp -s "$work/$2.expected" "$work/$1.txt" || fail "$1: answers differ: $(diff "$work/$2.expected" "$work/$1.txt")"
  [[ "$(metric "$3" glint:pd_local_prefills_total)" == 0 ]] || fail "$1: a prompt was prefilled on the decode server"
}
check() { # NAME SET DECODE PREFILL: the set's answers, 5 transfers, the both server's drafts for the set
  same_answers "$@"
  [[ "$(metric "$3" glint:pd_transfers_total)" == 5 ]] || fail "$1: pd_transfers_total is not 5"
  local got
  got="$(settled "$3")"
  read -r d t a <<<"$got"
  [[ "${d%.*} ${t%.*} ${a%.*}" == "$(cat "$work/$2.drafts")" ]] ||
    fail "$1: drafts $got, the both server's $(cat "$work/$2.drafts")"
}
check tp1 A "$decode_tp1" "$prefill_tp1"
check tp2 B "$decode_tp2" "$prefill_tp2"
same_answers tp1_to_tp2 C "$decode_tp2" "$prefill_tp1"
same_answers tp2_to_tp1 C "$decode_tp1" "$prefill_tp2"
for server in decode_tp1 decode_tp2 prefill_tp1 prefill_tp2; do
  [[ "$(metric "${!server}" glint_state_slots_used)" == 0 ]] || fail "$server: a slot is still held"
  [[ "$(metric "${!server}" glint_kv_blocks_used)" == 0 ]] || fail "$server: blocks are still held"
done
echo "PASS"
