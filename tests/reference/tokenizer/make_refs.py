#!/usr/bin/env python3
"""Reference encodings of the corpus by llama.cpp (PyPI llama-cpp-python).

    python3 tests/reference/tokenizer/make_refs.py [model.gguf] [out.jsonl]

(runs under the peer's venv: scripts/install-peer)

Writes one JSON object per line. The first line is a header naming the
reference and its version. Each following line:
  text | hex   the input (hex when it is not valid UTF-8)
  ids          tokenize(add_bos=True, special=True)   (BOS only if the model says so)
  ids_plain    tokenize(add_bos=True, special=False), omitted when equal to ids
  detok        hex of the pieces of `ids` (token_to_piece, special=True), concatenated
  detok_skip   same with special=False, omitted when equal to detok
  rt           whether the pieces of `ids`, less an added BOS (and the space
               SentencePiece prefixes), give back the input
"""
import ctypes
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# The llama.cpp peer is built for this CPU by scripts/install-peer (pinned
# ggml options, a multi-token check first; docs/parity.md): re-run under its venv.
if not os.environ.get("KVASIR_PEER"):
    _peer = os.path.join(ROOT, "scripts", "install-peer")
    os.execv(_peer, [_peer, "--run", os.path.abspath(__file__)] + sys.argv[1:])

import llama_cpp  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from corpus import corpus  # noqa: E402


def write_refs(model, out, step=1, extra=()):
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    buf = ctypes.create_string_buffer(4096)

    def piece(tok, special):
        n = llama_cpp.llama_token_to_piece(vocab, tok, buf, len(buf), 0, special)
        assert 0 <= n <= len(buf), n
        return buf.raw[:n]

    with open(out, "w", encoding="utf-8") as f:
        f.write(json.dumps({"reference": "llama-cpp-python", "version": llama_cpp.__version__,
                            "model": os.path.basename(model)}) + "\n")
        n_rt = 0
        texts = corpus()[::step] + [t for t in extra if t not in corpus()]
        bos = llama_cpp.llama_vocab_bos(vocab)
        add_bos = llama_cpp.llama_vocab_get_add_bos(vocab)
        spm = llama_cpp.llama_vocab_type(vocab) == llama_cpp.LLAMA_VOCAB_TYPE_SPM
        for t in texts:
            ids = llm.tokenize(t, add_bos=True, special=True)
            plain = llm.tokenize(t, add_bos=True, special=False)
            detok = b"".join(piece(i, True) for i in ids)
            skip = b"".join(piece(i, False) for i in ids)
            rec = {}
            try:
                rec["text"] = t.decode("utf-8")
            except UnicodeDecodeError:
                rec["hex"] = t.hex()
            rec["ids"] = ids
            if plain != ids:
                rec["ids_plain"] = plain
            rec["detok"] = detok.hex()
            if skip != detok:
                rec["detok_skip"] = skip.hex()
            # Round trip: the text without the BOS the model adds (and, for
            # SentencePiece, without the space it prefixes).
            body = ids[1:] if add_bos and ids and ids[0] == bos else ids
            back = b"".join(piece(i, True) for i in body)
            if spm and back.startswith(b" "):
                back = back[1:]
            rec["rt"] = back == t
            n_rt += rec["rt"]
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print(f"{out}: {len(texts)} strings, {n_rt} round-trip")


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests", "data", "tokenizer", "smollm2.jsonl")
    write_refs(model, out)


if __name__ == "__main__":
    main()
