# Sourced by tests/cli scripts that compare `glint score --reference` tables. Needs a `fail` function.

# check_agreement FILE LABEL TOP1 KL: the per-sequence rows of the table in FILE, weighted over their positions,
# have top-1 agreement ≥ TOP1 (a fraction) and mean KL ≤ KL nats; prints the figures.
check_agreement() {
  awk -v label="$2" -v min_top1="$3" -v max_kl="$4" \
    '$1 ~ /^[0-9]+$/ { n += $2; top1 += $2 * $7 / 100; kl += $2 * $8 }
     END { printf "%s: top-1 %.2f%%, mean KL %.3g over %d positions\n", label, 100 * top1 / n, kl / n, n;
           exit !(n > 0 && top1 / n >= min_top1 && kl / n <= max_kl) }' "$1" || fail "$2 outside its thresholds"
}
