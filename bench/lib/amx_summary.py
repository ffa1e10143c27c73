#!/usr/bin/env python3
"""Tables of the AMX kernels against the others glint could dispatch, from glint_kernel_bench's JSON output
(--benchmark_out_format=json with repetitions: the medians are read). Used by bench/amx_session.sh.

  amx_summary.py RESULTS.json [MORE.json ...]

Three tables, each row one shape, each column one kernel, the last column the ratio that decides the dispatch:
  * int8 prefill products (Prefill/LinearI8, GOPS): isa:2 the AVX-512 level, isa:3 the AMX level as dispatched,
    isa:4-7 the AMX tile walks at every token count (gemm_i8.h AmxWalk; the engine's is 7); ratio = the best walk / isa:3;
  * MLA attention (MlaAttend*, GFLOPS): AVX512-BF16 rounding its rows, the same over a bf16 cache's rows in place,
    AMX-BF16 tiles (dispatched for bf16 attention at the AMX level); ratio = AMX / AVX512-BF16 (both round fp32 rows);
  * the indexer's int8 scores (Indexer/Int8Scores, GB/s of keys): generic, VNNI, AMX; ratio = AMX / VNNI.
A benchmark that skipped (the CPU lacks what it needs) shows its message instead of a figure.
"""
import json
import re
import sys

WALKS = {4: "walk 4", 5: "walk 5", 6: "walk 6", 7: "walk 7 (engine's)"}


def medians(paths):
    """{run name: (counters, error message or None)}: the median aggregate where the runs were repeated, else the
    run itself."""
    found = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for b in data.get("benchmarks", []):
            name = b.get("run_name", b["name"])
            if b.get("error_occurred"):
                found.setdefault(name, ({}, b.get("error_message", "skipped")))
            elif b.get("run_type") == "aggregate":
                if b.get("aggregate_name") == "median":
                    found[name] = (b, None)
            else:
                found.setdefault(name, (b, None))
    return found


def fields(name):
    """'Prefill/LinearI8/rows:4096/cols:4096/...' → ('Prefill/LinearI8', {'rows': '4096', ...})."""
    parts = name.split("/")
    family = "/".join(p for p in parts if ":" not in p and p not in ("real_time",))
    return family, dict(p.split(":", 1) for p in parts if ":" in p)


def cell(entry, counter):
    if entry is None:
        return "—"
    counters, error = entry
    if error:
        return "skipped (" + error + ")"
    value = counters.get(counter)
    return "—" if value is None else f"{value:.0f}"


def value(entry, counter):
    if entry is None or entry[1]:
        return None
    return entry[0].get(counter)


def ratio(a, b):
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}×"


def table(title, header, rows):
    print(title)
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    for r in [header] + rows:
        print("  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    print()


def main(paths):
    runs = medians(paths)
    # int8 prefill products by shape.
    shapes = {}
    for name, entry in runs.items():
        family, f = fields(name)
        if family == "Prefill/LinearI8" and "isa" in f:
            key = (int(f["rows"]), int(f["cols"]), int(f["tokens"]), int(f["threads"]))
            shapes.setdefault(key, {})[int(f["isa"])] = entry
    rows = []
    for (r, c, t, th), by_isa in sorted(shapes.items()):
        if not any(i >= 3 for i in by_isa):
            continue
        walks = [value(by_isa.get(i), "GOPS") for i in WALKS]
        best = max((w for w in walks if w is not None), default=None)
        rows.append([f"{r} × {c} × {t} tokens, {th} thread{'s' if th > 1 else ''}",
                     cell(by_isa.get(2), "GOPS"), cell(by_isa.get(3), "GOPS")] +
                    [cell(by_isa.get(i), "GOPS") for i in WALKS] +
                    [ratio(best, value(by_isa.get(3), "GOPS"))])
    table("int8 prefill products, GOPS (medians)",
          ["shape", "avx512", "amx (dispatched)"] + list(WALKS.values()) + ["best walk ÷ dispatched"], rows)

    # MLA attention by heads and positions.
    attention = {}
    for name, entry in runs.items():
        family, f = fields(name)
        m = re.fullmatch(r"MlaAttend(Bf16|Bf16InPlace|Bf16Amx)?", family.split("/")[0])
        if m and "heads" in f:
            key = (int(f["heads"]), int(f.get("positions", 0)))
            attention.setdefault(key, {})[m.group(1) or "Fp32"] = entry
    rows = []
    for (heads, positions), by_kernel in sorted(attention.items()):
        if "Bf16Amx" not in by_kernel:
            continue
        rows.append([f"{heads} heads × {positions} positions", cell(by_kernel.get("Fp32"), "GFLOPS"),
                     cell(by_kernel.get("Bf16"), "GFLOPS"), cell(by_kernel.get("Bf16InPlace"), "GFLOPS"),
                     cell(by_kernel.get("Bf16Amx"), "GFLOPS"),
                     ratio(value(by_kernel.get("Bf16Amx"), "GFLOPS"), value(by_kernel.get("Bf16"), "GFLOPS"))])
    table("MLA attention, GFLOPS (medians, one thread)",
          ["call", "fp32", "avx512-bf16", "avx512-bf16 in place", "amx-bf16", "amx ÷ avx512-bf16"], rows)

    # Indexer int8 scores by threads.
    indexer = {}
    for name, entry in runs.items():
        family, f = fields(name)
        if family == "Indexer/Int8Scores" and "kernel" in f:
            indexer.setdefault(int(f["threads"]), {})[int(f["kernel"])] = entry
    rows = [[f"{threads} thread{'s' if threads > 1 else ''}", cell(k.get(0), "GB/s"), cell(k.get(1), "GB/s"),
             cell(k.get(2), "GB/s"), ratio(value(k.get(2), "GB/s"), value(k.get(1), "GB/s"))]
            for threads, k in sorted(indexer.items())]
    table("the indexer's int8 scores over 262,144 pooled keys, GB/s of keys (medians)",
          ["threads", "generic", "vnni", "amx", "amx ÷ vnni"], rows)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
