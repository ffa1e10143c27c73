#!/usr/bin/env bash
# Draws the loss curves of a training run (WORKDIR/train.log, one JSON object per line) as an SVG with gnuplot.
# Usage: tools/train/plot_loss.sh WORKDIR OUT.svg
set -euo pipefail
workdir=$1
out=$2
data=$(mktemp)
heldout=$(mktemp)
trap 'rm -f "$data" "$heldout"' EXIT
/usr/bin/python3 - "$workdir/train.log" "$data" "$heldout" <<'EOF'
import json, sys
train, held = {}, {}  # by step: a resumed run repeats the steps after its last checkpoint; keep the later ones
for line in open(sys.argv[1]):
    entry = json.loads(line)
    if "loss" in entry:
        train[entry["step"]] = (entry["tokens"] / 1000, entry["loss"], entry["mtp_loss"])
    elif "heldout_loss" in entry and not entry.get("final"):
        held[entry["step"]] = (entry["step"] * 1.024, entry["heldout_loss"], entry["heldout_mtp_loss"])
steps = sorted(train)
with open(sys.argv[2], "w") as f:  # the logged single-batch losses are noisy: mean of 5 consecutive log lines
    for i, step in enumerate(steps):
        window = [train[s] for s in steps[max(0, i - 4):i + 1]]
        print(train[step][0], *(sum(w[k] for w in window) / len(window) for k in (1, 2)), file=f)
with open(sys.argv[3], "w") as f:
    for step in sorted(held):
        print(*held[step], file=f)
EOF
gnuplot <<EOF
set terminal svg size 720,420 font "sans,12"
set output "$out"
set xlabel "training tokens (thousands)"
set ylabel "cross-entropy (nats/token)"
set key top right
set grid
plot "$data" using 1:2 with lines lw 1.5 lc rgb "#1f77b4" title "train: next token (mean of 50 steps)", \
     "$data" using 1:3 with lines lw 1.5 lc rgb "#aec7e8" title "train: MTP, token after next", \
     "$heldout" using 1:2 with linespoints pt 7 ps 0.6 lw 2 lc rgb "#d62728" title "held-out (16 windows): next token", \
     "$heldout" using 1:3 with linespoints pt 7 ps 0.6 lw 1.5 lc rgb "#ff9896" title "held-out (16 windows): MTP"
EOF
echo "wrote $out"
