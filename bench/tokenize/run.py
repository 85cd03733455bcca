#!/usr/bin/env python3
"""Tokenizer speed: Kvasir vs the Hugging Face `tokenizers` package, same text, one core.

    python3 bench/tokenize/run.py [--build build-tok] [--mb 4]

The text: the English licence texts under /usr/share/common-licenses,
repeated to about --mb MB. The `tokenizers` side uses a tokenizer.json built
from the default model's own vocabulary and merges (SmolLM2: Digits +
ByteLevel), so both encode with the same vocabulary. RAYON_NUM_THREADS=1 and
encode() per chunk (no batch parallelism) keep it to one core.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def make_text(path, mb):
    base = ""
    for f in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(f):
            base += open(f, encoding="utf-8", errors="replace").read()
    text = base * max(1, int(mb * 1e6 / max(1, len(base))))
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return text


def hf_json_from_gguf(path):
    from gguf import GGUFReader
    r = GGUFReader(MODEL)

    def strs(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    tokens, merges = strs("tokenizer.ggml.tokens"), strs("tokenizer.ggml.merges")
    tf = r.fields["tokenizer.ggml.token_type"]
    types = [int(tf.parts[i][0]) for i in tf.data]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 3]
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "Digits", "individual_digits": True},
              {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
          "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                               "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                    "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                    "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build-tok"))
    ap.add_argument("--mb", type=float, default=4)
    ap.add_argument("--chunk", type=int, default=4096)
    a = ap.parse_args()
    text_path, tj_path = "/tmp/kvasir_bench_tokenize.txt", "/tmp/kvasir_smollm2_tokenizer.json"
    text = make_text(text_path, a.mb)
    hf_json_from_gguf(tj_path)
    chunks, off = [], 0
    data = text.encode("utf-8")
    while off < len(data):  # same cutting rule as the C++ driver
        end = min(len(data), off + a.chunk)
        nl = data.rfind(b"\n", off, end + 1) if end < len(data) else -1
        if end < len(data) and nl > off:
            end = nl + 1
        chunks.append(data[off:end].decode("utf-8"))
        off = end
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import Tokenizer
    import tokenizers
    tok = Tokenizer.from_file(tj_path)
    mb = len(data) / 1e6
    best, first, n = 0.0, 0.0, 0
    for r in range(5):
        t0 = time.perf_counter()
        n = sum(len(tok.encode(c, add_special_tokens=False).ids) for c in chunks)
        s = time.perf_counter() - t0
        first = first or mb / s
        best = max(best, mb / s)
    print(f"tokenizers {tokenizers.__version__}: {mb:.2f} MB, {n} tokens, {len(chunks)} chunks: "
          f"first pass {first:.2f} MB/s, best of 5 {best:.2f} MB/s")
    exe = os.path.join(a.build, "bin", "bench_tokenize")
    sys.stdout.flush()
    subprocess.run(["taskset", "-c", "0", exe, "--chunk", str(a.chunk), text_path], check=True)


if __name__ == "__main__":
    main()
