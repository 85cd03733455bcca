#!/usr/bin/env python3
"""Writes tests/data/parity/smollm2-f64.json: a plain float64 NumPy forward of
the default model (weights dequantised exactly with the `gguf` package,
activations never quantised), on the same token ids as smollm2.json.

It is the exact math the quantised file describes, so it measures how far
each engine's own rounding takes it: llama.cpp (8-bit activations, f16 Q and
softmax in attention) and Kvasir. Run after make_refs.py:

  python3 -m pip install gguf numpy
  python3 tests/reference/parity/make_f64_refs.py
"""
import json
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
REFS = os.path.join(ROOT, "tests", "data", "parity", "smollm2.json")
OUT = os.path.join(ROOT, "tests", "data", "parity", "smollm2-f64.json")


def field(r, key):
    return r.fields[key].contents()


def main():
    r = GGUFReader(MODEL)
    arch = field(r, "general.architecture")
    L = field(r, f"{arch}.block_count")
    H = field(r, f"{arch}.embedding_length")
    F = field(r, f"{arch}.feed_forward_length")
    nh = field(r, f"{arch}.attention.head_count")
    nkv = field(r, f"{arch}.attention.head_count_kv")
    theta = field(r, f"{arch}.rope.freq_base")
    eps = field(r, f"{arch}.attention.layer_norm_rms_epsilon")
    hd = H // nh
    T = {t.name: t for t in r.tensors}
    cache = {}

    def W(name):
        if name not in cache:
            t = T[name]
            a = dequantize(t.data, t.tensor_type).astype(np.float64)
            cache[name] = a.reshape([int(x) for x in reversed(t.shape)])
        return cache[name]

    emb = W("token_embd.weight")
    out_w = W("output.weight") if "output.weight" in T else emb
    inv = theta ** (-np.arange(0, hd, 2) / hd)

    def forward(ids):
        n = len(ids)
        ang = np.arange(n)[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

        def rope(v, heads):  # GGUF llama: adjacent pairs
            v = v.reshape(n, heads, hd // 2, 2)
            a, b = v[..., 0], v[..., 1]
            return np.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(n, heads, hd)

        def rms(v, w):
            return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

        x = emb[ids]
        mask = np.triu(np.full((n, n), -np.inf), 1)
        for l in range(L):
            p = f"blk.{l}."
            xn = rms(x, W(p + "attn_norm.weight"))
            q = rope(xn @ W(p + "attn_q.weight").T, nh)
            k = rope(xn @ W(p + "attn_k.weight").T, nkv)
            v = (xn @ W(p + "attn_v.weight").T).reshape(n, nkv, hd)
            att = np.zeros((n, nh, hd))
            for h in range(nh):
                kh = h // (nh // nkv)
                s = q[:, h] @ k[:, kh].T / np.sqrt(hd) + mask
                s = np.exp(s - s.max(-1, keepdims=True))
                att[:, h] = (s / s.sum(-1, keepdims=True)) @ v[:, kh]
            x = x + att.reshape(n, nh * hd) @ W(p + "attn_output.weight").T
            xn = rms(x, W(p + "ffn_norm.weight"))
            g = xn @ W(p + "ffn_gate.weight").T
            u = xn @ W(p + "ffn_up.weight").T
            x = x + (g / (1 + np.exp(-g)) * u) @ W(p + "ffn_down.weight").T
        return rms(x, W("output_norm.weight")) @ out_w.T  # [n, vocab]

    refs = json.load(open(REFS))
    out = {"generator": "tests/reference/parity/make_f64_refs.py", "numpy": np.__version__,
           "model_sha256": refs["model_sha256"], "top": refs["top"], "cases": []}
    agree = total = 0
    for cs in refs["cases"]:
        ids = cs["prompt"] + cs["continuation"][:-1]
        logits = forward(ids)
        top = []
        for i in range(len(cs["top"])):
            row = logits[len(cs["prompt"]) - 1 + i]
            lp = row - (row.max() + np.log(np.exp(row - row.max()).sum()))
            t = np.argsort(-lp)[: refs["top"]]
            top.append([[int(j), round(float(lp[j]), 5)] for j in t])
            agree += int(t[0]) == cs["top"][i][0][0]
            total += 1
        out["cases"].append({"kind": cs["kind"], "prompt": cs["prompt"],
                             "continuation": cs["continuation"], "top": top})
    print(f"llama.cpp vs float64: top-1 agreement {agree}/{total} = {100 * agree / total:.2f}%")
    with open(OUT, "w") as f:
        json.dump(out, f, indent=0)
    print("wrote", OUT)


if __name__ == "__main__":
    sys.exit(main())
