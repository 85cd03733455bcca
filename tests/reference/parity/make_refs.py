#!/usr/bin/env python3
"""Writes tests/data/parity/smollm2.json: llama.cpp's next-token distributions
on the default model, for the forward-parity test (tests/unit/stages/test_forward_parity.cpp).

For each prompt (prose, code, numbers, non-English, chat-formatted), llama.cpp
tokenizes it, greedily continues it for 64 tokens, and we record, at each of the
64 predicting positions (the last prompt token and the first 63 continuation
tokens), llama.cpp's top-8 tokens with their log-probabilities. Kvasir is then
fed the *same* token ids (teacher forcing) and compared.

Run:  python3 tests/reference/parity/make_refs.py [models/SmolLM2-135M-Instruct.Q4_1.gguf]
      (it installs the peer, llama-cpp-python 0.3.36, with scripts/install-peer)
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# The llama.cpp peer is built for this CPU by scripts/install-peer (pinned
# ggml options, a multi-token check first; docs/parity.md): re-run under its venv.
if not os.environ.get("KVASIR_PEER"):
    _peer = os.path.join(ROOT, "scripts", "install-peer")
    os.execv(_peer, [_peer, "--run", os.path.abspath(__file__)] + sys.argv[1:])

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_refs import write_refs  # noqa: E402
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(ROOT, "tests", "data", "parity", "smollm2.json")
N_CONT = 64
TOP = 8

CHAT = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"

PROMPTS = [
    ("prose", "The capital of France is"),
    ("prose", "Once upon a time, in a small village at the edge of a great forest, there lived"),
    ("prose", "The history of the Roman Empire spans more than a thousand years, and"),
    ("prose", "Photosynthesis is the process by which plants"),
    ("prose", "In economics, inflation refers to"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("code", "#include <stdio.h>\n\nint main(void) {\n    int i;\n    for (i = 0; i < 10; i++) {\n"),
    ("code", "SELECT name, COUNT(*) FROM orders JOIN customers ON"),
    ("code", "function debounce(fn, ms) {\n  let timer;\n  return function(...args) {\n"),
    ("numbers", "1, 2, 3, 5, 8, 13, 21,"),
    ("numbers", "The year 1969 was when humans first landed on the Moon. In 2024, the population of Earth was about"),
    ("numbers", "3.14159 26535 89793 23846"),
    ("numbers", "Q: What is 17 * 23?\nA:"),
    ("non-english", "La Révolution française a commencé en 1789 lorsque"),
    ("non-english", "Der schnelle braune Fuchs springt über den faulen Hund, und dann"),
    ("non-english", "El Quijote es una novela escrita por"),
    ("non-english", "東京は日本の首都であり、"),
    ("chat", CHAT.format("What is the capital of France?")),
    ("chat", CHAT.format("Write a haiku about the sea.")),
    ("chat", CHAT.format("Explain what a hash table is in two sentences.")),
    ("chat", CHAT.format("Translate 'good morning' into Spanish and German.")),
    ("mixed", "Emoji test 🙂🚀 and symbols: <>&%$#@! followed by"),
]


def main():
    write_refs(MODEL, OUT, PROMPTS, "tests/reference/parity/make_refs.py",
               n_ctx=512, add_bos=False, n_cont=N_CONT, top=TOP)


if __name__ == "__main__":
    main()
