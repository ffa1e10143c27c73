#!/usr/bin/env python3
"""An independent oracle of GLM-5.3-Flash's image preprocessing, written from the rules of torch's uint8
antialiased bicubic resize (aten/src/ATen/native/cpu/UpSampleKernel.cpp) and of the GLM-5.3-Flash image
processor (smart_resize, pad mode, fused rescale/normalise, merge-block patch order); see docs/vision-input.md.

It shares no code with glint (numpy only). It writes the fixtures of tests/data/vision_input/: for each case an
input PNG (written here with zlib, lossless), the processor config, and expected.json with the canvas, the uint8
canvas pixels (canvas.rgb), the grid, the token count, FNV-1a 64 hashes of the input, the canvas and the whole
float32 pixel_values, and the first two patch rows as float32 bit patterns.

    python3 tools/vision_input_oracle.py tests/data/vision_input
"""
import json
import math
import os
import struct
import sys
import zlib

import numpy as np

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def keys_cubic(x, a=-0.5):
    x = abs(x)
    if x < 1.0:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2.0:
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return 0.0


def axis_filter(in_size, out_size):
    """(starts, counts, float64 weights [out, taps], int16 weights, precision) of one axis."""
    scale = in_size / out_size
    support = 2.0 * scale if scale >= 1.0 else 2.0
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    taps = int(math.ceil(support)) * 2 + 1
    starts, counts = [], []
    weights = np.zeros((out_size, taps))
    for i in range(out_size):
        center = scale * (i + 0.5)
        xmin = max(int(center - support + 0.5), 0)  # int() truncates toward zero, as the C++ cast
        xsize = min(max(min(int(center + support + 0.5), in_size) - xmin, 0), taps)
        ws = [keys_cubic(((j + xmin) - center + 0.5) * inv) for j in range(xsize)]
        total = 0.0
        for w in ws:
            total += w
        if total != 0.0:
            ws = [w / total for w in ws]
        weights[i, :xsize] = ws
        starts.append(xmin)
        counts.append(xsize)
    wt_max = float(weights.max()) if weights.size else 0.0
    precision = 0
    while precision < 22 and int(0.5 + wt_max * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    scaled = weights * (1 << precision)
    fixed = np.where(scaled < 0, np.trunc(scaled - 0.5), np.trunc(scaled + 0.5)).astype(np.int64)
    return starts, counts, fixed, precision


def resample_axis(image, out_size, axis):
    """image: uint8 [H, W, 3]; resamples `axis` (1 = width, 0 = height) in fixed point."""
    in_size = image.shape[axis]
    starts, counts, fixed, precision = axis_filter(in_size, out_size)
    src = np.moveaxis(image.astype(np.int64), axis, 0)  # [in, other, 3]
    out = np.empty((out_size,) + src.shape[1:], dtype=np.uint8)
    for i in range(out_size):
        s, n = starts[i], counts[i]
        acc = (1 << (precision - 1)) + np.tensordot(fixed[i, :n], src[s:s + n], axes=(0, 0))
        out[i] = np.clip(acc >> precision, 0, 255)
    return np.moveaxis(out, 0, axis)


def resize(image, out_h, out_w):
    if image.shape[1] != out_w:
        image = resample_axis(image, out_w, 1)  # width first
    if image.shape[0] != out_h:
        image = resample_axis(image, out_h, 0)
    return image


def ceil_to(v, f):
    return math.ceil(v / f) * f


def smart_resize(h, w, cfg):
    t = cfg["temporal_patch_size"]
    f = cfg["patch_size"] * cfg["merge_size"]
    min_px = cfg["min_image_tokens"] * t * f * f
    max_px = cfg["max_image_tokens"] * t * f * f

    def fit():
        low, high, best = 1, h, (f, f)
        while low <= high:
            ch = (low + high) // 2
            cw = max(1, math.floor(w * ch / h))
            ah, aw = ceil_to(ch, f), ceil_to(cw, f)
            if t * ah * aw <= max_px:
                best, low = (ah, aw), ch + 1
            else:
                high = ch - 1
        return best

    hb, wb = ceil_to(h, f), ceil_to(w, f)
    if t * hb * wb > max_px:
        return fit()
    if t * hb * wb < min_px:
        beta = math.sqrt(min_px / (t * h * w))
        hb = ceil_to(max(1, math.ceil(h * beta)), f)
        wb = ceil_to(max(1, math.ceil(w * beta)), f)
        if t * hb * wb > max_px:
            return fit()
    return hb, wb


def preprocess(image, cfg):
    h, w = image.shape[:2]
    ch, cw = smart_resize(h, w, cfg)
    t = cfg["temporal_patch_size"]
    f = cfg["patch_size"] * cfg["merge_size"]
    if cfg["resize_mode"] == "resize":
        content = (ch, cw)
        canvas = resize(image, ch, cw)
    else:
        upscale = t * h * w < cfg["min_image_tokens"] * t * f * f
        scale = min(ch / h, cw / w)
        if not upscale:
            scale = min(1.0, scale)
        content = (max(1, min(ch, math.floor(h * scale))), max(1, min(cw, math.floor(w * scale))))
        resized = image if content == (h, w) else resize(image, *content)
        canvas = np.zeros((ch, cw, 3), dtype=np.uint8)
        canvas[:content[0], :content[1]] = resized
    # Fused rescale + normalise in float32, as the torchvision backend.
    inv = np.float32(1.0 / (1 / 255))
    mean = np.array(CLIP_MEAN, dtype=np.float32) * inv
    std = np.array(CLIP_STD, dtype=np.float32) * inv
    x = np.transpose(canvas, (2, 0, 1)).astype(np.float32)  # [C, H, W]
    x = (x - mean[:, None, None]) / std[:, None, None]
    tp, p, m = t, cfg["patch_size"], cfg["merge_size"]
    frames = np.stack([x] * tp)  # [T=tp, C, H, W]: the still image repeated
    gh, gw = ch // p, cw // p
    v = frames.reshape(1, tp, 3, gh // m, m, p, gw // m, m, p)  # (grid_t=1, tp, C, bh, mh, ph, bw, mw, pw)
    v = v.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)  # (grid_t, bh, bw, mh, mw, C, tp, ph, pw)
    pixel_values = np.ascontiguousarray(v.reshape(gh * gw, 3 * tp * p * p), dtype=np.float32)
    return canvas, content, (1, gh, gw), pixel_values


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def write_png(path, image):
    h, w = image.shape[:2]
    raw = b"".join(b"\x00" + image[y].tobytes() for y in range(h))
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    with open(path, "wb") as out:
        out.write(png)


def test_image(h, w, seed):
    """Gradients, a hard edge and noise: every filter tap matters, and overshoot clamps at 0 and 255."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) % 7) * 36], axis=-1)
    img = img + rng.integers(-40, 41, size=img.shape)
    img[:, w // 2:, 1] = np.where((x[:, w // 2:] // 3) % 2 == 0, 255, 0)  # a stripe pattern
    return np.clip(img, 0, 255).astype(np.uint8)


CASES = [
    # name, (height, width), processor config overrides
    ("upscale_below_min", (15, 20), {}),
    ("downscale_over_max", (47, 61), {"min_image_tokens": 1, "max_image_tokens": 2}),
    ("wide", (40, 300), {"min_image_tokens": 4, "max_image_tokens": 16}),
    ("exact_canvas", (56, 84), {"min_image_tokens": 1}),
    ("strong_downscale", (150, 200), {"min_image_tokens": 1, "max_image_tokens": 8}),
    ("stretch_resize_mode", (33, 50), {"min_image_tokens": 1, "max_image_tokens": 16, "resize_mode": "resize"}),
    ("tall_pad_right", (90, 31), {"min_image_tokens": 1, "max_image_tokens": 12}),
]


def main(out_dir):
    for index, (name, (h, w), overrides) in enumerate(CASES):
        cfg = {"patch_size": 14, "temporal_patch_size": 2, "merge_size": 2, "min_image_tokens": 16,
               "max_image_tokens": 8000, "resize_mode": "pad", "image_mean": CLIP_MEAN, "image_std": CLIP_STD,
               "rescale_factor": 1 / 255}
        cfg.update(overrides)
        image = test_image(h, w, seed=index)
        canvas, content, grid, pixel_values = preprocess(image, cfg)
        case_dir = os.path.join(out_dir, name)
        os.makedirs(case_dir, exist_ok=True)
        write_png(os.path.join(case_dir, "input.png"), image)
        with open(os.path.join(case_dir, "processor_config.json"), "w") as out:
            json.dump({"image_processor": cfg}, out, indent=1)
        with open(os.path.join(case_dir, "canvas.rgb"), "wb") as out:
            out.write(canvas.tobytes())
        expected = {
            "input_size": [h, w], "canvas": list(canvas.shape[:2]), "content": list(content), "grid": list(grid),
            "tokens": grid[0] * grid[1] * grid[2] // cfg["merge_size"] ** 2,
            "input_fnv1a64": "%016x" % fnv1a64(image.tobytes()),
            "canvas_fnv1a64": "%016x" % fnv1a64(canvas.tobytes()),
            "pixel_values_shape": list(pixel_values.shape),
            "pixel_values_fnv1a64": "%016x" % fnv1a64(pixel_values.tobytes()),
            "first_rows_bits": pixel_values[:2].view(np.uint32).tolist(),
        }
        with open(os.path.join(case_dir, "expected.json"), "w") as out:
            json.dump(expected, out)
        print(f"{name}: {w}x{h} -> content {content[1]}x{content[0]} canvas {canvas.shape[1]}x{canvas.shape[0]}, "
              f"{expected['tokens']} tokens")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/vision_input")
