#!/usr/bin/env bash
# `glint run` under mpirun against one process (docs/distributed.md "Tolerance"): greedy output identical for 1, 2
# and 3 ranks on the trained tiny model (fast path, with and without --speculative mtp, and with 2 drafts per step
# on 2 ranks) and on the golden
# tiny-sparse fixture (fp32 reference, 16 experts: 3 ranks split them 6/5/5); --tp 2 with and without
# --experts-by-id; the shard plan logged.
# Args: path-to-glint, tests/data dir, mpirun.
set -euo pipefail
glint="$1"
data="$2"
mpirun="$3"
source "$(dirname "${BASH_SOURCE[0]}")/lib/mpi_util.sh"  # $work, fail, ranks, rank_pid

# ---- run: greedy text identical ----
RUN=(run --prompt "Once upon a time" --max-tokens 24 --temperature 0 --threads 1)
"$glint" "${RUN[@]}" >"$work/run1.txt" 2>/dev/null
for n in 2 3; do
  ranks "$n" "${RUN[@]}" >"$work/run$n.txt" 2>"$work/run$n.log" || fail "run -np $n: $(tail -5 "$work/run$n.log")"
  cmp -s "$work/run1.txt" "$work/run$n.txt" || fail "run -np $n differs: $(cat "$work/run$n.txt") vs $(cat "$work/run1.txt")"
done
grep -q "rank 1 holds routed experts" "$work/run2.log" || fail "no shard line from rank 1: $(cat "$work/run2.log")"
grep -q "Sharding plan: 2 ranks" "$work/run2.log" || fail "no shard plan table"
"$glint" "${RUN[@]}" --speculative mtp >"$work/spec1.txt" 2>/dev/null
cmp -s "$work/run1.txt" "$work/spec1.txt" || fail "speculative output differs on one rank"
ranks 2 "${RUN[@]}" --speculative mtp >"$work/spec2.txt" 2>"$work/spec2.log" || fail "run --speculative mtp -np 2"
cmp -s "$work/run1.txt" "$work/spec2.txt" || fail "run --speculative mtp -np 2 differs: $(cat "$work/spec2.txt")"
grep -q "drafted tokens accepted" "$work/spec2.log" || fail "no speculative summary"
# Two chained drafts per step (--speculative-tokens 2): the chain's second MTP call sends its hidden input inline.
ranks 2 "${RUN[@]}" --speculative mtp --speculative-tokens 2 >"$work/spec2k.txt" 2>"$work/spec2k.log" ||
  fail "run --speculative-tokens 2 -np 2: $(tail -5 "$work/spec2k.log")"
cmp -s "$work/run1.txt" "$work/spec2k.txt" || fail "run --speculative-tokens 2 -np 2 differs: $(cat "$work/spec2k.txt")"
grep -Eq "by position: [0-9]+ %, [0-9]+ %" "$work/spec2k.log" || fail "no per-position acceptance: $(cat "$work/spec2k.log")"

# The fp32 reference on the golden fixture: 16 experts on 3 ranks (6, 5, 5), token ids printed.
GOLDEN=(run --model "$data/golden/tiny-sparse" --path reference --tokens 1,2,3,4,5,6,7 --max-tokens 10 --temperature 0
        --print-ids)
"$glint" "${GOLDEN[@]}" >"$work/golden1.txt" 2>/dev/null
ranks 3 "${GOLDEN[@]}" >"$work/golden3.txt" 2>"$work/golden3.log" || fail "golden run -np 3: $(tail "$work/golden3.log")"
cmp -s "$work/golden1.txt" "$work/golden3.txt" || fail "golden run -np 3 differs"
grep -q "rank 0 holds routed experts 0–5 of 16" "$work/golden3.log" || fail "uneven split not logged"

# Tensor parallel (fp32 reference path): greedy text of the trained tiny model identical for 1 process and for
# 2 ranks with --tp 2 (every head set, dense MLP and expert split in two), with and without --speculative mtp;
# the golden fixture on 3 ranks --tp 3 (MLA's 4 heads split 2,1,1) and 4 ranks --tp 2 --ep 2.
REF=(run --path reference --prompt "Once upon a time" --max-tokens 12 --temperature 0 --threads 1)
"$glint" "${REF[@]}" >"$work/ref1.txt" 2>/dev/null
ranks 2 "${REF[@]}" --tp 2 >"$work/ref2.txt" 2>"$work/ref2.log" || fail "run --tp 2 -np 2: $(tail -5 "$work/ref2.log")"
cmp -s "$work/ref1.txt" "$work/ref2.txt" || fail "run --tp 2 differs: $(cat "$work/ref2.txt") vs $(cat "$work/ref1.txt")"
grep -q "tensor parallel over 2 ranks (--tp 2 --ep 1)" "$work/ref2.log" || fail "no tp shard line: $(cat "$work/ref2.log")"
ranks 2 "${REF[@]}" --tp 2 --speculative mtp >"$work/refspec2.txt" 2>"$work/refspec2.log" ||
  fail "run --tp 2 --speculative mtp -np 2: $(tail -5 "$work/refspec2.log")"
cmp -s "$work/ref1.txt" "$work/refspec2.txt" || fail "run --tp 2 --speculative mtp differs: $(cat "$work/refspec2.txt")"
ranks 3 "${GOLDEN[@]}" --tp 3 >"$work/goldentp3.txt" 2>"$work/goldentp3.log" || fail "golden --tp 3: $(tail "$work/goldentp3.log")"
cmp -s "$work/golden1.txt" "$work/goldentp3.txt" || fail "golden run --tp 3 -np 3 differs"
grep -q "MLA heads 0–1 of 4" "$work/goldentp3.log" || fail "uneven head split not logged: $(cat "$work/goldentp3.log")"
ranks 4 "${GOLDEN[@]}" --tp 2 --ep 2 >"$work/goldentp22.txt" 2>"$work/goldentp22.log" ||
  fail "golden --tp 2 --ep 2: $(tail "$work/goldentp22.log")"
cmp -s "$work/golden1.txt" "$work/goldentp22.txt" || fail "golden run --tp 2 --ep 2 -np 4 differs"

# Tensor parallel on the fast path (the default): the trained tiny model's KDA and MLA heads (2 of 4 each: 64-wide
# heads, 2 per 128-column scale group) and dense MLP columns (3 groups each) split over 2 ranks; greedy text
# identical to one process, with and without --speculative mtp, converted at load and from one container.
ranks 2 "${RUN[@]}" --tp 2 >"$work/fasttp2.txt" 2>"$work/fasttp2.log" || fail "fast run --tp 2: $(tail -5 "$work/fasttp2.log")"
cmp -s "$work/run1.txt" "$work/fasttp2.txt" || fail "fast run --tp 2 differs: $(cat "$work/fasttp2.txt") vs $(cat "$work/run1.txt")"
grep -q "KDA heads 0–1 of 4, MLA heads 0–1 of 4, dense MLP columns 0–383 of 768" "$work/fasttp2.log" ||
  fail "fast tp shard line: $(cat "$work/fasttp2.log")"
ranks 2 "${RUN[@]}" --tp 2 --speculative mtp >"$work/fasttpspec2.txt" 2>"$work/fasttpspec2.log" ||
  fail "fast run --tp 2 --speculative mtp: $(tail -5 "$work/fasttpspec2.log")"
cmp -s "$work/run1.txt" "$work/fasttpspec2.txt" || fail "fast run --tp 2 --speculative mtp differs: $(cat "$work/fasttpspec2.txt")"
"$glint" convert --model "$(dirname "$data")/../models/glint-tiny" --out "$work/tiny-c" >/dev/null 2>&1 || fail "convert"
ranks 2 "${RUN[@]}" --model "$work/tiny-c" --tp 2 >"$work/fasttpc.txt" 2>"$work/fasttpc.log" ||
  fail "fast run --tp 2 from a container: $(tail -5 "$work/fasttpc.log")"
cmp -s "$work/run1.txt" "$work/fasttpc.txt" || fail "fast run --tp 2 from a container differs: $(cat "$work/fasttpc.txt")"

# --experts-by-id: attention split by heads over --tp 2, the routed experts whole by id over the ranks (the fast path
# on the trained tiny model, the fp32 reference on the golden fixture's 16 experts over 4 ranks): greedy output
# identical to one process; refused at --tp 1, where it would change nothing.
ranks 2 "${RUN[@]}" --tp 2 --experts-by-id >"$work/fastbyid.txt" 2>"$work/fastbyid.log" ||
  fail "fast run --tp 2 --experts-by-id: $(tail -5 "$work/fastbyid.log")"
cmp -s "$work/run1.txt" "$work/fastbyid.txt" || fail "fast run --experts-by-id differs: $(cat "$work/fastbyid.txt")"
grep -q "whole experts, by id over every rank" "$work/fastbyid.log" || fail "no by-id shard line: $(cat "$work/fastbyid.log")"
ranks 4 "${GOLDEN[@]}" --tp 2 --experts-by-id >"$work/goldenbyid.txt" 2>"$work/goldenbyid.log" ||
  fail "golden --tp 2 --experts-by-id: $(tail "$work/goldenbyid.log")"
cmp -s "$work/golden1.txt" "$work/goldenbyid.txt" || fail "golden run --tp 2 --experts-by-id -np 4 differs"
grep -q "rank 0 holds routed experts 0–3 of 16" "$work/goldenbyid.log" || fail "by-id split: $(cat "$work/goldenbyid.log")"
if ranks 2 "${RUN[@]}" --experts-by-id >/dev/null 2>"$work/byidtp1.log"; then fail "--experts-by-id at --tp 1 accepted"; fi
grep -q "experts-by-id splits the routed experts whole over the ranks of a --tp > 1 layout" "$work/byidtp1.log" ||
  fail "--experts-by-id at --tp 1: $(cat "$work/byidtp1.log")"

echo "PASS"
