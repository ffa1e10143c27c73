"""Minimal safetensors reader/writer and the number formats of the GLM-5.3 checkpoint (BF16, FP8 e4m3 block-128).

Written for the training tool so it needs nothing beyond Debian's python3-torch (there is no python3-safetensors in
Debian 12). Layout: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}},
then the data section (offsets relative to it).
"""
import json
import struct

import numpy as np
import torch

_NUMPY_OF = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "BF16": np.uint16,
             "F8_E4M3": np.uint8, "U8": np.uint8, "I8": np.int8, "F16": np.float16}


def read_safetensors(path):
    """Returns {name: (dtype string, numpy array of the raw storage type)} in header order."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[base + begin:base + end], dtype=_NUMPY_OF[entry["dtype"]])
        out[name] = (entry["dtype"], array.reshape(entry["shape"]))
    return out


def write_safetensors(path, tensors, metadata=None):
    """`tensors`: {name: (dtype string, numpy array whose bytes are the storage)}; written in sorted name order."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        dtype, array = tensors[name]
        blob = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)  # align the data section to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


# ---- BF16: the top 16 bits of an IEEE float32, rounded to nearest even ----

def bf16_bits_to_float(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float_to_bf16_bits(values):
    x = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((x >> 16) & 1) + 0x7FFF  # round to nearest, ties to even
    return ((x + rounding) >> 16).astype(np.uint16)


# ---- FP8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no inf; S.1111.111 is NaN; max 448 ----

def _e4m3_table():
    table = np.zeros(256, dtype=np.float64)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exponent = (code >> 3) & 0xF
        mantissa = code & 0x7
        if exponent == 0xF and mantissa == 0x7:
            table[code] = np.nan
        elif exponent == 0:
            table[code] = sign * 2.0 ** -6 * mantissa / 8.0
        else:
            table[code] = sign * 2.0 ** (exponent - 7) * (1.0 + mantissa / 8.0)
    return table


E4M3_TABLE = _e4m3_table()          # [256] code → value
_E4M3_POSITIVE = E4M3_TABLE[:127]    # codes 0x00..0x7E, increasing values 0 .. 448


def e4m3_to_float(codes):
    return E4M3_TABLE[codes.astype(np.int64)]


def float_to_e4m3(values):
    """Round to the nearest e4m3 value (ties to the even code), saturating at ±448. values: float array."""
    x = np.asarray(values, dtype=np.float64)
    magnitude = np.minimum(np.abs(x), 448.0)
    upper = np.searchsorted(_E4M3_POSITIVE, magnitude, side="left").clip(0, 126)  # first value ≥ |x|
    lower = np.maximum(upper - 1, 0)
    d_upper = _E4M3_POSITIVE[upper] - magnitude
    d_lower = magnitude - _E4M3_POSITIVE[lower]
    pick_lower = (d_lower < d_upper) | ((d_lower == d_upper) & (lower % 2 == 0))
    code = np.where(pick_lower, lower, upper).astype(np.uint8)
    code = np.where(np.signbit(x) & (code != 0), code | 0x80, code).astype(np.uint8)
    return code


def quantize_fp8_block(weight, block=128):
    """weight [out, in] float → (codes uint8 [out, in], scale_inv float32 [ceil(out/128), ceil(in/128)]).

    scale_inv = amax/448 per block (a multiplier despite its name: W ≈ e4m3(code) × scale_inv)."""
    w = np.asarray(weight, dtype=np.float64)
    rows, cols = w.shape
    br, bc = -(-rows // block), -(-cols // block)
    scale = np.zeros((br, bc), dtype=np.float32)
    codes = np.zeros((rows, cols), dtype=np.uint8)
    for i in range(br):
        for j in range(bc):
            tile = w[i * block:(i + 1) * block, j * block:(j + 1) * block]
            amax = float(np.abs(tile).max())
            s = np.float32(amax / 448.0) if amax > 0 else np.float32(1.0)
            scale[i, j] = s
            codes[i * block:(i + 1) * block, j * block:(j + 1) * block] = float_to_e4m3(tile / np.float64(s))
    return codes, scale


def dequantize_fp8_block(codes, scale_inv, block=128):
    values = e4m3_to_float(codes)
    expanded = np.repeat(np.repeat(scale_inv.astype(np.float64), block, axis=0), block, axis=1)
    return values * expanded[:codes.shape[0], :codes.shape[1]]


def load_checkpoint_tensors(path, dtype=torch.float64):
    """Reads a GLM checkpoint file and returns {name: torch tensor} with BF16 decoded and FP8 dequantized
    (the `_scale_inv` companions are consumed)."""
    raw = read_safetensors(path)
    out = {}
    for name, (dt, array) in raw.items():
        if name.endswith("_scale_inv"):
            continue
        if dt == "F8_E4M3":
            value = dequantize_fp8_block(array, raw[name + "_scale_inv"][1])
        elif dt == "BF16":
            value = bf16_bits_to_float(array).astype(np.float64)
        else:
            value = array.astype(np.float64)
        out[name] = torch.from_numpy(np.array(value)).to(dtype)
    return out


def fake_quant_fp8_block(weight, block=128):
    """The value an FP8 block-128 export would give back, as a torch tensor (for quantisation-aware steps)."""
    codes, scale = quantize_fp8_block(weight.detach().cpu().numpy())
    return torch.from_numpy(dequantize_fp8_block(codes, scale)).to(weight.dtype)


def round_bf16(weight):
    bits = float_to_bf16_bits(weight.detach().cpu().float().numpy())
    return torch.from_numpy(bf16_bits_to_float(bits).copy()).to(weight.dtype)
