#!/usr/bin/env python3
"""Writes (or checks) a random-weight Q8_0 GGUF of ik_llama.cpp's `bailingmoe3` architecture at glint's bench widths.

The ik_llama.cpp peer comparison (bench/peer/ik_llama.sh, docs/performance.md "Peer comparison: ik_llama.cpp")
needs a model ik_llama.cpp runs whose per-token work is near `glint make-tiny --preset bench`. `bailingmoe3`
(Ling-3.0) is ik's nearest architecture to GLM-5.3-Flash: KDA linear-attention layers, MLA layers over a latent,
a sigmoid-routed MoE with one shared expert and a dense first layer. ik's gguf-py has no `bailingmoe3` constants,
so the tensor names, shapes (ggml ne = [ne0, ne1, ...]; numpy shapes are the reverse) and metadata keys below are
those ik's loader asks for (src/llama-load-tensors.cpp create_bailingmoe3_tensors, src/llama-hparams.cpp, the
LLM_TENSOR_NAMES and LLM_KV_NAMES tables, at 8337e4cd); the tree's gguf-py (PYTHONPATH=TREE/gguf-py) supplies
the file format and the Q8_0 quantizer.

The weights are written as Q8_0 directly: ik's llama-quantize aborts on this architecture (its attention-value
count check expects every layer to have attn_v, and MLA layers have none). Values are random: a pool of
N(0, 0.02^2) values is quantized once and its blocks are cycled from a random offset per tensor (quantizing 7 G
independent values in numpy would take many minutes and change nothing a benchmark measures); norms are 1, biases
0, and the router is F32 and fully random so that expert choice is uniform, like glint's random bench model.

Usage:
  bailingmoe3_gguf.py write --out model-Q8_0.gguf [--preset bench|tiny]
  bailingmoe3_gguf.py check model.gguf [--preset bench|tiny]   # keys and tensors as the loader expects; exit 1 if not
"""

import dataclasses
import sys

try:
    import numpy as np
except ImportError:  # the shell script checks this first; a direct caller gets the same advice
    sys.exit("bailingmoe3_gguf.py: numpy is missing: install python3-numpy (scripts/setup.sh)")
try:
    import gguf
    import gguf.quants
except ImportError:
    sys.exit("bailingmoe3_gguf.py: gguf-py is not importable: set PYTHONPATH=IK_SOURCE_DIR/gguf-py")

# the same vocabulary, pool reading, command line and checks as the llama.cpp GGUF
from kimi_linear_gguf import command_line, key_problems, random_values, take_cyclic, write_file

ARCH = "bailingmoe3"
Q8_0 = gguf.GGMLQuantizationType.Q8_0
F32 = gguf.GGMLQuantizationType.F32


@dataclasses.dataclass(frozen=True)
class Widths:
    """The model's sizes. `bench` mirrors src/modelgen/presets.cc BenchPreset(); `tiny` is for tests. Every width a
    Q8_0 row runs along is a multiple of its 32-value block."""

    vocab: int = 154880
    hidden: int = 4096
    layers: int = 4  # layer l is MLA when (l % 4 == 3), KDA otherwise (glint's IsDsaLayer)
    dense_layers: int = 1  # first_k_dense_replace
    dense_ff: int = 12288
    experts: int = 64
    experts_used: int = 8
    expert_ff: int = 2048
    shared_experts: int = 1
    heads: int = 64  # KDA heads and MLA heads: ik's loader uses one count for both
    kda_head_dim: int = 128  # also MLA's value head: ik's MLA output projection takes heads x kda_head_dim
    kda_conv: int = 4
    kda_gate_lower_bound: float = -5.0
    q_lora: int = 1536
    kv_lora: int = 512
    mla_qk_nope: int = 256  # query dims absorbed into the latent, as glint's qk_head_dim (NoPE)
    rope_dims: int = 0  # NoPE like glint: the key is the latent alone (ik's MLA graph runs with no rotated part)
    swiglu_limit: float = 10.0  # glint's swiglu_limit, as ik's swiglu_clamp_exp / _shexp
    rms_eps: float = 1e-5
    routed_scale: float = 2.5
    context: int = 131072


PRESETS = {
    "bench": Widths(),
    "tiny": Widths(vocab=512, hidden=64, dense_ff=96, experts=8, experts_used=2, expert_ff=32, heads=2,
                   kda_head_dim=32, q_lora=32, kv_lora=32, mla_qk_nope=32, context=4096),
}


def is_mla_layer(layer):
    return layer % 4 == 3


def kda_tensors(w, layer):
    """(name, ne, type, fill) of one KDA layer; fill is 'weight', 'one', 'zero', 'decay' or 'router'."""
    width = w.heads * w.kda_head_dim
    b = f"blk.{layer}"
    return [
        (f"{b}.attn_q.weight", [w.hidden, width], Q8_0, "weight"),
        (f"{b}.attn_k.weight", [w.hidden, width], Q8_0, "weight"),
        (f"{b}.attn_v.weight", [w.hidden, width], Q8_0, "weight"),
        (f"{b}.ssm_conv1d_q.weight", [w.kda_conv, 1, width], F32, "weight"),
        (f"{b}.ssm_conv1d_k.weight", [w.kda_conv, 1, width], F32, "weight"),
        (f"{b}.ssm_conv1d_v.weight", [w.kda_conv, 1, width], F32, "weight"),
        (f"{b}.ssm_f_a.weight", [w.hidden, width], Q8_0, "weight"),  # forget gate: full rank in Ling-3.0
        (f"{b}.ssm_g_a.weight", [w.hidden, width], Q8_0, "weight"),  # output gate: full rank too
        (f"{b}.ssm_beta.weight", [w.hidden, w.heads], Q8_0, "weight"),
        (f"{b}.ssm_a", [1, w.heads], F32, "decay"),
        (f"{b}.ssm_dt.bias", [width], F32, "zero"),
        (f"{b}.ssm_norm.weight", [w.kda_head_dim], F32, "one"),
        (f"{b}.attn_output.weight", [width, w.hidden], Q8_0, "weight"),
    ]


def mla_tensors(w, layer):
    """One MLA layer in the split form ik's loader asks for (q low rank; k_b, v_b per head; a per-head gate)."""
    b = f"blk.{layer}"
    qk_head = w.mla_qk_nope + w.rope_dims
    return [
        (f"{b}.attn_q_a.weight", [w.hidden, w.q_lora], Q8_0, "weight"),
        (f"{b}.attn_q_a_norm.weight", [w.q_lora], F32, "one"),
        (f"{b}.attn_q_b.weight", [w.q_lora, w.heads * qk_head], Q8_0, "weight"),
        (f"{b}.attn_kv_a_mqa.weight", [w.hidden, w.kv_lora + w.rope_dims], Q8_0, "weight"),
        (f"{b}.attn_kv_a_norm.weight", [w.kv_lora], F32, "one"),
        (f"{b}.attn_k_b.weight", [w.mla_qk_nope, w.kv_lora, w.heads], Q8_0, "weight"),
        (f"{b}.attn_v_b.weight", [w.kv_lora, w.kda_head_dim, w.heads], Q8_0, "weight"),
        (f"{b}.attn_gate.weight", [w.hidden, w.heads], Q8_0, "weight"),
        (f"{b}.attn_output.weight", [w.heads * w.kda_head_dim, w.hidden], Q8_0, "weight"),
    ]


def ffn_tensors(w, layer):
    b = f"blk.{layer}"
    out = [(f"{b}.ffn_norm.weight", [w.hidden], F32, "one")]
    if layer < w.dense_layers:
        return out + [
            (f"{b}.ffn_gate.weight", [w.hidden, w.dense_ff], Q8_0, "weight"),
            (f"{b}.ffn_up.weight", [w.hidden, w.dense_ff], Q8_0, "weight"),
            (f"{b}.ffn_down.weight", [w.dense_ff, w.hidden], Q8_0, "weight"),
        ]
    shared_ff = w.expert_ff * w.shared_experts
    return out + [
        (f"{b}.ffn_gate_inp.weight", [w.hidden, w.experts], F32, "router"),
        (f"{b}.exp_probs_b.bias", [w.experts], F32, "zero"),
        (f"{b}.ffn_gate_exps.weight", [w.hidden, w.expert_ff, w.experts], Q8_0, "weight"),
        (f"{b}.ffn_up_exps.weight", [w.hidden, w.expert_ff, w.experts], Q8_0, "weight"),
        (f"{b}.ffn_down_exps.weight", [w.expert_ff, w.hidden, w.experts], Q8_0, "weight"),
        (f"{b}.ffn_gate_shexp.weight", [w.hidden, shared_ff], Q8_0, "weight"),
        (f"{b}.ffn_up_shexp.weight", [w.hidden, shared_ff], Q8_0, "weight"),
        (f"{b}.ffn_down_shexp.weight", [shared_ff, w.hidden], Q8_0, "weight"),
    ]


def model_tensors(w):
    """Every tensor of the model, in file order."""
    out = [
        ("token_embd.weight", [w.hidden, w.vocab], Q8_0, "weight"),
        ("output_norm.weight", [w.hidden], F32, "one"),
        ("output.weight", [w.hidden, w.vocab], Q8_0, "weight"),
    ]
    for layer in range(w.layers):
        out.append((f"blk.{layer}.attn_norm.weight", [w.hidden], F32, "one"))
        out += mla_tensors(w, layer) if is_mla_layer(layer) else kda_tensors(w, layer)
        out += ffn_tensors(w, layer)
    return out


def hparams(w):
    """{key: value} of every key the loader reads for bailingmoe3 (general ones, then its own case)."""
    a = ARCH
    return {
        f"{a}.context_length": w.context,
        f"{a}.embedding_length": w.hidden,
        f"{a}.block_count": w.layers,
        f"{a}.feed_forward_length": w.dense_ff,
        f"{a}.attention.head_count": w.heads,
        # n_head_kv == 0 marks a KDA (recurrent) layer; the MLA cache is the latent whatever this count is
        f"{a}.attention.head_count_kv": [w.heads if is_mla_layer(layer) else 0 for layer in range(w.layers)],
        f"{a}.attention.layer_norm_rms_epsilon": w.rms_eps,
        f"{a}.attention.q_lora_rank": w.q_lora,
        f"{a}.attention.kv_lora_rank": w.kv_lora,
        f"{a}.attention.key_length_mla": w.mla_qk_nope + w.rope_dims,
        f"{a}.attention.value_length_mla": w.kda_head_dim,
        f"{a}.rope.dimension_count": w.rope_dims,
        f"{a}.leading_dense_block_count": w.dense_layers,
        f"{a}.expert_count": w.experts,
        f"{a}.expert_used_count": w.experts_used,
        f"{a}.expert_feed_forward_length": w.expert_ff,
        f"{a}.expert_shared_feed_forward_length": w.expert_ff,
        f"{a}.expert_shared_count": w.shared_experts,
        f"{a}.expert_group_count": 1,
        f"{a}.expert_group_used_count": 1,
        f"{a}.expert_weights_scale": w.routed_scale,
        f"{a}.expert_weights_norm": True,
        f"{a}.expert_gating_func": int(gguf.ExpertGatingFuncType.SIGMOID),
        f"{a}.ssm.conv_kernel": w.kda_conv,
        f"{a}.kda.head_dim": w.kda_head_dim,
        f"{a}.kda.safe_gate": True,  # the only gate formula ik implements
        f"{a}.kda.gate_lower_bound": w.kda_gate_lower_bound,
        f"{a}.swiglu_clamp_exp": w.swiglu_limit,
        f"{a}.swiglu_clamp_shexp": w.swiglu_limit,
    }


def add_hparams(writer, w):
    writer.add_name("bailingmoe3 at glint bench widths (random weights)")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    for key, value in hparams(w).items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, list):
            writer.add_array(key, value)
        else:
            writer.add_uint32(key, value)


class BlockPool:
    """Random Q8_0 blocks for the weight matrices (and float values for the few F32 ones): one pool, quantized once
    with gguf-py's reference Q8_0, read cyclically from a random offset per tensor."""

    BLOCK_VALUES, BLOCK_BYTES = gguf.GGML_QUANT_SIZES[Q8_0]

    def __init__(self, rng, blocks=(1 << 19) + 7):  # an odd count, so that rows of a tensor do not repeat in step
        self.rng = rng
        self.values = rng.standard_normal(blocks * self.BLOCK_VALUES, dtype=np.float32) * 0.02
        self.blocks = gguf.quants.quantize(self.values.reshape(blocks, self.BLOCK_VALUES), Q8_0)

    def take_blocks(self, count):
        return take_cyclic(self.blocks, count, self.rng)

    def take_values(self, count):
        return take_cyclic(self.values, count, self.rng)


def byte_shape(ne, ggml_type):
    """The numpy shape of a tensor's stored data: reversed ne, the innermost dimension in bytes for Q8_0."""
    shape = list(reversed(ne))
    if ggml_type == Q8_0:
        values, size = gguf.GGML_QUANT_SIZES[Q8_0]
        if shape[-1] % values:
            raise ValueError(f"ne0 {ne[0]} is not a multiple of the Q8_0 block ({values})")
        shape[-1] = shape[-1] // values * size
    return tuple(shape)


def tensor_data(fill, ne, ggml_type, pool, rng):
    shape = byte_shape(ne, ggml_type)
    count = int(np.prod(ne))
    if ggml_type == Q8_0:
        assert fill == "weight", fill
        return pool.take_blocks(count // BlockPool.BLOCK_VALUES).reshape(shape)
    if fill == "one":
        return np.ones(shape, np.float32)
    if fill == "zero":
        return np.zeros(shape, np.float32)
    if fill in ("decay", "router"):
        return random_values(fill, count, rng).reshape(shape)
    return pool.take_values(count).reshape(shape)


def write(path, w, seed):
    rng = np.random.default_rng(seed)
    tensors = model_tensors(w)
    pool = BlockPool(rng)

    def info(ne, ggml_type):
        shape = byte_shape(ne, ggml_type)
        dtype = np.dtype(np.uint8 if ggml_type == Q8_0 else np.float32)
        return shape, dtype, int(np.prod(shape)) * dtype.itemsize, ggml_type

    # one tensor in memory at a time (the largest: 0.57 GB of experts)
    write_file(path, ARCH, w, tensors, add_hparams, info,
               lambda fill, ne, ggml_type: tensor_data(fill, ne, ggml_type, pool, rng))


def check(path, w):
    """Every problem found, as text: keys, the vocabulary's length, the tensor set, each tensor's ne and type."""
    reader = gguf.GGUFReader(path)
    problems = key_problems(reader, {gguf.Keys.General.ARCHITECTURE: ARCH, **hparams(w)}, w.vocab)
    found = {t.name: ([int(n) for n in t.shape], t.tensor_type) for t in reader.tensors}
    for name, ne, ggml_type, _ in model_tensors(w):
        got = found.pop(name, None)
        if got is None:
            problems.append(f"tensor {name}: missing")
            continue
        if got[0] != ne:
            problems.append(f"tensor {name}: ne {got[0]}, expected {ne}")
        if got[1] != ggml_type:
            problems.append(f"tensor {name}: type {got[1].name}, expected {ggml_type.name}")
    problems += [f"tensor {name}: not expected" for name in sorted(found)]
    return problems


def main(argv):
    return command_line(argv, __doc__, PRESETS, write, check, ARCH)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
