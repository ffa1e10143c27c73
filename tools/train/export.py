"""Exports a trained checkpoint in the release's HF layout (model doc §2, §9; src/io/checkpoint_schema.cc):

  OUT/config.json, generation_config.json     the release layout (outer glm5_next + text_config)
  OUT/model.safetensors                        exactly ExpectedTensors(config): FP8 e4m3 with a 128×128 block
                                               `_scale_inv` (amax/448) where the release is FP8, BF16 and F32 elsewhere
  OUT/tokenizer.json, tokenizer_config.json    byte-level BPE + GLM's special tokens and chat template

Usage: /usr/bin/python3 tools/train/export.py WORKDIR OUT
"""
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import glm  # noqa: E402
import st_io  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def load_trained(workdir):
    config = glm.GlmConfig.load(os.path.join(workdir, "config.json"))
    model = glm.GlmModel(config)
    state = torch.load(os.path.join(workdir, "checkpoint.pt"))
    model.load_state_dict(state["model"])
    model.buffers_.update(state["buffers"])
    return model, state


def export_tensors(model):
    tensors = {}
    for name, shape, storage in model.specs:
        value = model.p(name).detach().to(torch.float32).numpy().reshape(shape)
        full = glm.checkpoint_name(name)
        if storage == "fp8":
            codes, scale = st_io.quantize_fp8_block(value)
            tensors[full] = ("F8_E4M3", codes)
            tensors[full + "_scale_inv"] = ("F32", scale)
        elif storage == "bf16":
            tensors[full] = ("BF16", st_io.float_to_bf16_bits(value))
        else:
            tensors[full] = ("F32", value.astype(np.float32))
    return tensors


def tokenizer_config(vocab_size):
    specials = bpe.special_ids(vocab_size)
    with open(os.path.join(HERE, "chat_template.jinja")) as f:
        template = f.read()
    decoder = {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": True} for c, i in sorted(specials.items(), key=lambda kv: kv[1])}
    return {"added_tokens_decoder": decoder, "additional_special_tokens": sorted(specials, key=specials.get),
            "bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
            "clean_up_tokenization_spaces": False, "do_lower_case": False, "model_max_length": 1048576,
            "padding_side": "left", "remove_space": False, "tokenizer_class": "PreTrainedTokenizerFast",
            "chat_template": template}


def main():
    workdir, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    model, state = load_trained(workdir)
    c = model.c
    st_io.write_safetensors(os.path.join(out, "model.safetensors"), export_tensors(model),
                            metadata={"format": "pt", "producer": "glint tools/train/export.py"})
    shutil.copy(os.path.join(workdir, "config.json"), os.path.join(out, "config.json"))
    text = c.raw
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"_from_model_config": False, "do_sample": True, "temperature": 1.0, "top_p": 0.95,
                   "eos_token_id": text["eos_token_id"], "pad_token_id": text["pad_token_id"]}, f, indent=2)
        f.write("\n")
    shutil.copy(os.path.join(workdir, "tokenizer.json"), os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(c.vocab_size), f, indent=2, ensure_ascii=False)
        f.write("\n")
    size = os.path.getsize(os.path.join(out, "model.safetensors"))
    print(f"exported step {state['step']} to {out}: model.safetensors {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
