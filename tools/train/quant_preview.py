"""A PyTorch preview of the quality benchmark (docs/quality.md): the exported model with simulated int8 weights
(symmetric, a scale per output row and 128-wide input group, round to nearest) and with W8A8 (int8 activations
too, a scale per token and 128-wide group), against the unquantised (exported fp32) model on the held-out
windows: perplexity, top-1 agreement and mean KL(fp32 ‖ quantised) of the next-token distributions.

As in the golden README's int8 evaluation, the router, the indexer, the embedding and lm_head stay unquantised
(and the F32 mHC / KDA gate tensors). This predicts what glint's quantised paths should reach; the benchmark
proper runs `glint score` on those paths.

Usage: /usr/bin/python3 tools/train/quant_preview.py WORKDIR MODEL_DIR [OUT.json]
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import evaluate  # noqa: E402
import glm  # noqa: E402
import train  # noqa: E402

GROUP = 128


def quantize_groups(x):
    """Symmetric int8 fake quantisation over groups of GROUP along the last dim (scale = amax/127)."""
    shape = x.shape
    pad = (-shape[-1]) % GROUP
    y = torch.nn.functional.pad(x, (0, pad)).unflatten(-1, (-1, GROUP))
    scale = y.abs().amax(-1, keepdim=True).clamp_min(1e-30) / 127.0
    return (torch.round(y / scale).clamp(-127, 127) * scale).flatten(-2)[..., :shape[-1]]


def quantized_names(model):
    out = []
    for name, shape, _ in model.specs:
        if len(shape) != 2 or name.endswith("_fn") or "indexer" in name or name.endswith("gate.weight") \
                or name in ("embed_tokens.weight", "lm_head.weight") or name.endswith("compress_gate"):
            continue
        out.append(name)
    return out


def run(model, windows, activations=False, names=()):
    act_ids = {id(model.p(n)) for n in names} if activations else set()
    original = glm.linear

    def linear(x, weight):
        return original(quantize_groups(x) if id(weight) in act_ids else x, weight)

    glm.linear = linear
    try:
        logits = []
        with torch.no_grad():
            for i in range(0, len(windows), 8):
                x = windows[i:i + 8, :-2]
                normed, _ = model.trunk(x, sparse=True)
                logits.append(torch.log_softmax(model.logits(normed).double(), -1))
        return torch.cat(logits)
    finally:
        glm.linear = original


def main():
    workdir, model_dir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    windows = train.heldout_windows(workdir, 256)
    if os.environ.get("QUICK"):
        windows = windows[:2]
    model = evaluate.load_exported(model_dir, torch.float32)
    targets = windows[:, 1:-1]
    base = run(model, windows)
    names = quantized_names(model)
    with torch.no_grad():
        for n in names:
            w = model.p(n)
            w.copy_(quantize_groups(w))
    results = {}
    for label, activations in (("int8 weights", False), ("W8A8", True)):
        q = run(model, windows, activations, names)
        nll = -q.gather(-1, targets.unsqueeze(-1)).mean()
        results[label] = {
            "perplexity": math.exp(float(nll)),
            "top1_agreement": float((q.argmax(-1) == base.argmax(-1)).double().mean()),
            "mean_kl": float((base.exp() * (base - q)).sum(-1).mean()),
        }
    results["fp32"] = {"perplexity": math.exp(float(-base.gather(-1, targets.unsqueeze(-1)).mean()))}
    print(json.dumps(results, indent=2))
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as f:
            json.dump(results, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
