"""Evaluates an exported model with the PyTorch implementation and writes the cross-check data.

  - held-out loss of the trained fp32 weights and of the exported (BF16/FP8-rounded) weights, over every held-out
    window (sparse DSA, as glint runs it);
  - sample generations (greedy and sampled) from a few prompts;
  - TESTDATA/crosscheck_tokens.json: held-out token sequences (JSON list of lists, `glint score --tokens-file`);
  - TESTDATA/crosscheck_logits.safetensors: logits.<i> F32 [T_i, vocab], computed in float64 on the exported
    weights (`glint score --reference`);
  - TESTDATA/tokenizer_cases.json: held-out texts and the ids this tool's encoder gives them (glint's tokenizer
    must agree);
  - TESTDATA/expected.json: the recorded figures the tests compare with.

Usage: /usr/bin/python3 tools/train/evaluate.py WORKDIR MODEL_DIR TESTDATA_DIR
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import export  # noqa: E402
import glm  # noqa: E402
import st_io  # noqa: E402
import train  # noqa: E402

GREEDY_TOKENS = 24
CROSSCHECK_LENGTHS = (160, 48)  # the first reaches well past the dense regime (index_topk + kpool − 1 = 67)
PROMPTS = [
    "The",
    "A computer",
    "Love is",
    "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Tell me something about computers.<|assistant|><think>",
    "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>Say something wise.<|assistant|><think>",
]


def load_exported(model_dir, dtype):
    config = glm.GlmConfig.load(os.path.join(model_dir, "config.json"))
    model = glm.GlmModel(config)
    model.set_dtype(dtype)
    model.load_tensors(st_io.load_checkpoint_tensors(os.path.join(model_dir, "model.safetensors"), dtype))
    return model


def heldout_loss(model, windows):
    return train.evaluate(model, windows)


def generate(model, encoder, prompt, max_new, temperature, top_p, seed, eos):
    ids = encoder.encode(prompt)
    generator = torch.Generator().manual_seed(seed)
    out = []
    with torch.no_grad():
        for _ in range(max_new):
            normed, _ = model.trunk(torch.tensor([ids + out]), sparse=True)
            logits = model.logits(normed[0, -1]).double()
            if temperature == 0:
                token = int(torch.argmax(logits))
            else:
                probs = torch.softmax(logits / temperature, dim=-1)
                sorted_probs, order = torch.sort(probs, descending=True)
                keep = torch.cumsum(sorted_probs, 0) - sorted_probs < top_p
                sorted_probs = sorted_probs * keep
                token = int(order[torch.multinomial(sorted_probs / sorted_probs.sum(), 1, generator=generator)])
            out.append(token)
            if token in eos:
                break
    return out


def main():
    workdir, model_dir, testdata = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(testdata, exist_ok=True)
    torch.set_num_threads(1)
    config = glm.GlmConfig.load(os.path.join(model_dir, "config.json"))
    seq = 256
    windows = train.heldout_windows(workdir, seq)
    results = {}

    trained, state = export.load_trained(workdir)
    results["trained_fp32_heldout_loss"], results["trained_fp32_heldout_mtp_loss"] = heldout_loss(trained, windows)
    exported = load_exported(model_dir, torch.float32)
    results["exported_heldout_loss"], results["exported_heldout_mtp_loss"] = heldout_loss(exported, windows)
    results["heldout_tokens"] = int(windows.shape[0] * seq)
    results["heldout_windows"] = int(windows.shape[0])
    results["exported_heldout_perplexity"] = math.exp(results["exported_heldout_loss"])
    results["training_steps"] = state["step"]
    print(json.dumps(results, indent=2), flush=True)

    # Cross-check sequences: held-out windows (document starts), truncated.
    exported64 = load_exported(model_dir, torch.float64)
    sequences = [windows[i, :n].tolist() for i, n in enumerate(CROSSCHECK_LENGTHS)]
    logits_out, nll, count = {}, 0.0, 0
    for i, tokens in enumerate(sequences):
        with torch.no_grad():
            normed, _ = exported64.trunk(torch.tensor([tokens]), sparse=True, chunk=64)
            logits = exported64.logits(normed)[0]
        logits_out[f"logits.{i}"] = ("F32", logits.numpy().astype(np.float32))
        nll += float(F.cross_entropy(logits[:-1], torch.tensor(tokens[1:]), reduction="sum"))
        count += len(tokens) - 1
    st_io.write_safetensors(os.path.join(testdata, "crosscheck_logits.safetensors"), logits_out)
    with open(os.path.join(testdata, "crosscheck_tokens.json"), "w") as f:
        f.write("[\n" + ",\n".join("  " + json.dumps(s) for s in sequences) + "\n]\n")
    results["crosscheck_nll_per_token"] = nll / count
    results["crosscheck_perplexity"] = math.exp(nll / count)
    results["crosscheck_predicted_tokens"] = count

    # Tokenizer cases: the first held-out fortunes, plain and in the chat template.
    with open(os.path.join(workdir, "tokenizer.json")) as f:
        tokenizer = json.load(f)
    char_of = {v: k for k, v in bpe.BYTE_TO_CHAR.items()}
    token_bytes = [None] * len(tokenizer["model"]["vocab"])
    for spelling, i in tokenizer["model"]["vocab"].items():
        token_bytes[i] = bytes(char_of[ch] for ch in spelling)
    id_of = {t: i for i, t in enumerate(token_bytes)}
    merges = [(id_of[bytes(char_of[ch] for ch in a)], id_of[bytes(char_of[ch] for ch in b)])
              for a, b in tokenizer["model"]["merges"]]
    encoder = bpe.Encoder(token_bytes, merges, config.vocab_size)
    with open(os.path.join(workdir, "heldout.txt")) as f:
        texts = json.load(f)[:12]
    texts.append(PROMPTS[3] + "Computers are useless.<|user|>")
    cases = [{"text": t, "ids": encoder.encode(t)} for t in texts]
    with open(os.path.join(testdata, "tokenizer_cases.json"), "w") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")

    # Samples.
    eos = set(config.raw["eos_token_id"])
    samples = []
    for i, prompt in enumerate(PROMPTS):
        for temperature in (0.0, 0.8):
            ids = generate(exported, encoder, prompt, 60, temperature, 0.95, seed=i, eos=eos)
            samples.append({"prompt": prompt, "temperature": temperature, "completion": encoder.decode(ids)})
            print(json.dumps(samples[-1], ensure_ascii=False), flush=True)
    results["samples"] = samples
    # Greedy continuations in float64 (`glint run --temperature 0 --print-ids` must reproduce them), with the
    # smallest top-1/top-2 logit gap met on the way (a gap at fp32 rounding level would make the check flaky).
    greedy = []
    for prompt in PROMPTS:
        ids = generate(exported64, encoder, prompt, GREEDY_TOKENS, 0.0, 1.0, seed=0, eos=eos)
        context = encoder.encode(prompt) + ids
        with torch.no_grad():
            normed, _ = exported64.trunk(torch.tensor([context]), sparse=True, chunk=64)
            logits = exported64.logits(normed)[0, len(context) - len(ids) - 1:len(context) - 1]  # the decisions
        top2 = torch.topk(logits, 2, dim=-1).values
        if ids and ids[-1] in eos:
            ids = ids[:-1]
        greedy.append({"prompt": prompt, "ids": ids, "min_top2_gap": float((top2[:, 0] - top2[:, 1]).min())})
        print(json.dumps(greedy[-1]), flush=True)
    results["greedy"] = greedy
    with open(os.path.join(testdata, "expected.json"), "w") as f:
        json.dump({k: v for k, v in results.items() if k != "samples"}, f, indent=1)
        f.write("\n")
    with open(os.path.join(workdir, "evaluation.json"), "w") as f:
        json.dump(results, f, indent=2, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
