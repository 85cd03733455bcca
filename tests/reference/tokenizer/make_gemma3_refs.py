#!/usr/bin/env python3
"""Reference encodings by llama.cpp of the corpus plus Gemma 3's own control
tokens as data, on the real Gemma 3 270M file (262,144-token SentencePiece
with byte fallback).

    scripts/fetch-gemma3
    python3 tests/reference/tokenizer/make_gemma3_refs.py [model.gguf] [out.jsonl]

(runs under the peer's venv: scripts/install-peer). The format is
make_refs.py's; tests/unit/model/test_tokenizer.cpp (Gemma3) reads it.
"""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
if not os.environ.get("KVASIR_PEER"):
    _peer = os.path.join(ROOT, "scripts", "install-peer")
    os.execv(_peer, [_peer, "--run", os.path.abspath(__file__)] + sys.argv[1:])

sys.path.insert(0, os.path.dirname(__file__))
from make_refs import write_refs  # noqa: E402

# Gemma's turn markers and other control tokens inside ordinary text, glued
# to words, doubled, half-written; whitespace runs (Gemma has a token per run
# length) and newlines; CJK and emoji that fall back to bytes.
GEMMA = [
    "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>system\nBe brief.<end_of_turn>",
    "text<end_of_turn>more<eos>",
    "<bos><bos>twice",
    "<pad><unk><mask>",
    "<start_of_image><end_of_image>",
    "<start_of_turn",
    "start_of_turn>",
    "<<start_of_turn>>",
    "< start_of_turn >",
    "<end_of_turn>\n\n<end_of_turn>",
    "[multimodal]",
    "<eos>",
    " <eos> ",
    "a" + " " * 31 + "b",
    " " * 64,
    "\n" * 12,
    "\t" * 9 + "x",
    "    def f():\n        return  1\n",
    "ｅｍｏｊｉ：🧑‍🚀👩🏽‍🔬🏳️‍🌈 ✨🫠",
    "𝕳𝖊𝖑𝖑𝖔 𝔀𝓸𝓻𝓵𝓭",
    "漢字かな交じり文と한국어と中文混排。",
    "Ｆｕｌｌｗｉｄｔｈ　ｓｐａｃｅ",
    "\u200b\u200c\u200d\ufeff",
    "\x00\x01\x02 control bytes",
]


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests", "data", "tokenizer", "gemma3.jsonl")
    write_refs(model, out, step=4, extra=[t.encode("utf-8") for t in GEMMA])


if __name__ == "__main__":
    main()
