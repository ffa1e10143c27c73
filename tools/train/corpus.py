"""The training corpus: English text from Debian's `fortunes` package (/usr/share/games/fortunes), cleaned.

Each fortune file holds entries separated by lines with a single '%'. Cleaning keeps printable text only (entries
with control characters such as backspace overstrikes or terminal escapes are dropped), expands tabs, strips
trailing spaces, caps runs of spaces at four, drops empty and very long entries and exact duplicates, and skips
the ascii-art file (pictures, not prose). A deterministic 2 % of entries (by a hash of their text) is held out.
"""
import hashlib
import os
import re
import unicodedata

FORTUNE_DIR = "/usr/share/games/fortunes"
SKIPPED_FILES = {"ascii-art"}
MAX_CHARS = 2000
HELD_OUT_MODULUS = 50  # 1 in 50 entries is held out


def clean_entry(text):
    text = unicodedata.normalize("NFC", text)
    lines = []
    for line in text.split("\n"):
        line = line.expandtabs(8).rstrip()
        if any(not ch.isprintable() for ch in line):
            return None
        lines.append(re.sub(r" {5,}", "    ", line))
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    text = "\n".join(lines)
    if not text or len(text) > MAX_CHARS:
        return None
    return text


def load_fortunes(directory=FORTUNE_DIR):
    """Returns (train, held_out): lists of (category, text)."""
    seen = set()
    train, held_out = [], []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if "." in name or name in SKIPPED_FILES or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            raw = f.read()
        for entry in re.split(r"^%\n", raw, flags=re.M):
            text = clean_entry(entry)
            if text is None or text in seen:
                continue
            seen.add(text)
            digest = int(hashlib.sha1(text.encode()).hexdigest(), 16)
            (held_out if digest % HELD_OUT_MODULUS == 0 else train).append((name, text))
    return train, held_out


if __name__ == "__main__":
    train, held_out = load_fortunes()
    chars = sum(len(t) for _, t in train)
    print(f"train: {len(train)} entries, {chars} chars; held out: {len(held_out)} entries, "
          f"{sum(len(t) for _, t in held_out)} chars")
