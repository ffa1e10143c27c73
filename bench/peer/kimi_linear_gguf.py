#!/usr/bin/env python3
"""Writes (or checks) a random-weight GGUF of llama.cpp's Kimi-Linear architecture at glint's bench widths.

The peer comparison (bench/peer/llama_cpp.sh, docs/performance.md "Peer comparison") needs a model llama.cpp can
run whose per-token work matches `glint make-tiny --preset bench`. Kimi-Linear is the llama.cpp architecture
nearest to GLM-5.3-Flash: KDA linear-attention layers, NoPE MLA layers, a sigmoid-routed MoE with one shared
expert and a dense first layer. This script writes its tensors and hyperparameters with the gguf-py package of
the user's llama.cpp tree (PYTHONPATH=TREE/gguf-py), so the file follows that tree's own constants.

The tensor list and shapes are those llama.cpp's loader asks for (src/models/kimi-linear.cpp at d32676d), as
ggml dimensions ne = [ne0, ne1, ...]; numpy shapes are the reverse. Values are random: weight matrices are cycled
from a pool of N(0, 0.02^2) values at a random offset per tensor (generating 7.6 G independent values would take
minutes and changes nothing a benchmark measures), norms are 1, router biases 0, and the router itself is fully
random so that expert choice is uniform like glint's random bench model.

Usage:
  kimi_linear_gguf.py write --out model-f16.gguf [--preset bench|tiny]
  kimi_linear_gguf.py check model.gguf [--preset bench|tiny]   # structure as the loader expects; exit 1 if not
"""

import argparse
import dataclasses
import re
import sys

try:
    import numpy as np
except ImportError:  # the shell script checks this first; a direct caller gets the same advice
    sys.exit("kimi_linear_gguf.py: numpy is missing: install python3-numpy (scripts/setup.sh)")
try:
    import gguf
except ImportError:
    sys.exit("kimi_linear_gguf.py: gguf-py is not importable: set PYTHONPATH=LLAMA_CPP_SOURCE_DIR/gguf-py")


@dataclasses.dataclass(frozen=True)
class Widths:
    """The model's sizes. `bench` mirrors src/modelgen/presets.cc BenchPreset(); `tiny` is for tests."""

    vocab: int = 154880
    hidden: int = 4096
    layers: int = 4  # layer l is MLA when (l % 4 == 3), KDA otherwise (glint's IsDsaLayer)
    dense_layers: int = 1  # first_k_dense_replace
    dense_ff: int = 12288
    experts: int = 64
    experts_used: int = 8
    expert_ff: int = 2048
    shared_experts: int = 1
    kda_heads: int = 64
    kda_head_dim: int = 128
    kda_conv: int = 4
    mla_heads: int = 64
    mla_qk_head_dim: int = 256  # NoPE: every query/key dimension is absorbed into the latent
    mla_v_head_dim: int = 256
    kv_lora: int = 512
    # Kimi-Linear's MLA rotates nothing, but its key is the latent plus 64 shared dimensions (qk_rope_head_dim of
    # the released 48B model, the layout llama.cpp's Kimi-Linear graph runs); glint's key is the latent alone
    rope_dims: int = 64
    rms_eps: float = 1e-5
    routed_scale: float = 2.5
    context: int = 131072


PRESETS = {
    "bench": Widths(),
    "tiny": Widths(vocab=512, hidden=64, dense_ff=96, experts=8, experts_used=2, expert_ff=32, kda_heads=2,
                   kda_head_dim=32, mla_heads=2, mla_qk_head_dim=32, mla_v_head_dim=32, kv_lora=32, rope_dims=16,
                   context=4096),
}

T = gguf.MODEL_TENSOR
F16 = gguf.GGMLQuantizationType.F16
F32 = gguf.GGMLQuantizationType.F32


def is_mla_layer(layer):
    return layer % 4 == 3


def tensor_name(kind, layer=None, suffix="weight"):
    base = gguf.TENSOR_NAMES[kind] if layer is None else gguf.TENSOR_NAMES[kind].format(bid=layer)
    return base if suffix is None else f"{base}.{suffix}"


def kda_tensors(w, layer):
    """(name, ne, type, fill) of one KDA layer; fill is 'weight', 'one', 'zero' or 'decay'."""
    width = w.kda_heads * w.kda_head_dim
    d = w.kda_head_dim
    out = [(tensor_name(conv, layer), [w.kda_conv, 1, width], F32, "weight")
           for conv in (T.SSM_CONV1D_Q, T.SSM_CONV1D_K, T.SSM_CONV1D_V)]
    out += [(tensor_name(proj, layer), [w.hidden, width], F16, "weight") for proj in (T.ATTN_Q, T.ATTN_K, T.ATTN_V)]
    out += [
        (tensor_name(T.SSM_F_A, layer), [w.hidden, d], F16, "weight"),  # forget gate, low rank 4096 -> 128 -> 8192
        (tensor_name(T.SSM_F_B, layer), [d, width], F16, "weight"),
        (tensor_name(T.SSM_BETA, layer), [w.hidden, w.kda_heads], F16, "weight"),
        (tensor_name(T.SSM_A, layer, None), [1, w.kda_heads], F32, "decay"),  # -exp(A_log), stored negated
        (tensor_name(T.SSM_DT, layer, "bias"), [width], F32, "zero"),
        (tensor_name(T.SSM_G_A, layer), [w.hidden, d], F16, "weight"),  # output gate, same low rank
        (tensor_name(T.SSM_G_B, layer), [d, width], F16, "weight"),
        (tensor_name(T.SSM_NORM, layer), [d], F32, "one"),
        (tensor_name(T.ATTN_OUT, layer), [width, w.hidden], F16, "weight"),
    ]
    return out


def mla_tensors(w, layer):
    """One MLA layer in the absorbed form llama.cpp caches (k_b, v_b split; key = latent + rope part)."""
    nope = w.mla_qk_head_dim - w.rope_dims
    return [
        (tensor_name(T.ATTN_KV_A_NORM, layer), [w.kv_lora], F32, "one"),
        (tensor_name(T.ATTN_Q, layer), [w.hidden, w.mla_heads * w.mla_qk_head_dim], F16, "weight"),
        (tensor_name(T.ATTN_KV_A_MQA, layer), [w.hidden, w.kv_lora + w.rope_dims], F16, "weight"),
        (tensor_name(T.ATTN_K_B, layer), [nope, w.kv_lora, w.mla_heads], F16, "weight"),
        (tensor_name(T.ATTN_V_B, layer), [w.kv_lora, w.mla_v_head_dim, w.mla_heads], F16, "weight"),
        (tensor_name(T.ATTN_OUT, layer), [w.mla_heads * w.mla_v_head_dim, w.hidden], F16, "weight"),
    ]


def ffn_tensors(w, layer):
    out = [(tensor_name(T.FFN_NORM, layer), [w.hidden], F32, "one")]
    if layer < w.dense_layers:
        return out + [
            (tensor_name(T.FFN_GATE, layer), [w.hidden, w.dense_ff], F16, "weight"),
            (tensor_name(T.FFN_UP, layer), [w.hidden, w.dense_ff], F16, "weight"),
            (tensor_name(T.FFN_DOWN, layer), [w.dense_ff, w.hidden], F16, "weight"),
        ]
    shared_ff = w.expert_ff * w.shared_experts
    return out + [
        (tensor_name(T.FFN_GATE_INP, layer), [w.hidden, w.experts], F32, "router"),
        (tensor_name(T.FFN_EXP_PROBS_B, layer, "bias"), [w.experts], F32, "zero"),
        (tensor_name(T.FFN_GATE_EXP, layer), [w.hidden, w.expert_ff, w.experts], F16, "weight"),
        (tensor_name(T.FFN_UP_EXP, layer), [w.hidden, w.expert_ff, w.experts], F16, "weight"),
        (tensor_name(T.FFN_DOWN_EXP, layer), [w.expert_ff, w.hidden, w.experts], F16, "weight"),
        (tensor_name(T.FFN_GATE_SHEXP, layer), [w.hidden, shared_ff], F16, "weight"),
        (tensor_name(T.FFN_UP_SHEXP, layer), [w.hidden, shared_ff], F16, "weight"),
        (tensor_name(T.FFN_DOWN_SHEXP, layer), [shared_ff, w.hidden], F16, "weight"),
    ]


def model_tensors(w):
    """Every tensor of the model, in file order."""
    out = [
        (tensor_name(T.TOKEN_EMBD), [w.hidden, w.vocab], F16, "weight"),
        (tensor_name(T.OUTPUT_NORM), [w.hidden], F32, "one"),
        (tensor_name(T.OUTPUT), [w.hidden, w.vocab], F16, "weight"),
    ]
    for layer in range(w.layers):
        out.append((tensor_name(T.ATTN_NORM, layer), [w.hidden], F32, "one"))
        out += mla_tensors(w, layer) if is_mla_layer(layer) else kda_tensors(w, layer)
        out += ffn_tensors(w, layer)
    return out


def add_hparams(writer, w):
    """The keys Kimi-Linear's loader reads (llama-model.cpp load_hparams + kimi-linear.cpp load_arch_hparams)."""
    writer.add_name("Kimi-Linear at glint bench widths (random weights)")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(w.context)
    writer.add_embedding_length(w.hidden)
    writer.add_block_count(w.layers)
    writer.add_feed_forward_length(w.dense_ff)
    writer.add_head_count(w.kda_heads)
    # n_head_kv == 0 marks a KDA (recurrent) layer; MLA layers are one latent "head" (MQA), as llama.cpp caches it
    writer.add_head_count_kv([1 if is_mla_layer(layer) else 0 for layer in range(w.layers)])
    writer.add_layer_norm_rms_eps(w.rms_eps)
    writer.add_ssm_conv_kernel(w.kda_conv)
    writer.add_kda_head_dim(w.kda_head_dim)
    writer.add_kv_lora_rank(w.kv_lora)
    writer.add_rope_dimension_count(w.rope_dims)
    writer.add_key_length(w.kv_lora + w.rope_dims)
    writer.add_value_length(w.kv_lora)
    writer.add_key_length_mla(w.mla_qk_head_dim)
    writer.add_value_length_mla(w.mla_v_head_dim)
    writer.add_expert_count(w.experts)
    writer.add_expert_used_count(w.experts_used)
    writer.add_expert_feed_forward_length(w.expert_ff)
    writer.add_expert_shared_count(w.shared_experts)
    writer.add_leading_dense_block_count(w.dense_layers)
    writer.add_expert_weights_scale(w.routed_scale)
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    writer.add_vocab_size(w.vocab)


def add_vocab(writer, w):
    """A SentencePiece-type vocabulary of plain ASCII pieces: every sampled token decodes to complete UTF-8 text (a
    byte token would not, and llama-server holds back the chunk of an incomplete character), prompts are sent as
    token ids so nothing is ever tokenized, and `<0x0A>` is there because the loader looks for a newline token."""
    specials = [("<unk>", gguf.TokenType.UNKNOWN), ("<s>", gguf.TokenType.CONTROL),
                ("</s>", gguf.TokenType.CONTROL), ("<0x0A>", gguf.TokenType.BYTE)]
    tokens = [text for text, _ in specials] + [f"\u2581t{i}" for i in range(len(specials), w.vocab)]
    types = [int(kind) for _, kind in specials] + [int(gguf.TokenType.NORMAL)] * (w.vocab - len(specials))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * w.vocab)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)  # a 256-id prompt is 256 tokens, as glint counts it


class ValuePool:
    """Random values for the weight matrices: one pool, read cyclically from a random offset per tensor."""

    def __init__(self, rng, largest):
        size = min(largest, 1 << 24) + 7  # an odd size, so that rows of a tensor do not repeat in step
        self.rng = rng
        self.values = (rng.standard_normal(size, dtype=np.float32) * 0.02).astype(np.float16)

    def take(self, count, dtype):
        return take_cyclic(self.values, count, self.rng).astype(dtype, copy=False)


def take_cyclic(pool, count, rng):
    """count items of pool read cyclically from a random offset (bailingmoe3_gguf.py reads its blocks this way)."""
    start = int(rng.integers(len(pool)))
    parts, left = [], count
    while left > 0:
        part = pool[start:start + left]
        parts.append(part)
        left -= len(part)
        start = 0
    return np.concatenate(parts)


def tensor_values(fill, ne, ggml_type, pool, rng):
    dtype = np.float16 if ggml_type == F16 else np.float32
    count = int(np.prod(ne))
    shape = tuple(reversed(ne))
    if fill == "one":
        return np.ones(shape, dtype)
    if fill == "zero":
        return np.zeros(shape, dtype)
    if fill in ("decay", "router"):
        return random_values(fill, count, rng).astype(dtype).reshape(shape)
    return pool.take(count, dtype).reshape(shape)


def random_values(fill, count, rng):
    """fp32 values of the tensors not drawn from the pool."""
    if fill == "decay":  # A = -exp(A_log), A_log uniform in [0, ln 16]: per-head decay rates as trained models have
        return (-np.exp(rng.uniform(0.0, np.log(16.0), count))).astype(np.float32)
    assert fill == "router", fill  # fully random, so the top-8 choice is uniform over the experts
    return rng.standard_normal(count, dtype=np.float32) * 0.02


def write(path, w, seed):
    rng = np.random.default_rng(seed)
    tensors = model_tensors(w)
    pool = ValuePool(rng, max(int(np.prod(ne)) for _, ne, _, _ in tensors))
    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.KIMI_LINEAR]

    def info(ne, ggml_type):
        dtype = np.dtype(np.float16 if ggml_type == F16 else np.float32)
        return tuple(reversed(ne)), dtype, int(np.prod(ne)) * dtype.itemsize, None

    # one tensor in memory at a time (the largest: 1.07 GB of experts)
    write_file(path, arch, w, tensors, add_hparams, info,
               lambda fill, ne, ggml_type: tensor_values(fill, ne, ggml_type, pool, rng))


def write_file(path, arch, w, tensors, add_hparams_fn, info, data):
    """The GGUF of a writer (this one, bailingmoe3_gguf.py): its hyperparameters, the shared vocabulary, then
    (name, ne, type, fill) tensors, each described by info(ne, type) -> (numpy shape, dtype, bytes, raw type or
    None) and made by data(fill, ne, type) when its turn comes, so that one tensor is in memory at a time."""
    writer = gguf.GGUFWriter(path, arch)
    add_hparams_fn(writer, w)
    add_vocab(writer, w)
    for name, ne, ggml_type, _ in tensors:
        shape, dtype, nbytes, raw_dtype = info(ne, ggml_type)
        writer.add_tensor_info(name, shape, dtype, nbytes, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    total = 0
    for _, ne, ggml_type, fill in tensors:
        values = data(fill, ne, ggml_type)
        writer.write_tensor_data(values)
        total += values.nbytes
    writer.close()
    params = sum(int(np.prod(ne)) for _, ne, _, _ in tensors)
    print(f"wrote {path}: {len(tensors)} tensors, {params / 1e9:.3f} G parameters, {total / 1e9:.2f} GB")


def field_value(field):
    """A scalar or array value of a GGUFReader field."""
    values = [field.parts[i] for i in field.data]
    if len(values) == 1 and field.types[0] != gguf.GGUFValueType.ARRAY:
        value = values[0]
        return bytes(value).decode() if field.types[0] == gguf.GGUFValueType.STRING else value.tolist()[0]
    if field.types[-1] == gguf.GGUFValueType.STRING:
        return [bytes(v).decode() for v in values]
    return [v.tolist()[0] for v in values]


def key_problems(reader, want_keys, vocab):
    """Each metadata key whose value is not the expected one (float32 values compared to 6 places), and the
    vocabulary's length."""
    problems = []
    for key, want in want_keys.items():
        field = reader.fields.get(key)
        got = None if field is None else field_value(field)
        if isinstance(want, float) and isinstance(got, float):
            got = round(got, 6)
        if got != want:
            problems.append(f"key {key}: {got!r}, expected {want!r}")
    tokens = reader.fields.get(gguf.Keys.Tokenizer.LIST)
    if tokens is None or len(tokens.data) != vocab:
        problems.append(f"{gguf.Keys.Tokenizer.LIST}: {None if tokens is None else len(tokens.data)} tokens, "
                        f"expected {vocab}")
    return problems


def expected_keys(w):
    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.KIMI_LINEAR]
    k = gguf.Keys
    return {
        k.General.ARCHITECTURE: arch,
        k.LLM.EMBEDDING_LENGTH.format(arch=arch): w.hidden,
        k.LLM.BLOCK_COUNT.format(arch=arch): w.layers,
        k.LLM.FEED_FORWARD_LENGTH.format(arch=arch): w.dense_ff,
        k.Attention.HEAD_COUNT.format(arch=arch): w.kda_heads,
        k.Attention.HEAD_COUNT_KV.format(arch=arch): [1 if is_mla_layer(l) else 0 for l in range(w.layers)],
        k.Attention.KEY_LENGTH_MLA.format(arch=arch): w.mla_qk_head_dim,
        k.Attention.VALUE_LENGTH_MLA.format(arch=arch): w.mla_v_head_dim,
        k.Attention.KV_LORA_RANK.format(arch=arch): w.kv_lora,
        k.SSM.CONV_KERNEL.format(arch=arch): w.kda_conv,
        k.KDA.HEAD_DIM.format(arch=arch): w.kda_head_dim,
        k.LLM.EXPERT_COUNT.format(arch=arch): w.experts,
        k.LLM.EXPERT_USED_COUNT.format(arch=arch): w.experts_used,
        k.LLM.EXPERT_FEED_FORWARD_LENGTH.format(arch=arch): w.expert_ff,
        k.LLM.EXPERT_SHARED_COUNT.format(arch=arch): w.shared_experts,
        k.LLM.LEADING_DENSE_BLOCK_COUNT.format(arch=arch): w.dense_layers,
        k.LLM.EXPERT_GATING_FUNC.format(arch=arch): int(gguf.ExpertGatingFuncType.SIGMOID),
    }


def check(path, w):
    """Every problem found, as text: keys, the tensor set, each tensor's ne, the vocabulary's length."""
    reader = gguf.GGUFReader(path)
    problems = key_problems(reader, expected_keys(w), w.vocab)
    allowed = {gguf.TENSOR_NAMES[kind] for kind in gguf.MODEL_TENSORS[gguf.MODEL_ARCH.KIMI_LINEAR]}
    found = {t.name: [int(n) for n in t.shape] for t in reader.tensors}
    for name, ne, _, _ in model_tensors(w):
        template = re.sub(r"^blk\.\d+\.", "blk.{bid}.", re.sub(r"\.(weight|bias)$", "", name))
        if template not in allowed:
            problems.append(f"tensor {name}: not in gguf-py's Kimi-Linear tensor list")
        got = found.pop(name, None)
        # a quantizer may drop trailing 1-sized dimensions (the loader accepts both forms)
        while got is not None and len(got) > len(ne) and got[-1] == 1:
            got.pop()
        trimmed = list(ne)
        while got is not None and len(trimmed) > len(got) and trimmed[-1] == 1:
            trimmed.pop()
        if got != trimmed:
            problems.append(f"tensor {name}: ne {got}, expected {ne}")
    problems += [f"tensor {name}: not expected" for name in sorted(found)]
    return problems


def command_line(argv, doc, presets, write_file, check_file, what):
    """The `write` and `check` commands of a GGUF writer (this one, bailingmoe3_gguf.py); what names the file's
    architecture in the check's success line."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    write_cmd = sub.add_parser("write", help="write the random-weight GGUF")
    write_cmd.add_argument("--out", required=True, help="GGUF file to write")
    write_cmd.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    check_cmd = sub.add_parser("check", help="check a GGUF's keys and tensors against the widths")
    check_cmd.add_argument("path", help="GGUF file")
    for cmd in (write_cmd, check_cmd):
        cmd.add_argument("--preset", choices=sorted(presets), default="bench", help="widths (default: bench)")
    args = parser.parse_args(argv)
    widths = presets[args.preset]
    if args.command == "write":
        write_file(args.out, widths, args.seed)
        return 0
    problems = check_file(args.path, widths)
    for problem in problems:
        print(f"{args.path}: {problem}", file=sys.stderr)
    if not problems:
        print(f"{args.path}: {what} at the {args.preset} widths, every key and tensor as expected")
    return 1 if problems else 0


def main(argv):
    return command_line(argv, __doc__, PRESETS, write, check, "Kimi-Linear")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
