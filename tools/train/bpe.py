"""Byte-level BPE: a trainer that writes a standard tokenizer.json, and an encoder for the training data.

The trainer follows the same rules as glint's C++ trainer (src/tokenizer/bpe_trainer.cc) so either can make the
vocabulary: pre-tokenize with the GLM-4 regex, start every word as its bytes (byte b has id b), repeatedly merge
the most frequent adjacent pair (pairs counted at every position, overlaps included, weighted by word count;
ties → smallest left id, then smallest right id), a merge whose bytes already name a token reuses that id, and a
pair merged again is listed once. Pair counts are kept incrementally (only the words containing the merged pair
are recounted), which makes a few thousand merges over megabytes quick in Python.

GLM's special tokens sit at the release's distance from the end of the embedding (ids vocab_size − offset).
"""
import heapq
import json
from collections import defaultdict

import regex

GLM4_REGEX = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# (offset from the end of the vocabulary, content): glint's GlmSpecialTokenSlots (model doc §11).
SPECIAL_SLOTS = [
    (60, "<|endoftext|>"), (59, "[MASK]"), (58, "[gMASK]"), (57, "[sMASK]"), (56, "<sop>"), (55, "<eop>"),
    (54, "<|system|>"), (53, "<|user|>"), (52, "<|assistant|>"), (51, "<|observation|>"),
    (50, "<|begin_of_image|>"), (49, "<|end_of_image|>"), (48, "<|begin_of_video|>"), (47, "<|end_of_video|>"),
    (46, "<|begin_of_audio|>"), (45, "<|end_of_audio|>"), (44, "<|begin_of_transcription|>"),
    (43, "<|end_of_transcription|>"), (42, "<|code_prefix|>"), (41, "<|code_middle|>"), (40, "<|code_suffix|>"),
    (39, "<think>"), (38, "</think>"), (37, "<tool_call>"), (36, "</tool_call>"), (35, "<tool_response>"),
    (34, "</tool_response>"), (33, "<arg_key>"), (32, "</arg_key>"), (31, "<arg_value>"), (30, "</arg_value>"),
    (29, "/nothink"), (28, "<|begin_of_box|>"), (27, "<|end_of_box|>"), (26, "<|image|>"), (25, "<|video|>"),
]


def special_ids(vocab_size):
    return {content: vocab_size - offset for offset, content in SPECIAL_SLOTS}


def _bytes_to_unicode():
    """GPT-2's byte ↔ printable-character table (byte-level BPE spelling)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars = keep[:]
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


BYTE_TO_CHAR = _bytes_to_unicode()


def spell(data):
    return "".join(BYTE_TO_CHAR[b] for b in data)


def pretokenize(text):
    return [m.group(0) for m in regex.finditer(GLM4_REGEX, text)]


def train(corpus, bpe_vocab_size, min_frequency=2):
    """Returns (token_bytes [id → bytes], merges [(left id, right id)])."""
    counts = defaultdict(int)
    for piece in pretokenize(corpus):
        counts[piece.encode("utf-8")] += 1
    words = [list(w) for w in counts]
    word_count = list(counts.values())
    token_bytes = [bytes([b]) for b in range(256)]
    id_of = {t: i for i, t in enumerate(token_bytes)}

    pair_count = defaultdict(int)
    where = defaultdict(set)  # pair → word indices containing it
    for w, symbols in enumerate(words):
        for a, b in zip(symbols, symbols[1:]):
            pair_count[(a, b)] += word_count[w]
            where[(a, b)].add(w)
    heap = [(-n, a, b) for (a, b), n in pair_count.items()]
    heapq.heapify(heap)

    merges, merged_pairs = [], set()
    while len(token_bytes) < bpe_vocab_size:
        while heap:
            n, a, b = heap[0]
            if pair_count.get((a, b), 0) == -n and n != 0:
                break
            heapq.heappop(heap)  # stale entry
        if not heap or -heap[0][0] < min_frequency:
            break
        _, left, right = heapq.heappop(heap)
        joined = token_bytes[left] + token_bytes[right]
        merged = id_of.get(joined)
        if merged is None:
            merged = len(token_bytes)
            token_bytes.append(joined)
            id_of[joined] = merged
        if (left, right) not in merged_pairs:
            merged_pairs.add((left, right))
            merges.append((left, right))
        touched = {}
        for w in list(where[(left, right)]):
            symbols = words[w]
            for pair in zip(symbols, symbols[1:]):  # remove this word's old contributions
                pair_count[pair] -= word_count[w]
                touched[pair] = True
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == left and symbols[i + 1] == right:
                    out.append(merged)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            for pair in zip(symbols, symbols[1:]):
                where[pair].discard(w)
            words[w] = out
            for pair in zip(out, out[1:]):
                pair_count[pair] += word_count[w]
                where[pair].add(w)
                touched[pair] = True
        for pair in touched:
            if pair_count[pair] > 0:
                heapq.heappush(heap, (-pair_count[pair], pair[0], pair[1]))
    return token_bytes, merges


def tokenizer_json(token_bytes, merges, vocab_size):
    """The standard HF tokenizer.json layout glint loads (docs/tokenizer.md)."""
    specials = special_ids(vocab_size)
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for c, i in sorted(specials.items(), key=lambda kv: kv[1])]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": GLM4_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {spell(t): i for i, t in enumerate(token_bytes)},
                  "merges": [[spell(token_bytes[a]), spell(token_bytes[b])] for a, b in merges]},
    }


class Encoder:
    """Encodes text with a trained vocabulary: specials split out first, then GLM-4 pre-tokens, then BPE by merge
    rank (lowest rank first, leftmost among equals), as glint's Tokenizer does."""

    def __init__(self, token_bytes, merges, vocab_size):
        self.id_of = {t: i for i, t in enumerate(token_bytes)}
        self.token_bytes = token_bytes
        self.rank = {(a, b): r for r, (a, b) in enumerate(merges)}
        self.merged = {(a, b): self.id_of[token_bytes[a] + token_bytes[b]] for a, b in merges}
        self.specials = special_ids(vocab_size)
        self.special_re = regex.compile("|".join(regex.escape(s) for s in
                                                 sorted(self.specials, key=len, reverse=True)))
        self.cache = {}

    def _word(self, piece):
        if piece in self.cache:
            return self.cache[piece]
        symbols = list(piece)
        while len(symbols) > 1:
            best = None
            for i, pair in enumerate(zip(symbols, symbols[1:])):
                r = self.rank.get(pair)
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            symbols[i:i + 2] = [self.merged[(symbols[i], symbols[i + 1])]]
        self.cache[piece] = symbols
        return symbols

    def encode(self, text, parse_special=True):
        ids = []
        pos = 0
        matches = list(self.special_re.finditer(text)) if parse_special else []
        for m in matches + [None]:
            chunk = text[pos:m.start()] if m else text[pos:]
            for piece in pretokenize(chunk):
                ids.extend(self._word(piece.encode("utf-8")))
            if m:
                ids.append(self.specials[m.group(0)])
                pos = m.end()
        return ids

    def decode(self, ids):
        inverse = {i: c for c, i in self.specials.items()}
        out = b""
        for i in ids:
            if i in inverse:
                out += inverse[i].encode()
            elif 0 <= i < len(self.token_bytes):
                out += self.token_bytes[i]
        return out.decode("utf-8", errors="replace")


def save(path, token_bytes, merges, vocab_size):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(token_bytes, merges, vocab_size), f, ensure_ascii=False, indent=1)
        f.write("\n")
