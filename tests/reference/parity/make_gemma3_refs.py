#!/usr/bin/env python3
"""Writes tests/data/parity/gemma3.json: llama.cpp's next-token distributions
on Gemma 3 270M (the real Q4_K_M file, scripts/fetch-gemma3), for the
forward-parity test (tests/unit/stages/test_forward_gemma3.cpp).

As make_refs.py does for the default model: for each prompt llama.cpp
tokenizes it (with the BOS Gemma needs), greedily continues it for 64
tokens, and we record at each of the 64 predicting positions its top-8
tokens with their log-probabilities; Kvasir is fed the same ids (teacher
forcing). One case (466 prompt tokens + 64) runs past the sliding window
(512), so its last 17 positions check the local layers' window too.

Run:  scripts/fetch-gemma3
      python3 tests/reference/parity/make_gemma3_refs.py [models/gemma-3-270m-q4_k_m.gguf]
      (it installs the peer, llama-cpp-python 0.3.36, with scripts/install-peer)
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
if not os.environ.get("KVASIR_PEER"):
    _peer = os.path.join(ROOT, "scripts", "install-peer")
    os.execv(_peer, [_peer, "--run", os.path.abspath(__file__)] + sys.argv[1:])

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_refs import write_refs  # noqa: E402

MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")
OUT = os.path.join(ROOT, "tests", "data", "parity", "gemma3.json")
N_CONT = 64
TOP = 8

CHAT = "<start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n"

LONG = " ".join([
    "The river rose slowly through the spring, first covering the gravel bars where the herons "
    "stood in the mornings, then the low meadow where the farmer kept his sheep, and finally the "
    "old towpath that ran beside the canal. Nobody in the village could remember a flood like it.",
    "In the town hall the council met every evening. The mayor, a careful man who had been a "
    "schoolteacher for thirty years, listened to each complaint and wrote it down in a green "
    "notebook. The baker wanted sandbags; the priest wanted the bells rung every hour so that "
    "people on the far bank would know the church was still dry; the children wanted boats.",
    "Engineers came from the city with maps and instruments. They measured the water at the "
    "bridge three times a day and drew long lines on paper that showed the level climbing and, "
    "after the tenth day, beginning to fall. They explained that the snow in the mountains had "
    "melted early and that heavy rain had followed, and that the old dam upstream had held.",
    "When the water went down it left a layer of fine grey mud over everything: the fields, the "
    "gardens, the floors of the houses nearest the river. People shovelled it into carts and "
    "spread it on the hills, and the next summer those hills grew the best wheat anyone had seen.",
    "Years later the children who had wanted boats told their own children about the flood. "
    "They described the green notebook, the bells ringing through the night, the engineers with "
    "their lines on paper, and the grey mud that turned into wheat. Each time the story grew a "
    "little, as stories do, until the river in it was as wide as a sea and the mayor had become "
    "a hero who had carried the whole village on his back. The mayor himself, who lived to be "
    "very old, only laughed when he heard it, and said that what he remembered most was how "
    "tired everyone had been, and how kind, and how the baker had given bread away for a month.",
    "Now the river is quiet again. The herons have come back to the gravel bars, the sheep graze "
    "in the low meadow, and the towpath is full of people walking their dogs on Sunday "
    "afternoons. On the wall of the town hall there is a small brass plate that marks how high "
    "the water reached, and underneath it someone has written, in pencil, the words",
])

PROMPTS = [
    ("prose", "The capital of France is"),
    ("prose", "Once upon a time, in a small village at the edge of a great forest, there lived"),
    ("prose", "Photosynthesis is the process by which plants"),
    ("prose", "In economics, inflation refers to"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("code", "#include <stdio.h>\n\nint main(void) {\n    int i;\n    for (i = 0; i < 10; i++) {\n"),
    ("code", "SELECT name, COUNT(*) FROM orders JOIN customers ON"),
    ("numbers", "1, 2, 3, 5, 8, 13, 21,"),
    ("numbers", "Q: What is 17 * 23?\nA:"),
    ("non-english", "La Révolution française a commencé en 1789 lorsque"),
    ("non-english", "東京は日本の首都であり、"),
    ("chat", CHAT.format("What is the capital of France?")),
    ("chat", CHAT.format("Write a haiku about the sea.")),
    ("chat", CHAT.format("Explain what a hash table is in two sentences.")),
    ("chat", CHAT.format("You are a pirate.\n\nTranslate 'good morning' into Spanish and German.")),
    ("mixed", "Emoji test 🙂🚀 and symbols: <>&%$#@! followed by"),
    ("long", LONG),
]


def main():
    write_refs(MODEL, OUT, PROMPTS, "tests/reference/parity/make_gemma3_refs.py",
               n_ctx=1024, add_bos=True, n_cont=N_CONT, top=TOP)


if __name__ == "__main__":
    main()
