#!/usr/bin/env python3
"""bench/serve: aggregate output tokens/s of C concurrent requests through
kvasird (a 2-stage CPU ring), next to llama.cpp's single-stream decode rate
(llama-cpp-python, same model file, same total thread count) measured in the
same run. The CPU-kernels issue asks for >= 2x: batching must pay off.

  python3 -m pip install llama-cpp-python==0.3.36
  scripts/build && python3 bench/serve/run.py [--concurrency 16] [--max-tokens 128]
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
BIN = os.environ.get("KVASIR_BIN", os.path.join(ROOT, "build", "bin"))

CONFIG = """
[model]
path = "{model}"
[plan]
max_rows = 32
max_tokens = 512
max_inflight = {inflight}
[[stages]]
layers = "0-14"
device = "cpu"
threads = 1
[[stages]]
layers = "15-29"
device = "cpu"
threads = 1
[kv]
block_size = 16
memory = "256MiB"
[server]
socket = "{sock}"
"""


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=600)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def complete(sock, prompt, max_tokens, out, i):
    c = UnixHTTP(sock)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True})
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = json.loads(c.getresponse().read())
    out[i] = r["usage"]["completion_tokens"]


def kvasir_rate(conc, max_tokens, inflight):
    d = tempfile.mkdtemp(prefix="kvasir-bench-")
    sock = os.path.join(d, "k.sock")
    cfg = os.path.join(d, "k.toml")
    open(cfg, "w").write(CONFIG.format(model=MODEL, sock=sock, inflight=inflight))
    p = subprocess.Popen([os.path.join(BIN, "kvasird"), "--config", cfg],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        subprocess.run([os.path.join(BIN, "kvasir"), "status", "--socket", sock, "--wait", "120"],
                       check=True, capture_output=True)
        prompts = [f"Request {i}: write a short story about a robot number {i}." for i in range(conc)]
        out = [0] * conc
        t = time.perf_counter()
        th = [threading.Thread(target=complete, args=(sock, prompts[i], max_tokens, out, i))
              for i in range(conc)]
        [x.start() for x in th]
        [x.join() for x in th]
        return sum(out) / (time.perf_counter() - t)
    finally:
        p.terminate()
        p.wait()


def llama_rate(max_tokens, threads):
    import llama_cpp
    import numpy as np
    llm = llama_cpp.Llama(model_path=MODEL, n_ctx=1024, n_threads=threads, verbose=False)
    ids = llm.tokenize(b"Request 0: write a short story about a robot number 0.", add_bos=False)
    llm.eval(ids)
    tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    t = time.perf_counter()
    for _ in range(max_tokens - 1):
        llm.eval([tok])
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    return (max_tokens - 1) / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--inflight", type=int, default=0)
    a = ap.parse_args()
    k = kvasir_rate(a.concurrency, a.max_tokens, a.inflight)
    l = llama_rate(a.max_tokens, 2)
    print(f"kvasird 2 stages x 1 thread, {a.concurrency} concurrent, {a.max_tokens} tokens each: "
          f"{k:.1f} output tok/s")
    print(f"llama.cpp single stream, 2 threads: {l:.1f} tok/s")
    print(f"ratio {k / l:.2f} (target >= 2)")


if __name__ == "__main__":
    sys.exit(main())
