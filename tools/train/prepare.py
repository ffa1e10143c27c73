"""Builds the tokenizer and the token streams: fortunes → cleaned corpus → byte-level BPE → training and held-out
token files in WORKDIR.

Documents: each fortune is either plain text followed by <|endoftext|>, or (one in four, chosen by a seeded RNG)
a chat turn in GLM's template: [gMASK]<sop><|system|>Reasoning Effort: Max<|user|>PROMPT<|assistant|><think>
</think>FORTUNE<|user|>, where PROMPT asks for something about the fortune's category. The model thus learns
to answer the chat template with a fortune and to stop with <|user|> (one of the eos ids).

Usage: /usr/bin/python3 tools/train/prepare.py WORKDIR [--vocab 4096]
"""
import argparse
import json
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import corpus  # noqa: E402

CHAT_FRACTION = 0.25
PROMPTS = ["Tell me something about {topic}.", "Say something about {topic}.", "Give me a fortune about {topic}.",
           "What do you know about {topic}?", "Tell me a fortune.", "Say something wise.", "Tell me a joke.",
           "Hi!", "Hello, who are you?", "Write a quote."]
TOPIC = {"men-women": "men and women", "songs-poems": "songs and poems", "startrek": "Star Trek",
         "linuxcookie": "Linux", "knghtbrd": "life", "zippy": "Zippy the Pinhead", "tao": "the Tao",
         "goedel": "logic", "paradoxum": "paradoxes", "translate-me": "languages", "miscellaneous": "anything",
         "fortunes": "fortune", "cookie": "fortune cookies", "platitudes": "platitudes", "pratchett": "Discworld"}


def chat_text(category, text, rng):
    prompt = rng.choice(PROMPTS).format(topic=TOPIC.get(category, category))
    return (f"[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>{prompt}<|assistant|><think></think>"
            f"{text}<|user|>")


def documents(entries, rng, chat_fraction):
    """(text with special tokens, is_chat) per entry, in the given order."""
    out = []
    for category, text in entries:
        if rng.random() < chat_fraction:
            out.append(chat_text(category, text, rng))
        else:
            out.append(text + "<|endoftext|>")
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("workdir")
    parser.add_argument("--vocab", type=int, default=4096, help="embedding rows; BPE gets vocab − 60 ids")
    parser.add_argument("--epochs", type=int, default=4, help="shuffled passes written to the training stream")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)

    train, held_out = corpus.load_fortunes()
    print(f"corpus: {len(train)} training entries ({sum(len(t) for _, t in train)} chars), "
          f"{len(held_out)} held out ({sum(len(t) for _, t in held_out)} chars)")
    text = "\n".join(t for _, t in train)
    token_bytes, merges = bpe.train(text, args.vocab - 60)
    print(f"BPE: {len(token_bytes)} tokens, {len(merges)} merges")
    bpe.save(os.path.join(args.workdir, "tokenizer.json"), token_bytes, merges, args.vocab)
    encoder = bpe.Encoder(token_bytes, merges, args.vocab)

    rng = random.Random(1234)
    stream, starts = [], []
    for epoch in range(args.epochs):
        order = train[:]
        rng.shuffle(order)
        for doc in documents(order, rng, CHAT_FRACTION):
            starts.append(len(stream))
            stream.extend(encoder.encode(doc))
        print(f"epoch {epoch}: {len(stream)} tokens")
    np.save(os.path.join(args.workdir, "train_tokens.npy"), np.array(stream, dtype=np.int32))
    np.save(os.path.join(args.workdir, "train_starts.npy"), np.array(starts, dtype=np.int64))

    # Held-out: plain text only (the perplexity of English fortunes), in file order.
    held_stream, held_starts = [], []
    for _, text in held_out:
        held_starts.append(len(held_stream))
        held_stream.extend(encoder.encode(text + "<|endoftext|>"))
    np.save(os.path.join(args.workdir, "heldout_tokens.npy"), np.array(held_stream, dtype=np.int32))
    np.save(os.path.join(args.workdir, "heldout_starts.npy"), np.array(held_starts, dtype=np.int64))
    with open(os.path.join(args.workdir, "heldout.txt"), "w") as f:
        json.dump([t for _, t in held_out], f)
    chars = sum(len(t) for _, t in held_out)
    print(f"held out: {len(held_stream)} tokens ({chars / len(held_stream):.2f} chars/token)")


if __name__ == "__main__":
    main()
