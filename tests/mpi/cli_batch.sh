#!/usr/bin/env bash
# `glint batch` under mpirun -np 2 (docs/batch.md "Offline"): the same greedy answers as one process, by
# custom_id, with --ep 2 (the default) and with --tp 2 — up to a near-tie: a split rounds its sums in another order
# (docs/distributed.md "Tolerance"), which moves logprobs by ≈ 1e-3 on glint-tiny, so an answer may take the other
# of two tokens that one process ranks within 0.02 nats, and must be identical before it; only rank 0 touches the
# files (the follower runs in a directory without the input); --resume under mpirun answers the missing requests
# exactly once, identical to the run it resumes; a bad input ends every rank with rank 0's message.
# Args: path-to-glint, tests/data dir, mpirun.
set -euo pipefail
glint="$(realpath "$1")"  # the test changes directory
mpirun="$3"
source "$(dirname "${BASH_SOURCE[0]}")/lib/mpi_util.sh"  # $work, fail, ranks
ENGINE=(--memory 64M --max-seqs 4 --max-model-len 512 --threads 1)

write_batch_input "$work/in.jsonl" 8
python3 - "$work/in.jsonl" <<'EOF'  # with the top two logprobs of every token, for same_greedy_answers
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
for l in lines:
    l["body"].update(logprobs=True, top_logprobs=2)
open(sys.argv[1], "w").write("".join(json.dumps(l) + "\n" for l in lines))
EOF
# same_greedy_answers ONE OTHER: every answer of OTHER equals one process's token for token, or up to a token where
# one process's chosen token beat OTHER's by at most 0.02 nats (a near-tie; fails past it or with a different
# prefix).
same_greedy_answers() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
def load(path):
    return {r["custom_id"]: r["response"]["body"]["choices"][0]["logprobs"]["content"] for r in map(json.loads, open(path))}
one, other = load(sys.argv[1]), load(sys.argv[2])
if sorted(one) != sorted(other):
    sys.exit(f"custom_ids {sorted(other)} != {sorted(one)}")
for cid in sorted(one):
    a, b = one[cid], other[cid]
    if len(a) != len(b):
        sys.exit(f"{cid}: {len(b)} tokens against one process's {len(a)}")
    for p, (x, y) in enumerate(zip(a, b)):
        if x["token"] == y["token"]:
            continue
        second = {t["token"]: t["logprob"] for t in x["top_logprobs"]}.get(y["token"], float("-inf"))
        margin = x["logprob"] - second
        if margin > 0.02:
            sys.exit(f"{cid}: token {p} is {y['token']!r} where one process chose {x['token']!r} by {margin:.4f} nats")
        print(f"{cid}: a near-tie at token {p}: {x['token']!r} / {y['token']!r}, {margin:.4f} nats apart",
              file=sys.stderr)
        break
EOF
}
# answers OUT: "custom_id<TAB>content" sorted, failing unless every custom_id of the input is there exactly once
answers() {
  python3 - "$work/in.jsonl" "$1" <<'EOF'
import json, sys
wanted = sorted(json.loads(l)["custom_id"] for l in open(sys.argv[1]))
got = [json.loads(l) for l in open(sys.argv[2])]
ids = sorted(r["custom_id"] for r in got)
if ids != wanted:
    sys.exit(f"custom_ids {ids} != {wanted}")
for r in sorted(got, key=lambda r: r["custom_id"]):
    assert r["response"]["status_code"] == 200, r
    print(r["custom_id"], repr(r["response"]["body"]["choices"][0]["message"]["content"]), sep="\t")
EOF
}

cd "$work"
timeout 60 "$glint" batch "${ENGINE[@]}" --input in.jsonl --output one.out >one.log 2>&1 || fail "one process: $(tail -3 one.log)"
answers one.out >one.txt || fail "one process: bad output"

# --ep 2 (default): rank 1 runs in a directory that has neither the input nor the output.
mkdir -p lead follow
cp in.jsonl lead/
timeout 60 "$mpirun" "${MPIRUN_LOCAL[@]}" -np 1 --wdir "$work/lead" "$glint" batch "${ENGINE[@]}" --input in.jsonl \
  --output ep.out --report ep.json : -np 1 --wdir "$work/follow" "$glint" batch "${ENGINE[@]}" --input in.jsonl \
  --output ep.out --report ep.json >ep.log 2>&1 || fail "--ep 2: $(tail -5 ep.log)"
grep -q "shard expert parallel over 2 ranks" ep.log || fail "--ep 2: no shard line: $(tail -5 ep.log)"
answers lead/ep.out >ep.txt || fail "--ep 2: bad output"
same_greedy_answers one.out lead/ep.out 2>ep.ties || fail "--ep 2: answers differ: $(cat ep.ties; diff one.txt ep.txt)"
[[ -z "$(ls follow)" ]] || fail "rank 1 wrote files: $(ls follow)"
python3 -c "import json,sys; r=json.load(open('lead/ep.json')); sys.exit(0 if r['requests_this_run']==8 and r['generated_tokens']==64 else 1)" ||
  fail "--report under mpirun: $(cat lead/ep.json)"

# --tp 2, killed in effect after three results: keep three lines and --resume the rest.
ranks 2 batch --tp 2 "${ENGINE[@]}" --input in.jsonl --output tp.out >tp.log 2>&1 || fail "--tp 2: $(tail -5 tp.log)"
grep -q "tensor parallel over 2 ranks" tp.log || fail "--tp 2: no shard line: $(tail -5 tp.log)"
answers tp.out >tp.txt || fail "--tp 2: bad output"
same_greedy_answers one.out tp.out 2>tp.ties || fail "--tp 2: answers differ: $(cat tp.ties; diff one.txt tp.txt)"
head -3 tp.out >resume.out
ranks 2 batch --tp 2 "${ENGINE[@]}" --input in.jsonl --output resume.out --resume >resume.log 2>&1 ||
  fail "--resume under mpirun: $(tail -5 resume.log)"
grep -q "3 of 8 requests are in resume.out; 5 to go" resume.log || fail "--resume: $(grep -i resume resume.log)"
answers resume.out >resume.txt || fail "--resume under mpirun: not every custom_id exactly once"
cmp -s tp.txt resume.txt || fail "--resume: answers differ from the run it resumes: $(diff tp.txt resume.txt)"

# A bad input: rank 0 fails before the ranks join; every rank ends, with rank 0's message.
echo "not json" >bad.jsonl
status=0
ranks 2 batch "${ENGINE[@]}" --input bad.jsonl --output bad.out >bad.log 2>&1 || status=$?
[[ $status -ne 0 && $status -ne 124 ]] || fail "a bad input under mpirun exited $status: $(tail -5 bad.log)"
grep -q "no line names its url" bad.log || fail "a bad input: no message naming it: $(tail -5 bad.log)"
echo "PASS"
