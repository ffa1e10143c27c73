#!/usr/bin/env python3
"""Gives models/glint-tiny a vision tower: the model.visual.* tensors of an untrained `glint make-tiny` model of the
same widths (random weights, never trained on an image), appended to glint-tiny's own tensors, which stay
byte-identical (so its text outputs do not change). Standard library only.

    glint make-tiny --out /tmp/tower            # the default preset: hidden 256, the tower of models/glint-tiny
    python3 tools/add_tiny_tower.py /tmp/tower models/glint-tiny

Refuses when the two vision_configs differ or the target already has a tower.
"""
import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return header, data


def main(tower_dir, target_dir):
    tower_config = json.load(open(f"{tower_dir}/config.json"))["vision_config"]
    target_config = json.load(open(f"{target_dir}/config.json"))["vision_config"]
    if tower_config != target_config:
        sys.exit(f"the vision_configs differ:\n{tower_config}\n{target_config}")
    tower_header, tower_data = read(f"{tower_dir}/model.safetensors")
    header, data = read(f"{target_dir}/model.safetensors")
    if any(name.startswith("model.visual.") for name in header):
        sys.exit(f"{target_dir} already has a vision tower")
    metadata = header.pop("__metadata__", {})
    tower_metadata = tower_header.pop("__metadata__", {})
    metadata["vision_tower"] = (f"untrained: random weights of glint make-tiny --preset {tower_metadata.get('preset')} "
                                f"--seed {tower_metadata.get('seed')} (tools/add_tiny_tower.py)")
    out = bytearray(data)
    for name in sorted(n for n in tower_header if n.startswith("model.visual.")):
        info = tower_header[name]
        begin, end = info["data_offsets"]
        while len(out) % 8:  # keep every tensor 8-byte aligned, as glint's writer does
            out.append(0)
        header[name] = {"dtype": info["dtype"], "shape": info["shape"], "data_offsets": [len(out), len(out) + end - begin]}
        out += tower_data[begin:end]
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(f"{target_dir}/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(out))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
