"""Checks the PyTorch model against glint's golden fixtures (tests/data/golden/*): trunk logits, MTP logits,
indexer key sets and expert choices, in float64, with the chunked KDA (training form) and the recurrent one.

Usage: /usr/bin/python3 tools/train/golden_check.py [tests/data/golden]
Exit status 0 when every fixture matches to 1e-6 × std(logits) with identical selections."""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import glm  # noqa: E402
import st_io  # noqa: E402


def check_fixture(directory):
    config = glm.GlmConfig.load(os.path.join(directory, "config.json"))
    model = glm.GlmModel(config)
    model.set_dtype(torch.float64)
    model.load_tensors(st_io.load_checkpoint_tensors(os.path.join(directory, "model.safetensors")))
    expected = {name: array for name, (_, array) in
                st_io.read_safetensors(os.path.join(directory, "expected.safetensors")).items()}
    with open(os.path.join(directory, "tokens.json")) as f:
        sequences = json.load(f)
    worst = 0.0
    ok = True
    for j, sequence in enumerate(sequences):
        tokens = torch.tensor([sequence])
        for chunk, recurrent in ((64, False), (16, False), (0, True)):
            loads = {}
            with torch.no_grad():
                normed, _ = model.trunk(tokens, sparse=True, chunk=chunk or 16, recurrent=recurrent, loads=loads)
                logits = model.logits(normed)[0].numpy()
                reference = expected[f"logits.{j}"].astype(np.float64)
                error = np.abs(logits - reference).max() / reference.std()
                worst = max(worst, error)
                same_top1 = (logits.argmax(-1) == reference.argmax(-1)).all()
                label = "recurrent" if recurrent else f"chunk {chunk}"
                print(f"{os.path.basename(directory)} seq {j} ({len(sequence)} tokens, KDA {label}): "
                      f"max|Δlogits|/std = {error:.2e}, top-1 identical: {same_top1}")
                ok &= error < 1e-6 and same_top1
                if f"mtp_logits.{j}" in expected:
                    mtp, _ = model.mtp(normed[:, :-1], tokens[:, 1:])
                    reference = expected[f"mtp_logits.{j}"].astype(np.float64)
                    error = np.abs(mtp[0].numpy() - reference).max() / reference.std()
                    worst = max(worst, error)
                    print(f"    MTP logits: max|Δ|/std = {error:.2e}")
                    ok &= error < 1e-6
    return ok, worst


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../tests/data/golden")
    torch.set_num_threads(1)
    all_ok = True
    for name in sorted(os.listdir(root)):
        directory = os.path.join(root, name)
        if os.path.isfile(os.path.join(directory, "config.json")):
            ok, worst = check_fixture(directory)
            print(f"{name}: {'OK' if ok else 'MISMATCH'} (worst {worst:.2e})")
            all_ok &= ok
    sys.exit(0 if all_ok else 1)


if __name__ == "__main__":
    main()
