#!/usr/bin/env python3
"""bench/clients/hf_tokenizer.py GGUF OUT_DIR — the model's tokenizer as a
Hugging Face folder (tokenizer.json, tokenizer_config.json), written from
the GGUF file's own vocabulary and merges, so the clients (lm-eval's
`huggingface` tokenizer backend, aiperf's `--tokenizer`) load it offline
with transformers' AutoTokenizer.

The same tokenizer.json tests/support/hf_from_gguf.cpp writes for the
HF-folder tests (a SmolLM2-style byte-level BPE: digits split one by one,
then GPT-2's byte-level regex), without the weights. Only the `smollm`
pre-tokenizer is written; another is refused rather than approximated.
"""
import json
import os
import sys

import gguf


def field(r, key, default=None):
    f = r.fields.get(key)
    return f.contents() if f is not None else default


def tokenizer_json(tokens, types, merges):
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": ty == 4, "special": ty == 3}
             for i, (t, ty) in enumerate(zip(tokens, types)) if ty in (3, 4)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    return {
        "version": "1.0",
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": list(merges)},
    }


def write(model, out):
    r = gguf.GGUFReader(model)
    pre = field(r, "tokenizer.ggml.pre")
    if field(r, "tokenizer.ggml.model") != "gpt2" or pre != "smollm":
        raise SystemExit(f"hf_tokenizer: only the smollm byte-level BPE is written (got {pre})")
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    bos, eos = field(r, "tokenizer.ggml.bos_token_id"), field(r, "tokenizer.ggml.eos_token_id")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(tokens, types, field(r, "tokenizer.ggml.merges")), f,
                  ensure_ascii=False)
    config = {"tokenizer_class": "GPT2Tokenizer",
              "add_bos_token": bool(field(r, "tokenizer.ggml.add_bos_token", False)),
              "bos_token": tokens[bos], "eos_token": tokens[eos],
              "model_max_length": int(field(r, f"{field(r, 'general.architecture')}.context_length")),
              "chat_template": field(r, "tokenizer.chat_template")}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: hf_tokenizer.py GGUF OUT_DIR")
    write(sys.argv[1], sys.argv[2])
