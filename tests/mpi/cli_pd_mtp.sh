#!/usr/bin/env bash
# Prefill/decode disaggregation with speculative decoding and servers of several ranks (docs/disaggregation.md
# "Speculative decoding", "Several ranks"), on the embedded tiny model over loopback, every server with
# --speculative mtp: a 1-process `both` server, a 2-rank prefill and decode server at --tp 1 and a 2-rank prefill and
# decode server at --tp 2. Crossed (tp 1 → tp 2 and tp 2 → tp 1: the MTP layer's rows written on every rank of an
# import, read from rank 0 for an export at either split), each pairing gives the `both` server's greedy text for a
# completion, a chat, a 100-token prompt in 4 chunks and n = 2, and its decode server counts the drafts the `both`
# server counted for the same requests (verified and accepted): its followers drafted from the same MTP rows.
# Nothing stays held. Args: path-to-glint, tests/data dir, mpirun.
set -euo pipefail
glint="$1"
mpirun="$3"
ENGINE=(--memory 64M --max-seqs 4 --max-model-len 512 --max-batch-tokens 32 --threads 1 --served-model-name tiny
  --speculative mtp)
source "$(dirname "${BASH_SOURCE[0]}")/../cli/lib/pd_util.sh" # $work, fail, start, json, metric
source "$(dirname "${BASH_SOURCE[0]}")/lib/mpi_util.sh"        # MPIRUN_LOCAL
source "$(dirname "${BASH_SOURCE[0]}")/lib/pd_sets.sh"         # serve, transfer_header, request_set, answers
request_set "little girl" 100 >"$work/A.requests"
request_set "old fisherman" 200 >"$work/B.requests"
settled() { # BASE: its counters once published (at the end of its round)
  local before
  before="$(speculation "$1")"
  sleep 0.3
  [[ "$(speculation "$1")" == "$before" ]] || sleep 1
  speculation "$1"
}

# The both server's answers and drafts per set (its counters before and after each set).
serve both 1
both=$last_base
for set in A B; do
  read -r d0 t0 a0 <<<"$(settled "$both")"
  answers $set "$both" >"$work/$set.expected"
  read -r d1 t1 a1 <<<"$(settled "$both")"
  echo "$((${d1%.*} - ${d0%.*})) $((${t1%.*} - ${t0%.*})) $((${a1%.*} - ${a0%.*}))" >"$work/$set.drafts"
done
read -r _ _ accepted <<<"$(cat "$work/A.drafts")"
[[ "$accepted" -gt 0 ]] || fail "the both server accepted no draft of set A"

serve prefill_tp1 2 --role prefill
prefill_tp1=$last_base
serve decode_tp1 2 --role decode --local-prefill-below 4 --pd-timeout 30
decode_tp1=$last_base
serve prefill_tp2 2 --role prefill --tp 2
prefill_tp2=$last_base
serve decode_tp2 2 --role decode --tp 2 --local-prefill-below 4 --pd-timeout 30
decode_tp2=$last_base

check() { # NAME SET DECODE PREFILL: the both server's answers, 4 transfers, the both server's drafts for the set
  answers "$2" "$3" "$(transfer_header "$4")" >"$work/$1.txt"
  cmp -s "$work/$2.expected" "$work/$1.txt" || fail "$1: answers differ: $(diff "$work/$2.expected" "$work/$1.txt")"
  [[ "$(metric "$3" glint:pd_transfers_total)" == 4 ]] || fail "$1: pd_transfers_total is not 4"
  [[ "$(metric "$3" glint:pd_local_prefills_total)" == 0 ]] || fail "$1: a prompt was prefilled on the decode server"
  local got
  got="$(settled "$3")"
  read -r d t a <<<"$got"
  [[ "${d%.*} ${t%.*} ${a%.*}" == "$(cat "$work/$2.drafts")" ]] ||
    fail "$1: drafts $got, the both server's $(cat "$work/$2.drafts")"
}
check tp1_to_tp2 A "$decode_tp2" "$prefill_tp1"
check tp2_to_tp1 B "$decode_tp1" "$prefill_tp2"
for server in decode_tp1 decode_tp2 prefill_tp1 prefill_tp2; do
  [[ "$(metric "${!server}" glint_state_slots_used)" == 0 ]] || fail "$server: a slot is still held"
  [[ "$(metric "${!server}" glint_kv_blocks_used)" == 0 ]] || fail "$server: blocks are still held"
done
echo "PASS"
