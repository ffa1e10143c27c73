#!/usr/bin/env python3
"""Tables of the peer comparisons (bench/peer/llama_cpp.sh, bench/peer/ik_llama.sh) from the files their runs left
in OUT.

  peer_tables.py engines OUT [--peer llama|ik]   glint bench-model logs beside llama-bench JSON: prefill and
                                                 one-sequence decode
  peer_tables.py servers OUT [--peer llama|ik]   glint bench results.json of glint serve beside those of the peer's
                                                 llama-server

Every ratio is a speed-up of glint over the peer (> 1: glint is faster): tokens/s are divided glint ÷ peer, times
peer ÷ glint. Against ik_llama.cpp the engines are compared with the better of ik's two configurations (-rtr 1,
-rtr 1 -muge 1) in each row. Standard library only, so it runs wherever the scripts do.
"""

import json
import pathlib
import re
import sys

# OUT/engines/<engine>-<weights>-t<threads>.* and OUT/servers/<engine>-<weights>-c<concurrency>/results.json
PAIRS = [("int8", "Q8_0"), ("int4", "Q4_0")]
# ik_llama.sh: OUT/engines/ik-<variant>-{prefill,decode}-t<threads>.json, one variant per llama-bench configuration
IK_VARIANTS = [("rtr", "ik -rtr 1"), ("rtr-muge", "ik -rtr 1 -muge 1")]

PREFILL = re.compile(r"^== prefill (\d+) tokens: [\d.]+ s = ([\d.]+) tokens/s")
DECODE = re.compile(r"^== decode 1 sequence \(context (\d+)\): ([\d.]+) ms/step = ([\d.]+) tokens/s; ([\d.]+) GB")
LOAD = re.compile(r"^== load \d: .*?, (\w+) experts, ([\d.]+) GB")


def glint_engine(path):
    """{('prefill', n): tok/s, ('decode', 1): tok/s, 'weights_gb': GB, 'decode_gb': GB} of a bench-model log."""
    figures = {}
    if not path.exists():
        return figures
    for line in path.read_text(errors="replace").splitlines():
        if m := PREFILL.match(line):
            figures[("prefill", int(m[1]))] = float(m[2])
        elif m := DECODE.match(line):
            figures[("decode", 1)] = float(m[3])
            figures["decode_gb"] = float(m[4])
        elif m := LOAD.match(line):
            figures["weights_gb"] = float(m[2])
    return figures


def llama_engine(paths):
    """The same keys from llama-bench -o json files (tests of several thread counts are told apart by the caller)."""
    figures = {}
    for path in paths:
        if not path.exists():
            continue
        text = path.read_text(errors="replace")
        try:
            tests = json.loads(text[text.index("["):]) if "[" in text else []
        except ValueError as error:
            raise SystemExit(f"peer_tables.py: {path}: not llama-bench JSON ({error})")
        for test in tests:
            if test.get("n_prompt", 0) > 0 and test.get("n_gen", 0) == 0:
                figures[("prefill", test["n_prompt"])] = test["avg_ts"]
            elif test.get("n_gen", 0) > 0 and (test.get("n_prompt", 0) == 0 or "@pp" in test.get("test", "")):
                figures[("decode", 1)] = test["avg_ts"]  # tgN, or ik's tgN@ppM: N tokens after an untimed prompt
            figures["weights_gb"] = test.get("model_size", 0) / 1e9
    return figures


def fmt(value, digits=1):
    return "—" if value is None else f"{value:,.{digits}f}"


def ratio(numerator, denominator):
    if numerator is None or denominator is None or denominator == 0:
        return "—"
    return f"**{numerator / denominator:.2f}×**"


def thread_counts(out):
    counts = set()
    for path in (out / "engines").glob("glint-*-t*.log"):
        counts.add(int(path.stem.rsplit("-t", 1)[1]))
    return sorted(counts)


def engines_table(out):
    rows = ["| | threads | glint int8 | llama.cpp Q8_0 | speed-up | glint int4 experts | llama.cpp Q4_0 | speed-up |",
            "|---|---|---|---|---|---|---|---|"]
    sizes = {}
    for threads in thread_counts(out):
        got = {}
        for glint_w, llama_w in PAIRS:
            got[glint_w] = glint_engine(out / "engines" / f"glint-{glint_w}-t{threads}.log")
            got[llama_w] = llama_engine([out / "engines" / f"llama-{llama_w}-{kind}-t{threads}.json"
                                         for kind in ("prefill", "decode")])
            for name in (glint_w, llama_w):
                sizes.setdefault(name, got[name].get("weights_gb"))
        keys = sorted({k for figures in got.values() for k in figures if isinstance(k, tuple)},
                      key=lambda k: (k[0] != "prefill", k[1]))  # prefill by length, then decode
        for key in keys:
            label = f"prefill {key[1]:,} tokens, tok/s" if key[0] == "prefill" else "decode, 1 sequence, tok/s"
            cells = [label, str(threads)]
            for glint_w, llama_w in PAIRS:
                g, l = got[glint_w].get(key), got[llama_w].get(key)
                cells += [fmt(g), fmt(l), ratio(g, l)]
            rows.append("| " + " | ".join(cells) + " |")
    size_cells = ["weights, GB", ""]
    for glint_w, llama_w in PAIRS:
        size_cells += [fmt(sizes.get(glint_w), 3), fmt(sizes.get(llama_w), 3), ""]
    rows.append("| " + " | ".join(size_cells) + " |")
    return "\n".join(rows)


def ik_engines_table(out):
    """glint int8 beside each ik configuration, and the speed-up over the better of the two in each row."""
    rows = ["| | threads | glint int8 | " + " | ".join(label + " Q8_0" for _, label in IK_VARIANTS) +
            " | speed-up over ik's best |", "|---|---|---|" + "---|" * len(IK_VARIANTS) + "---|"]
    sizes = {}
    for threads in thread_counts(out):
        glint = glint_engine(out / "engines" / f"glint-int8-t{threads}.log")
        ik = [llama_engine([out / "engines" / f"ik-{variant}-{kind}-t{threads}.json" for kind in ("prefill", "decode")])
              for variant, _ in IK_VARIANTS]
        sizes.setdefault("glint", glint.get("weights_gb"))
        sizes.setdefault("ik", next((f.get("weights_gb") for f in ik if f.get("weights_gb")), None))
        keys = sorted({k for figures in [glint] + ik for k in figures if isinstance(k, tuple)},
                      key=lambda k: (k[0] != "prefill", k[1]))
        for key in keys:
            label = f"prefill {key[1]:,} tokens, tok/s" if key[0] == "prefill" else "decode, 1 sequence, tok/s"
            peers = [f.get(key) for f in ik]
            best = max((v for v in peers if v is not None), default=None)
            cells = [label, str(threads), fmt(glint.get(key))] + [fmt(v) for v in peers] + [ratio(glint.get(key), best)]
            rows.append("| " + " | ".join(cells) + " |")
    rows.append("| weights, GB | | " + fmt(sizes.get("glint"), 3) + " | " +
                " | ".join(fmt(sizes.get("ik"), 3) for _ in IK_VARIANTS) + " | |")
    return "\n".join(rows)


def server_level(path):
    if not path.exists():
        return None
    results = json.loads(path.read_text())
    levels = results.get("levels") or []
    return levels[0] if levels else None


def summary(level, key):
    return None if level is None else (level.get(key) or {}).get("median")


def servers_table(out, peer):
    """One row per weights pair and concurrency; the peer's runs are named <peer prefix>-<weights>-c<N>."""
    prefix, name, pairs = ("ik", "ik", PAIRS[:1]) if peer == "ik" else ("llama", "llama.cpp", PAIRS)
    rows = [f"| weights | concurrency | TTFT p50 ms, glint / {name} | speed-up | TPOT p50 ms, glint / {name} | "
            f"speed-up | total tok/s, glint / {name} | speed-up | failed, glint / {name} |",
            "|---|---|---|---|---|---|---|---|---|"]
    for glint_w, peer_w in pairs:
        runs = sorted((p for p in (out / "servers").glob(f"glint-{glint_w}-c*") if p.is_dir()),
                      key=lambda p: int(p.name.rsplit("-c", 1)[1]))
        for run in runs:
            concurrency = run.name.rsplit("-c", 1)[1]
            g = server_level(run / "results.json")
            l = server_level(out / "servers" / f"{prefix}-{peer_w}-c{concurrency}" / "results.json")
            g_ttft, l_ttft = summary(g, "ttft_ms"), summary(l, "ttft_ms")
            g_tpot, l_tpot = summary(g, "tpot_ms"), summary(l, "tpot_ms")
            g_tput = None if g is None else g.get("total_throughput")
            l_tput = None if l is None else l.get("total_throughput")
            failed = "/".join("—" if x is None else str(x.get("failed", 0)) for x in (g, l))
            rows.append(f"| {glint_w} / {peer_w} | {concurrency} | {fmt(g_ttft, 0)} / {fmt(l_ttft, 0)} | "
                        f"{ratio(l_ttft, g_ttft)} | {fmt(g_tpot)} / {fmt(l_tpot)} | {ratio(l_tpot, g_tpot)} | "
                        f"{fmt(g_tput)} / {fmt(l_tput)} | {ratio(g_tput, l_tput)} | {failed} |")
    return "\n".join(rows)


def main(argv):
    peer = "llama"
    if len(argv) == 4 and argv[2] == "--peer" and argv[3] in ("llama", "ik"):
        peer, argv = argv[3], argv[:2]
    if len(argv) != 2 or argv[0] not in ("engines", "servers"):
        sys.exit("usage: peer_tables.py engines|servers OUT [--peer llama|ik]")
    out = pathlib.Path(argv[1])
    if argv[0] == "engines":
        print(ik_engines_table(out) if peer == "ik" else engines_table(out))
    else:
        print(servers_table(out, peer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
