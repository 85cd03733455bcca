#!/usr/bin/env python3
"""llama.cpp references for the Llama 3, Qwen2 and SentencePiece GGUF paths.

    python3 tests/reference/tokenizer/make_gguf_refs.py   (under the peer's venv: scripts/install-peer)

No such model is at hand, so this writes small vocab-only GGUF files
(tests/data/tokenizer/tiny_{llama3,qwen2,spm}.gguf) from the tokenizers
trained by make_hf_refs.py — tokens, merges or scores, token types, the
family's `tokenizer.ggml.pre` — and records llama-cpp-python's encodings of
every third corpus string on them (same format as make_refs.py).
"""
import json
import os
import sys

# The llama.cpp peer is built for this CPU by scripts/install-peer (pinned
# ggml options, a multi-token check first; docs/parity.md): re-run under its venv.
if not os.environ.get("KVASIR_PEER"):
    _peer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "scripts", "install-peer")
    os.execv(_peer, [_peer, "--run", os.path.abspath(__file__)] + sys.argv[1:])

import gguf  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import make_refs  # noqa: E402

ROOT = make_refs.ROOT
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")


def write_gguf(family, path):
    tj = json.load(open(os.path.join(DATA, f"hf_{family}.json"), encoding="utf-8"))
    model = tj["model"]
    n = max(max(model["vocab"].values()), max(a["id"] for a in tj["added_tokens"])) + 1
    tokens = [""] * n
    types = [1] * n
    for t, i in model["vocab"].items():
        tokens[i] = t
    for a in tj["added_tokens"]:
        tokens[a["id"]] = a["content"]
        types[a["id"]] = 3 if a["special"] else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_name(f"tiny-{family}")
    w.add_block_count(1)
    w.add_context_length(128)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    ids = {t: i for i, t in enumerate(tokens)}
    if family == "spm":
        w.add_tokenizer_model("llama")
        scores = [-1e9] * n
        for r, m in enumerate(merges):
            a, b = m.split(" ", 1)
            i = ids.get(a + b)
            if i is not None and scores[i] == -1e9:
                scores[i] = -float(r)
        for i, t in enumerate(tokens):
            if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                types[i] = 6
        types[ids["<unk>"]] = 2
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(ids["<s>"])
        w.add_eos_token_id(ids["</s>"])
        w.add_unk_token_id(ids["<unk>"])
    else:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("llama-bpe" if family == "llama3" else "qwen2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        if family == "llama3":
            w.add_bos_token_id(ids["<|begin_of_text|>"])
        w.add_eos_token_id(ids["<|endoftext|>"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    for family in ["llama3", "qwen2", "spm"]:
        path = os.path.join(DATA, f"tiny_{family}.gguf")
        write_gguf(family, path)
        make_refs.write_refs(path, os.path.join(DATA, f"tiny_{family}.jsonl"), step=3)


if __name__ == "__main__":
    main()
