"""Trains a small GLM-5.3 model of the real architecture on the fortunes corpus (see docs/training.md).

Objective: next-token cross-entropy of the trunk + MTP_WEIGHT × cross-entropy of the MTP layer on the
next-next token + the DSA indexers' distillation loss (KL to the dense attention's pool distribution; the
indexer sees detached inputs, so this loss trains only the indexers). The MoE router has no auxiliary loss:
noaux_tc balancing nudges each layer's e_score_correction_bias by BALANCE_RATE × sign(mean load − load)
after every step (DeepSeek-V3's auxiliary-loss-free balancing).

Stages (DeepSeek-V3.2's recipe at toy scale): for the first SPARSE_AFTER fraction of the time budget the DSA
layers attend densely while their indexers learn; afterwards attention uses the indexer's key set (top
index_topk/index_kpool pools + the tail), exactly what glint runs, and the indexers keep learning.

The learning-rate schedule is a function of elapsed wall time (warm-up, then cosine to 10 %), so the run ends
annealed at --minutes whatever share of the shared 2-core machine it got. Progress, held-out evaluations and
checkpoints go to WORKDIR; --resume continues from WORKDIR/checkpoint.pt.

Usage: nice -n 19 /usr/bin/python3 tools/train/train.py WORKDIR --minutes 45
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import glm  # noqa: E402

MTP_WEIGHT = 0.3
BALANCE_RATE = 1e-2  # per step; DeepSeek-V3 uses 1e-3 over ~10⁵ steps, a run here has a few hundred
SPARSE_AFTER = 0.3
WARMUP_STEPS = 30


def model_config(vocab, hidden=256, layers=5, moe_intermediate=128, experts=16, top_k=4, index_topk=64):
    """The release's config.json layout (model doc §1.2) for a small model: layer i is DSA when i % 4 == 3."""
    layer_types = ["deepseek_sparse_attention" if i % 4 == 3 else "linear_attention" for i in range(layers)]
    specials = bpe.special_ids(vocab)
    eos = [specials["<|endoftext|>"], specials["<|user|>"], specials["<|observation|>"]]
    text = {
        "model_type": "glm5_next_text", "dtype": "bfloat16", "vocab_size": vocab, "hidden_size": hidden,
        "num_hidden_layers": layers, "intermediate_size": 3 * hidden, "moe_intermediate_size": moe_intermediate,
        "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": hidden // 2, "kv_lora_rank": hidden // 4,
        "qk_nope_head_dim": 64, "qk_rope_head_dim": 0, "qk_head_dim": 64, "v_head_dim": 64, "head_dim": 0,
        "mla_use_nope": True, "attention_bias": False,
        "index_n_heads": 4, "index_head_dim": 64, "index_topk": index_topk, "index_kpool": 4,
        "index_kpool_compress": True, "index_kpool_always_select_tail": True,
        "indexer_types": ["full"] * layers, "indexer_rope_interleave": True, "index_share_for_mtp_iteration": True,
        "layer_types": layer_types, "mlp_layer_types": ["dense"] + ["sparse"] * (layers - 1),
        "first_k_dense_replace": 1,
        "linear_attn_config": {"num_heads": 4, "head_dim": 64, "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
                               "kda_layers": [i for i, t in enumerate(layer_types) if t == "linear_attention"],
                               "full_attn_layers": [i for i, t in enumerate(layer_types) if t != "linear_attention"]},
        "n_routed_experts": experts, "num_experts_per_tok": top_k, "n_shared_experts": 1,
        "scoring_func": "sigmoid", "topk_method": "noaux_tc", "moe_router_dtype": "float32",
        "n_group": 1, "topk_group": 1, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
        "hidden_act": "silu", "swiglu_limit": 10.0,
        "mhc": True, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-06, "rms_norm_eps": 1e-05,
        "max_position_embeddings": 1048576, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
        "pad_token_id": eos[0], "eos_token_id": eos,
    }
    vision = {"model_type": "glm5_next_vision", "depth": 1, "hidden_size": 32, "num_heads": 2,
              "intermediate_size": 64, "patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2,
              "out_hidden_size": hidden, "projection_intermediate_size": 128, "image_size": 28, "rms_norm_eps": 1e-05,
              "swiglu_limit": 10.0, "attention_bias": True, "hidden_act": "silu", "in_channels": 3}
    return {"architectures": ["Glm5NextForConditionalGeneration"], "model_type": "glm5_next",
            "tie_word_embeddings": False,
            "image_token_id": specials["<|image|>"], "video_token_id": specials["<|video|>"],
            "image_start_token_id": specials["<|begin_of_image|>"], "image_end_token_id": specials["<|end_of_image|>"],
            "video_start_token_id": specials["<|begin_of_video|>"], "video_end_token_id": specials["<|end_of_video|>"],
            "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
                                    "weight_block_size": [128, 128]},
            "text_config": text, "vision_config": vision}


def initialise(model, seed):
    """Small-normal matrices (std 0.02; output projections / √(2·layers)), unit norms, mHC close to plain
    residual streams, KDA decays spread over α = exp(g) ∈ [0.5, 0.999]."""
    c = model.c
    g = torch.Generator().manual_seed(seed)
    out_scale = 1.0 / math.sqrt(2 * (c.num_hidden_layers + 1))
    mix = (2 + c.hc) * c.hc
    with torch.no_grad():
        for name, t in model.named_tensors():
            if name.endswith("e_score_correction_bias"):
                t.zero_()
            elif "norm" in name and name.endswith(".weight"):
                t.fill_(1.0)
            elif name.endswith("k_norm.bias") or name.endswith("compress_ape"):
                t.zero_()
            elif name.endswith("_fn"):
                t.normal_(0.0, 0.02, generator=g)
            elif name.endswith("_scale"):
                t.fill_(0.1)
            elif name.endswith("_base"):
                t.zero_()
                t[:c.hc] = math.log(0.25 / 0.75)                     # pre = sigmoid(·) ≈ 1/4: h ≈ mean of streams
                comb = torch.zeros(c.hc, c.hc)
                comb.fill_diagonal_(3.0)                              # comb ≈ identity-heavy doubly stochastic
                t[2 * c.hc:mix] = comb.flatten()
            elif "conv1d" in name:
                t.uniform_(-0.5, 0.5, generator=g)                    # nn.Conv1d's default for 4 taps
            elif name.endswith("A_log"):
                t.zero_()
            elif name.endswith("dt_bias"):
                t.uniform_(-8.5, -1.8, generator=g)                   # sigmoid⁻¹ of −g/5 for α ∈ [0.5, 0.999]
            else:
                std = 0.02 * (out_scale if name.endswith("o_proj.weight") or name.endswith("down_proj.weight")
                              else 1.0)
                t.normal_(0.0, std, generator=g)


class Batches:
    def __init__(self, tokens, starts, length, batch, seed):
        self.tokens, self.length, self.batch = tokens, length, batch
        self.starts = starts[starts + length + 2 <= len(tokens)]
        self.rng = np.random.default_rng(seed)

    def next(self):
        picks = self.rng.choice(self.starts, size=self.batch, replace=False)
        return torch.from_numpy(np.stack([self.tokens[s:s + self.length + 2] for s in picks]).astype(np.int64))


def heldout_windows(workdir, length):
    tokens = np.load(os.path.join(workdir, "heldout_tokens.npy"))
    starts = np.load(os.path.join(workdir, "heldout_starts.npy"))
    windows, next_free = [], 0
    for s in starts:  # non-overlapping windows that start at a document
        if s >= next_free and s + length + 2 <= len(tokens):
            windows.append(tokens[s:s + length + 2])
            next_free = s + length + 2
    return torch.from_numpy(np.stack(windows).astype(np.int64))


def losses(model, x, sparse, indexer_loss, loads=None):
    T = x.shape[1] - 2
    normed, aux = model.trunk(x[:, :T], sparse=sparse, indexer_loss=indexer_loss, loads=loads)
    ce = F.cross_entropy(model.logits(normed).flatten(0, 1), x[:, 1:T + 1].flatten())
    mtp_logits, aux_mtp = model.mtp(normed[:, :T - 1], x[:, 1:T], sparse=sparse, indexer_loss=indexer_loss,
                                    loads=loads)
    mtp_ce = F.cross_entropy(mtp_logits.flatten(0, 1), x[:, 2:T + 1].flatten())
    return ce, mtp_ce, aux + aux_mtp


def evaluate(model, windows, batch=8):
    model.eval()
    total = [0.0, 0.0]
    with torch.no_grad():
        for i in range(0, len(windows), batch):
            x = windows[i:i + batch]
            ce, mtp_ce, _ = losses(model, x, sparse=True, indexer_loss=False)
            total[0] += float(ce) * len(x)
            total[1] += float(mtp_ce) * len(x)
    model.train()
    return total[0] / len(windows), total[1] / len(windows)


def lr_at(step, fraction, peak):
    warm = min(1.0, (step + 1) / WARMUP_STEPS)
    return peak * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(fraction, 1.0))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("workdir")
    parser.add_argument("--minutes", type=float, default=45.0, help="wall-time budget of the run")
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--moe-intermediate", type=int, default=128)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=float, default=5.0, help="minutes between held-out evaluations")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)

    config_path = os.path.join(args.workdir, "config.json")
    ckpt_path = os.path.join(args.workdir, "checkpoint.pt")
    if not args.resume:
        with open(config_path, "w") as f:
            json.dump(model_config(args.vocab, args.hidden, args.layers, args.moe_intermediate), f, indent=2)
    config = glm.GlmConfig.load(config_path)
    model = glm.GlmModel(config)
    initialise(model, args.seed)
    decay, no_decay = [], []
    for name, t in model.named_tensors():
        if isinstance(t, torch.nn.Parameter):
            (decay if t.dim() == 2 and "_fn" not in name else no_decay).append(t)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    step, elapsed_before, history = 0, 0.0, []
    if args.resume:
        state = torch.load(ckpt_path)
        model.load_state_dict(state["model"])
        model.buffers_.update(state["buffers"])
        optimizer.load_state_dict(state["optimizer"])
        step, elapsed_before, history = state["step"], state["elapsed"], state["history"]

    tokens = np.load(os.path.join(args.workdir, "train_tokens.npy"))
    starts = np.load(os.path.join(args.workdir, "train_starts.npy"))
    batches = Batches(tokens, starts, args.seq, args.batch, args.seed + step)
    windows = heldout_windows(args.workdir, args.seq)
    eval_subset = windows[:16]
    budget = args.minutes * 60.0
    start = time.time() - elapsed_before
    cpu_start = time.process_time()
    last_eval = time.time() if step else 0.0
    log = open(os.path.join(args.workdir, "train.log"), "a")

    def save():
        state = {"model": model.state_dict(), "buffers": model.buffers_, "optimizer": optimizer.state_dict(),
                 "step": step, "elapsed": time.time() - start, "history": history, "args": vars(args)}
        torch.save(state, ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)

    def record(entry):
        history.append(entry)
        print(json.dumps(entry), file=log, flush=True)
        print(json.dumps(entry), flush=True)

    print(f"params: {sum(t.numel() for _, t in model.named_tensors()) / 1e6:.2f}M; training tokens "
          f"{len(tokens)}; held-out windows {len(windows)}", flush=True)
    while True:
        elapsed = time.time() - start
        fraction = elapsed / budget
        if fraction >= 1.0:
            break
        sparse = fraction >= SPARSE_AFTER
        lr = lr_at(step, fraction, args.lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x = batches.next()
        loads = {}
        ce, mtp_ce, idx = losses(model, x, sparse=sparse, indexer_loss=True, loads=loads)
        loss = ce + MTP_WEIGHT * mtp_ce + idx
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        optimizer.step()
        imbalance = 0.0
        with torch.no_grad():  # noaux_tc: bias += rate · sign(mean load − load), per MoE layer
            for prefix, counts in loads.items():
                counts = counts.to(torch.float32)
                bias = model.buffers_[prefix + "mlp.gate.e_score_correction_bias"]
                bias += BALANCE_RATE * torch.sign(counts.mean() - counts)
                imbalance = max(imbalance, float(counts.max() / counts.mean()))
        step += 1
        if step % 10 == 0 or step == 1:
            record({"step": step, "minutes": round((time.time() - start) / 60, 2),
                    "cpu_minutes": round((time.process_time() - cpu_start) / 60, 2),
                    "tokens": step * args.batch * args.seq, "loss": round(float(ce), 4),
                    "mtp_loss": round(float(mtp_ce), 4), "indexer_kl": round(float(idx), 4), "lr": round(lr, 6),
                    "grad_norm": round(grad_norm, 3), "max_load_over_mean": round(imbalance, 2), "sparse": sparse})
        if time.time() - last_eval >= args.eval_every * 60:
            heldout, heldout_mtp = evaluate(model, eval_subset)
            record({"step": step, "minutes": round((time.time() - start) / 60, 2), "heldout_loss": round(heldout, 4),
                    "heldout_mtp_loss": round(heldout_mtp, 4), "subset": len(eval_subset)})
            save()
            last_eval = time.time()
    heldout, heldout_mtp = evaluate(model, windows)
    record({"step": step, "minutes": round((time.time() - start) / 60, 2), "final": True,
            "heldout_loss": round(heldout, 4), "heldout_mtp_loss": round(heldout_mtp, 4), "windows": len(windows)})
    save()


if __name__ == "__main__":
    main()
