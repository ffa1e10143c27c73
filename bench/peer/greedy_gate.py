#!/usr/bin/env python3
"""The correctness gate of a peer comparison: N identical greedy prompts at once must give one distinct answer.

A server that batches sequences wrongly (ik_llama.cpp has returned wrong text with several sequences on recurrent
models) would otherwise be timed on wrong work. The gate sends one greedy completion alone, then N copies of it at
once, to an OpenAI-compatible /v1/completions, with logprobs: every answer must have the text, the tokens (and
their ids, where the server gives them) and, within LOGPROB_TOLERANCE, the logprobs of the one sent alone. The
logprobs matter because a random-weight model's tokens may all decode to empty text (glint's bench model does); a
sequence that read another's state picks other tokens, whose logprobs differ by far more than the rounding of a
batched product. The prompt is token ids (both glint serve and llama-server take them), from a fixed seed in the
range the benchmark draws from.

The prompts are short enough that all N are prefilled whole within one step's token budget (glint's 512 by
default: 16 × 32 prompt tokens, plus one decode row for each sequence already prefilled, stay within it however
the N arrive). A prompt the scheduler splits over two steps (chunked prefill) sums in another order (equal to the
whole prefill to ≈ 1e-7 relative, docs/fast-path.md "Equivalences"), and on a random-weight model such a difference
moves int8 activation roundings and grows to ≈ 0.15 in a greedy logprob within 16 tokens (measured with 64-token
prompts: 1 of 16 sequences split, 15 bit for bit equal): that is rounding, not a batching error, and the gate is
about batching.

  greedy_gate.py --base-url http://127.0.0.1:PORT --sequences 16 [--max-tokens 16] [--prompt-len 32]

Prints one line saying what it found; exit 0 when every answer agrees, 1 when they differ, 2 on a request error.
Standard library only, so it runs wherever the peer scripts do.
"""

import argparse
import concurrent.futures
import json
import random
import sys
import urllib.error
import urllib.request


def model_name(base_url, timeout):
    """The first model /v1/models lists (glint serve wants the name it serves; llama-server takes any)."""
    with urllib.request.urlopen(f"{base_url}/v1/models", timeout=timeout) as response:
        models = json.load(response).get("data") or []
    return models[0]["id"] if models else "model"


LOGPROB_TOLERANCE = 0.05  # batched and single-row products round differently; a different token moves far more


def complete(base_url, model, prompt, max_tokens, timeout):
    """(text, [(token, id or None, logprob)]) of one greedy completion."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "logprobs": 1, "stream": False}).encode()
    request = urllib.request.Request(f"{base_url}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        choice = json.load(response)["choices"][0]
    return choice["text"], sampled_tokens(choice.get("logprobs") or {})


def sampled_tokens(logprobs):
    """The legacy completions form (tokens, token_logprobs: glint) or the chat form (content[]: llama-server)."""
    if "content" in logprobs:
        return [(t["token"], t.get("id"), t["logprob"]) for t in logprobs["content"]]
    return [(token, None, logprob) for token, logprob in zip(logprobs["tokens"], logprobs["token_logprobs"])]


def same_answer(a, b):
    (text_a, tokens_a), (text_b, tokens_b) = a, b
    return (text_a == text_b and len(tokens_a) == len(tokens_b) and
            all(ta[:2] == tb[:2] and abs(ta[2] - tb[2]) <= LOGPROB_TOLERANCE for ta, tb in zip(tokens_a, tokens_b)))


def describe(answer):
    text, tokens = answer
    return f"text {text[:40]!r}, logprobs {[round(t[2], 3) for t in tokens[:4]]}"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--sequences", type=int, default=16, help="identical requests sent at once (default 16)")
    parser.add_argument("--max-tokens", type=int, default=16, help="greedy tokens per answer (default 16)")
    parser.add_argument("--prompt-len", type=int, default=32,
                        help="prompt length in token ids (default 32: N of them fit one step, see above)")
    parser.add_argument("--token-id-range", default="3:154820", help="LOW:HIGH of the prompt's ids")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per request (default 600)")
    args = parser.parse_args(argv)
    if not 1 <= args.sequences <= 256 or not 1 <= args.max_tokens <= 4096 or not 1 <= args.prompt_len <= 65536:
        parser.error("--sequences 1..256, --max-tokens 1..4096, --prompt-len 1..65536")
    try:
        low, high = (int(x) for x in args.token_id_range.split(":"))
    except ValueError:
        parser.error(f"--token-id-range '{args.token_id_range}': expected LOW:HIGH")
    if not 0 <= low < high:
        parser.error(f"--token-id-range '{args.token_id_range}': expected 0 <= LOW < HIGH")
    rng = random.Random(36)
    prompt = [rng.randrange(low, high) for _ in range(args.prompt_len)]
    base_url = args.base_url.rstrip("/")
    try:
        model = model_name(base_url, args.timeout)
        alone = complete(base_url, model, prompt, args.max_tokens, args.timeout)
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.sequences) as pool:
            at_once = list(pool.map(lambda _: complete(base_url, model, prompt, args.max_tokens, args.timeout),
                                    range(args.sequences)))
        differing = [answer for answer in at_once if not same_answer(answer, alone)]
    except (urllib.error.URLError, OSError, KeyError, IndexError, TypeError, ValueError) as error:
        print(f"greedy gate: request failed or its answer has no text and logprobs: {error!r}")
        return 2
    if not alone[1]:
        print("greedy gate: the server returned no logprobs, so answers cannot be compared")
        return 2
    if not differing:
        print(f"greedy gate passed: 1 alone + {args.sequences} at once, {args.max_tokens} greedy tokens each, "
              f"one answer ({describe(alone)})")
        return 0
    print(f"greedy gate FAILED: {len(differing)} of {args.sequences} answers sent at once differ from the one sent "
          f"alone (alone: {describe(alone)}; e.g. {describe(differing[0])})")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
