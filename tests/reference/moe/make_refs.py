#!/usr/bin/env python3
"""Writes tests/data/moe/llama_cpp_tiny.json: llama.cpp's logits on the tiny
random models of each family (tests/support/tiny_model.h, tiny_family()),
for tests/unit/stages/test_forward_peer.cpp.

The models are written by this build's write_tiny_model (deterministic in the
family's spec), so the C++ test writes byte-identical files; each file's
64-bit FNV-1a hash is recorded and the test checks it first (a changed generator means
this script must be re-run). Every position's full logits are recorded.

Run:  python3 tests/reference/moe/make_refs.py build/bin/write_tiny_model
      (it re-runs itself under the peer, llama-cpp-python 0.3.36, through
      scripts/install-peer)
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
if not os.environ.get("KVASIR_PEER"):
    _peer = os.path.join(ROOT, "scripts", "install-peer")
    os.execv(_peer, [_peer, "--run", os.path.abspath(__file__)] + sys.argv[1:])

import numpy as np  # noqa: E402
import llama_cpp  # noqa: E402

WRITER = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bin", "write_tiny_model")
OUT = os.path.join(ROOT, "tests", "data", "moe", "llama_cpp_tiny.json")
FAMILIES = ["llama", "qwen3", "qwen3moe", "qwen2moe", "mixtral"]
# Token ids below the tiny vocabulary (272), the same for every family.
IDS = [(i * 53 + 7) % 272 for i in range(12)]


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def logits_of(path):
    # f32 K and V (GGML_TYPE_F32 = 0): the test's executor keeps f32 KV too.
    llm = llama_cpp.Llama(model_path=path, n_ctx=64, n_batch=64, n_threads=2,
                          logits_all=True, verbose=False, seed=0, type_k=0, type_v=0)
    llm.eval(IDS)
    return np.array(llm.scores[:len(IDS)], dtype=np.float64)


def main():
    out = {"generator": "tests/reference/moe/make_refs.py",
           "llama_cpp_python": llama_cpp.__version__, "ids": IDS, "models": {}}
    with tempfile.TemporaryDirectory() as d:
        for fam in FAMILIES:
            path = os.path.join(d, fam + ".gguf")
            subprocess.run([WRITER, fam, path], check=True)
            with open(path, "rb") as f:
                digest = fnv1a64(f.read())
            lg = logits_of(path)
            out["models"][fam] = {"fnv1a64": digest,
                                  "logits": [[round(float(v), 6) for v in row] for row in lg]}
            print(f"{fam:9s} {digest} max |logit| {np.abs(lg).max():.3f}")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:  # one line per logits row
        f.write(json.dumps({k: v for k, v in out.items() if k != "models"})[:-1] + ', "models": {\n')
        for i, (fam, m) in enumerate(out["models"].items()):
            f.write(f'"{fam}": {{"fnv1a64": "{m["fnv1a64"]}", "logits": [\n')
            f.write(",\n".join(json.dumps(row) for row in m["logits"]))
            f.write("]}" + ("," if i + 1 < len(out["models"]) else "") + "\n")
        f.write("}}\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
