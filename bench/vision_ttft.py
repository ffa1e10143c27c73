#!/usr/bin/env python3
"""Time to first token of a chat turn with one image against a running `glint serve` (docs/vision.md "Benchmark").

    glint serve --port 8080 &          # the default model has an (untrained) tower; or --model DIR
    python3 bench/vision_ttft.py --base-url http://127.0.0.1:8080 --side 448 --requests 5

For each of --requests turns it sends a streamed chat with a fresh side x side PNG (one pixel differs per request,
so the prefix cache never holds it and the tower runs every time), then the same turn again (its image is a
prefix-cache hit), then the turn without the image. It prints the median time from sending to the first streamed
content, and glint's own figures from /metrics (tower time, images encoded). Standard library only; one request at
a time.
"""
import argparse
import base64
import json
import statistics
import struct
import time
import urllib.request
import zlib


def png(side, salt):
    """A side x side RGB gradient, with pixel (0, 0) set from `salt`."""
    rows = bytearray()
    for y in range(side):
        rows.append(0)  # filter: none
        for x in range(side):
            rows += bytes(((x * 255) // side, (y * 255) // side, (x + y) % 256))
    rows[1:4] = bytes((salt % 256, (salt // 256) % 256, 7))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(rows))) + chunk(b"IEND", b"")


def first_token_seconds(base_url, content, max_tokens):
    body = {"messages": [{"role": "user", "content": content}], "stream": True, "max_tokens": max_tokens,
            "temperature": 0}
    request = urllib.request.Request(f"{base_url}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        for line in response:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            delta = choices[0].get("delta", {})
            if delta.get("content") or delta.get("reasoning_content"):
                return time.perf_counter() - start
    return time.perf_counter() - start  # no text at all: the end of the stream


def metrics(base_url):
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=60) as response:
        values = {}
        for line in response.read().decode().splitlines():
            parts = line.split()
            if len(parts) == 2 and not line.startswith("#"):
                values[parts[0]] = float(parts[1])
        return values


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default="http://127.0.0.1:8080")
    parser.add_argument("--side", type=int, default=448, help="image side in pixels (448: 256 image tokens)")
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--text", default="What is in this picture?")
    args = parser.parse_args()
    before = metrics(args.base_url)
    fresh, cached, text_only = [], [], []
    for i in range(args.requests):
        url = "data:image/png;base64," + base64.b64encode(png(args.side, i + 1)).decode()
        content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": args.text}]
        fresh.append(first_token_seconds(args.base_url, content, args.max_tokens))
        cached.append(first_token_seconds(args.base_url, content, args.max_tokens))
        text_only.append(first_token_seconds(args.base_url, args.text, args.max_tokens))
    after = metrics(args.base_url)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    encoded = delta.get("glint_images_encoded_total", 0)
    print(f"{args.side}x{args.side} image, {args.requests} requests, median time to first token:")
    print(f"  new image     {statistics.median(fresh) * 1e3:9.1f} ms")
    print(f"  same image    {statistics.median(cached) * 1e3:9.1f} ms  (prefix-cache hit)")
    print(f"  text only     {statistics.median(text_only) * 1e3:9.1f} ms")
    print(f"  glint: {encoded:.0f} images encoded, {delta.get('glint_image_tokens_encoded_total', 0):.0f} image tokens, "
          f"tower {delta.get('glint_vision_seconds_total', 0) / max(encoded, 1) * 1e3:.1f} ms per image")


if __name__ == "__main__":
    main()
