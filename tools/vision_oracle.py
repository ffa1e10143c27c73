#!/usr/bin/python3
"""Float64 oracle of the GLM-5.3-Flash vision tower, written from the equations of HF transformers'
Glm5NextVisionModel (GLM-OCR ViT; docs/vision.md lists each fact and its source). Independent of glint's C++.

  vision_oracle.py write DIR   generate the tiny tower fixture (tests/data/golden/tiny-vision): deterministic
                               BF16 weights (model.safetensors), its vision_config.json, and expected.safetensors
                               with the input patches and every intermediate (patch embed, after each block,
                               post_layernorm, downsample, merger = the output), computed in float64.
  vision_oracle.py check DIR   recompute the expected tensors from DIR's weights and input and compare them
                               with DIR/expected.safetensors (exit 1 on a difference beyond float32 rounding).

Needs numpy only (Debian python3-numpy). The committed fixture lets the C++ tests run without it.
"""
import json
import struct
import sys

import numpy as np

CONFIG = {
    "model_type": "glm5_next_vision", "depth": 2, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64,
    "patch_size": 14, "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 64,
    "projection_intermediate_size": 96, "image_size": 448, "rms_norm_eps": 1e-05, "swiglu_limit": 10.0,
    "attention_bias": True, "hidden_act": "silu", "in_channels": 3,
}
GRID = (1, 4, 6)  # t, h, w in patches: non-square, so a swapped h/w shows
SEED = 20261201
LAYERNORM_EPS = 1e-5   # nn.LayerNorm default in the merger
ROPE_THETA = 10000.0   # VisionRotaryEmbedding default


# ---------------------------------------------------------------- safetensors (the format, read and written here)
def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[base + begin:base + end]
        shape = info["shape"]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            values = bits.view(np.float32).astype(np.float64)
        elif info["dtype"] == "F32":
            values = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif info["dtype"] == "I32":
            values = np.frombuffer(raw, dtype="<i4").astype(np.int64)
        else:
            raise ValueError(f"{path}: tensor {name} has dtype {info['dtype']}; expected BF16, F32 or I32")
        out[name] = values.reshape(shape)
    return out


def write_safetensors(path, tensors):
    """tensors: name -> (dtype, ndarray); bf16 arrays are uint16 bit patterns."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, array) in tensors.items():
        raw = array.astype({"BF16": "<u2", "F32": "<f4", "I32": "<i4"}[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt", "generator": "tools/vision_oracle.py"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def to_bf16_bits(x):
    """Round float64 -> float32 -> bf16 (round to nearest, ties to even), as bit patterns."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_bits_to_float(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


# ---------------------------------------------------------------- weights of the tiny tower
def tensor_shapes(c):
    h, hd, i = c["hidden_size"], c["hidden_size"] // c["num_heads"], c["intermediate_size"]
    o, pi, m = c["out_hidden_size"], c["projection_intermediate_size"], c["spatial_merge_size"]
    shapes = {
        "patch_embed.proj.weight": [h, c["in_channels"], c["temporal_patch_size"], c["patch_size"], c["patch_size"]],
        "patch_embed.proj.bias": [h],
    }
    for b in range(c["depth"]):
        p = f"blocks.{b}."
        shapes.update({
            p + "norm1.weight": [h], p + "norm2.weight": [h],
            p + "attn.qkv.weight": [3 * h, h], p + "attn.qkv.bias": [3 * h],
            p + "attn.proj.weight": [h, h], p + "attn.proj.bias": [h],
            p + "attn.q_norm.weight": [hd], p + "attn.k_norm.weight": [hd],
            p + "mlp.gate_proj.weight": [i, h], p + "mlp.gate_proj.bias": [i],
            p + "mlp.up_proj.weight": [i, h], p + "mlp.up_proj.bias": [i],
            p + "mlp.down_proj.weight": [h, i], p + "mlp.down_proj.bias": [h],
        })
    shapes.update({
        "post_layernorm.weight": [h],
        "downsample.weight": [o, h, m, m], "downsample.bias": [o],
        "merger.proj.weight": [o, o],
        "merger.post_projection_norm.weight": [o], "merger.post_projection_norm.bias": [o],
        "merger.gate_proj.weight": [pi, o], "merger.up_proj.weight": [pi, o], "merger.down_proj.weight": [o, pi],
    })
    return shapes


def make_weights(c, rng):
    weights = {}
    for name, shape in tensor_shapes(c).items():
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        if name.endswith("norm.weight") or name.endswith("norm1.weight") or name.endswith("norm2.weight"):
            values = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            values = 0.1 * rng.standard_normal(shape)
        elif name.endswith("gate_proj.weight") or name.endswith("up_proj.weight"):
            values = 3.5 / np.sqrt(fan_in) * rng.standard_normal(shape)  # the clamp at 10 is active now and then
        elif name.endswith("down_proj.weight"):
            values = 0.25 / np.sqrt(fan_in) * rng.standard_normal(shape)
        else:
            values = rng.standard_normal(shape) / np.sqrt(fan_in)
        weights["model.visual." + name] = to_bf16_bits(values)
    return weights


# ---------------------------------------------------------------- the tower in float64
def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def clamped_swiglu(gate, up, limit):
    gate = np.minimum(gate, limit)          # the gate is clamped above only
    up = np.clip(up, -limit, limit)         # the up projection on both sides
    return gate / (1.0 + np.exp(-gate)) * up


def positions(c, t, h, w):
    """(row, col) of each patch in merge-block order (HF get_vision_position_ids)."""
    m = c["spatial_merge_size"]
    rows = np.arange(h)[:, None].repeat(w, axis=1)
    cols = np.arange(w)[None, :].repeat(h, axis=0)
    rows = rows.reshape(h // m, m, w // m, m).transpose(0, 2, 1, 3).reshape(-1)
    cols = cols.reshape(h // m, m, w // m, m).transpose(0, 2, 1, 3).reshape(-1)
    return np.tile(rows, t), np.tile(cols, t)


def rotary(c, t, h, w):
    head_dim = c["hidden_size"] // c["num_heads"]
    dim = head_dim // 2                                          # VisionRotaryEmbedding(head_dim // 2)
    inv_freq = 1.0 / ROPE_THETA ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    rows, cols = positions(c, t, h, w)
    freqs = np.concatenate([rows[:, None] * inv_freq, cols[:, None] * inv_freq], axis=1)  # [N, head_dim/2]
    emb = np.concatenate([freqs, freqs], axis=1)                                          # [N, head_dim]
    return np.cos(emb), np.sin(emb)


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def attention(c, wt, p, x, cos, sin, t, h, w):
    n, hidden = x.shape
    heads = c["num_heads"]
    head_dim = hidden // heads
    qkv = x @ wt[p + "attn.qkv.weight"].T + wt[p + "attn.qkv.bias"]
    q, k, v = qkv.reshape(n, 3, heads, head_dim).transpose(1, 0, 2, 3)  # each [N, heads, head_dim]
    q = rms_norm(q, wt[p + "attn.q_norm.weight"], c["rms_norm_eps"])
    k = rms_norm(k, wt[p + "attn.k_norm.weight"], c["rms_norm_eps"])
    q = rotate(q, cos[:, None, :], sin[:, None, :])
    k = rotate(k, cos[:, None, :], sin[:, None, :])
    out = np.zeros_like(q)
    frame = h * w
    for f in range(t):  # attention within each frame only (cu_seqlens: one segment per frame)
        s = slice(f * frame, (f + 1) * frame)
        scores = np.einsum("qhd,khd->hqk", q[s], k[s]) / np.sqrt(head_dim)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        out[s] = np.einsum("hqk,khd->qhd", scores, v[s])
    return out.reshape(n, hidden) @ wt[p + "attn.proj.weight"].T + wt[p + "attn.proj.bias"]


def tower(c, wt, patches, grid):
    t, h, w = grid
    eps, limit, m = c["rms_norm_eps"], c["swiglu_limit"], c["spatial_merge_size"]
    trace = {}
    x = patches @ wt["patch_embed.proj.weight"].reshape(c["hidden_size"], -1).T + wt["patch_embed.proj.bias"]
    trace["patch_embed"] = x
    cos, sin = rotary(c, t, h, w)
    clamped = 0
    for b in range(c["depth"]):
        p = f"blocks.{b}."
        x = x + attention(c, wt, p, rms_norm(x, wt[p + "norm1.weight"], eps), cos, sin, t, h, w)
        y = rms_norm(x, wt[p + "norm2.weight"], eps)
        gate = y @ wt[p + "mlp.gate_proj.weight"].T + wt[p + "mlp.gate_proj.bias"]
        up = y @ wt[p + "mlp.up_proj.weight"].T + wt[p + "mlp.up_proj.bias"]
        clamped += int(np.sum(gate > limit) + np.sum(np.abs(up) > limit))
        x = x + clamped_swiglu(gate, up, limit) @ wt[p + "mlp.down_proj.weight"].T + wt[p + "mlp.down_proj.bias"]
        trace[f"blocks.{b}"] = x
    x = rms_norm(x, wt["post_layernorm.weight"], eps)
    trace["post_layernorm"] = x
    # Conv2d(kernel m, stride m) over each merge block of m*m consecutive rows viewed as [hidden, m, m].
    blocks = x.reshape(-1, m, m, c["hidden_size"]).transpose(0, 3, 1, 2).reshape(x.shape[0] // (m * m), -1)
    d = blocks @ wt["downsample.weight"].reshape(c["out_hidden_size"], -1).T + wt["downsample.bias"]
    trace["downsample"] = d
    y = d @ wt["merger.proj.weight"].T
    mean = y.mean(axis=-1, keepdims=True)
    var = ((y - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (y - mean) / np.sqrt(var + LAYERNORM_EPS) * wt["merger.post_projection_norm.weight"] \
        + wt["merger.post_projection_norm.bias"]
    from math import erf
    y = 0.5 * y * (1.0 + np.vectorize(erf)(y / np.sqrt(2.0)))  # exact GELU (nn.GELU default)
    gate, up = y @ wt["merger.gate_proj.weight"].T, y @ wt["merger.up_proj.weight"].T
    clamped += int(np.sum(gate > limit) + np.sum(np.abs(up) > limit))
    trace["merger"] = clamped_swiglu(gate, up, limit) @ wt["merger.down_proj.weight"].T
    return trace, clamped


def strip(weights):
    return {k[len("model.visual."):]: v for k, v in weights.items()}


def write(directory):
    rng = np.random.default_rng(SEED)
    bits = make_weights(CONFIG, rng)
    t, h, w = GRID
    n = t * h * w
    values = CONFIG["in_channels"] * CONFIG["temporal_patch_size"] * CONFIG["patch_size"] ** 2
    patches = np.clip(rng.standard_normal((n, values)), -1.8, 2.1).astype(np.float32)  # CLIP-normalised range
    weights = strip({k: bf16_bits_to_float(v) for k, v in bits.items()})
    trace, clamped = tower(CONFIG, weights, patches.astype(np.float64), GRID)
    write_safetensors(f"{directory}/model.safetensors", {k: ("BF16", v) for k, v in bits.items()})
    expected = {"input.patches": ("F32", patches), "input.grid_thw": ("I32", np.array(GRID))}
    expected.update({k: ("F32", v) for k, v in trace.items()})
    write_safetensors(f"{directory}/expected.safetensors", expected)
    with open(f"{directory}/vision_config.json", "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    print(f"wrote {directory}: {n} patches -> {trace['merger'].shape[0]} tokens, {clamped} clamped SwiGLU inputs")


def check(directory):
    with open(f"{directory}/vision_config.json") as f:
        config = json.load(f)
    weights = strip(read_safetensors(f"{directory}/model.safetensors"))
    expected = read_safetensors(f"{directory}/expected.safetensors")
    grid = tuple(int(g) for g in expected["input.grid_thw"])
    trace, _ = tower(config, weights, expected["input.patches"], grid)
    worst = 0.0
    for name, value in trace.items():
        ref = expected[name]
        error = np.sqrt(np.sum((value - ref) ** 2) / np.sum(ref ** 2))
        worst = max(worst, error)
        print(f"{name:16s} relative RMS difference {error:.2e}")
    # The fixture stores float32: its own rounding is 2^-24 relative per value.
    if worst > 1e-7:
        print(f"FAIL: {worst:.2e} > 1e-7")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        print(__doc__)
        sys.exit(2)
    sys.exit(write(sys.argv[2]) or 0 if sys.argv[1] == "write" else check(sys.argv[2]))
