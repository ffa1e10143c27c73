#!/usr/bin/env bash
# Prefill/decode disaggregation with servers that are several ranks (docs/disaggregation.md "Several ranks"), on the
# embedded tiny model over loopback: a 2-rank prefill and a 2-rank decode server (mpirun -np 2, --tp 1), a 1-rank
# prefill and a 1-rank decode server, and a 1-process `both` server. Every pairing — 2→2, 1→2 and 2→1 — gives the
# `both` server's greedy text for a completion, a chat, a token-id prompt longer than the step's token budget (so the
# prefill runs in several chunks before the last one streams its layers) and a completion with n = 2 (the second
# sample forks from the imported state on every rank); so do a 2-rank prefill and decode server at --tp 2 (the KDA
# heads split: an export gathers them, an import writes each rank's) with each other, with the 1-rank servers and
# with the 2-rank --tp 1 decode server. The decode servers count the transfers, the prefill servers the states sent,
# and no slot or block stays held on any server. --dp-attention is refused at start with the reason.
# Args: path-to-glint, tests/data dir, mpirun.
set -euo pipefail
glint="$1"
mpirun="$3"
# A step computes at most 32 tokens: the 100-token prompts below are prefilled in 4 chunks.
ENGINE=(--memory 64M --max-seqs 4 --max-model-len 512 --max-batch-tokens 32 --threads 1 --served-model-name tiny)
source "$(dirname "${BASH_SOURCE[0]}")/../cli/lib/pd_util.sh" # $work, fail, start, json, metric
source "$(dirname "${BASH_SOURCE[0]}")/lib/mpi_util.sh"        # MPIRUN_LOCAL
source "$(dirname "${BASH_SOURCE[0]}")/lib/pd_sets.sh"         # serve, transfer_header, request_set, answers

# Four sets of requests, A to D: a decode server asked for a prompt whose prefix it holds prefills it itself, so
# each pairing gets a set its decode server has not seen. Each set: a completion, a chat, a 100-token prompt of ids
# (4 chunks of 32) and n = 2.
request_set "little girl" 100 >"$work/A.requests"
request_set "old fisherman" 200 >"$work/B.requests"
request_set "young baker" 300 >"$work/C.requests"
request_set "tired soldier" 400 >"$work/D.requests"
# no_memory_held BASE NAME: every request finished, so no slot or block is held (rank 0's books are those of the
# pools every rank mirrors).
no_memory_held() {
  [[ "$(metric "$1" glint_state_slots_used)" == 0 ]] || fail "$2: a slot is still held"
  [[ "$(metric "$1" glint_kv_blocks_used)" == 0 ]] || fail "$2: blocks are still held"
}

serve both 1
for set in A B C D; do
  answers $set "$last_base" >"$work/$set.expected"
  [[ "$(wc -l <"$work/$set.expected")" == 4 ]] || fail "the both server's answers to $set"
done

serve prefill2 2 --role prefill
prefill2=$last_base
serve decode2 2 --role decode --local-prefill-below 4 --pd-timeout 30
decode2=$last_base
serve prefill1 1 --role prefill
prefill1=$last_base
serve decode1 1 --role decode --local-prefill-below 4 --pd-timeout 30
decode1=$last_base
serve prefill_tp2 2 --role prefill --tp 2
prefill_tp2=$last_base
serve decode_tp2 2 --role decode --tp 2 --local-prefill-below 4 --pd-timeout 30
decode_tp2=$last_base
for server in decode2 prefill2; do
  grep -q "shard expert parallel over 2 ranks" "$work/$server.log" || fail "$server is not on 2 ranks at --tp 1"
done
for server in decode_tp2 prefill_tp2; do
  grep -q "shard .*tensor parallel" "$work/$server.log" || fail "$server is not at --tp 2"
done

# check NAME SET DECODE PREFILL TRANSFERS: the pairing's answers to SET are the both server's, and DECODE has
# counted TRANSFERS states in all, none prefilled itself.
check() {
  answers "$2" "$3" "$(transfer_header "$4")" >"$work/$1.txt"
  cmp -s "$work/$2.expected" "$work/$1.txt" || fail "$1: answers differ: $(diff "$work/$2.expected" "$work/$1.txt")"
  [[ "$(metric "$3" glint:pd_transfers_total)" == "$5" ]] || fail "$1: pd_transfers_total is not $5"
  [[ "$(metric "$3" glint:pd_local_prefills_total)" == 0 ]] || fail "$1: a prompt was prefilled on the decode server"
}
# --tp 1 (every rank holds the whole state): 2 ranks to 2, 1 to 2, 2 to 1.
check tp1_2to2 A "$decode2" "$prefill2" 4
check tp1_1to2 B "$decode2" "$prefill1" 8
check tp1_2to1 A "$decode1" "$prefill2" 4
# --tp 2 (each rank holds 2 of the 4 KDA heads: gathered for an export, each rank's written from an import): to
# itself, from and to one rank, and to 2 ranks at --tp 1.
check tp2_2to2 C "$decode_tp2" "$prefill_tp2" 4
check tp2_1to2 D "$decode_tp2" "$prefill1" 8
check tp2_2to1 B "$decode1" "$prefill_tp2" 8
check tp2_to_tp1 C "$decode2" "$prefill_tp2" 12
[[ "$(metric "$prefill2" glint:pd_states_sent_total)" == 8 ]] || fail "prefill2 did not send 8 states"
[[ "$(metric "$prefill1" glint:pd_states_sent_total)" == 8 ]] || fail "prefill1 did not send 8 states"
[[ "$(metric "$prefill_tp2" glint:pd_states_sent_total)" == 12 ]] || fail "prefill_tp2 did not send 12 states"
for server in decode2 decode1 decode_tp2 prefill2 prefill1 prefill_tp2; do no_memory_held "${!server}" "$server"; done

# --dp-attention is refused at start, naming why: a sequence's state lives on one rank only.
! timeout 120 "$mpirun" "${MPIRUN_LOCAL[@]}" -np 2 "$glint" serve --port 0 "${ENGINE[@]}" --role prefill --ep 2 \
  --dp-attention >"$work/dp_attention.log" 2>&1 || fail "--role prefill --dp-attention was accepted"
grep -q "with --dp-attention is not supported" "$work/dp_attention.log" || fail "the --dp-attention refusal: why?"
echo "PASS"
