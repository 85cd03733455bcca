#!/usr/bin/env python3
"""bench/serve: aggregate output tokens/s of C concurrent requests through
kvasird (a 2-stage CPU ring), next to llama.cpp's single-stream decode rate
(llama-cpp-python, same model file, same total thread count) measured in the
same run. The goal is >= 2x: batching must pay off.

  scripts/build && python3 bench/serve/run.py [--concurrency 16] [--max-tokens 128]

The peer comes from scripts/install-peer (this script re-runs itself under its
venv). Also printed: the CPU model, the load, Kvasir's SIMD level per kernel,
llama.cpp's system_info and weight buffer types, and the memory bandwidth
(bench/membw, triad, 2 threads) with llama.cpp's single-stream decode as a
share of it (weight bytes per step × tok/s ÷ GB/s) and kvasird's aggregate
rate as a multiple of that single-stream bound (batching reads each weight
once for every request of a step).
"""
import argparse
import http.client
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "forward"))
import machine  # noqa: E402

ROOT = machine.ROOT
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
    config = CONFIG.format(model=MODEL, sock="{sock}", inflight=inflight)
    with machine.kvasird(BIN, config) as sock:
        prompts = [f"Request {i}: write a short story about a robot number {i}." for i in range(conc)]
        out = [0] * conc
        t = time.perf_counter()
        th = [threading.Thread(target=complete, args=(sock, prompts[i], max_tokens, out, i))
              for i in range(conc)]
        [x.start() for x in th]
        [x.join() for x in th]
        return sum(out) / (time.perf_counter() - t)


def llama_rate(max_tokens, threads):
    import llama_cpp
    llm, sysinfo, buffers = machine.llama_load(MODEL, n_ctx=1024, n_threads=threads)
    print(f"llama.cpp {llama_cpp.__version__}: {sysinfo}")
    print("llama.cpp weights: " + "; ".join(buffers), flush=True)
    ids = llm.tokenize(b"Request 0: write a short story about a robot number 0.", add_bos=False)
    return machine.llama_decode(llm, ids, max_tokens)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--inflight", type=int, default=0)
    a = ap.parse_args()
    machine.peer()
    print(machine.describe(os.path.join(BIN, "kvasir-local")), flush=True)
    wbytes = machine.weight_bytes(MODEL)
    bw, bw_cpu, _ = machine.membw(2, os.path.join(BIN, "bench_membw"))
    k = kvasir_rate(a.concurrency, a.max_tokens, a.inflight)
    l = llama_rate(a.max_tokens, 2)
    bound = bw * 1e9 / wbytes  # tok/s of one stream that reads every weight at the triad rate
    print(f"kvasird 2 stages x 1 thread, {a.concurrency} concurrent, {a.max_tokens} tokens each: "
          f"{k:.1f} output tok/s")
    print(f"llama.cpp single stream, 2 threads: {l:.1f} tok/s")
    print(f"ratio {k / l:.2f} (target >= 2)")
    print(f"memory bandwidth (bench/membw, 2 threads): triad {bw:.2f} GB/s wall ({bw_cpu:.2f} by CPU "
          f"time); weights {wbytes / 1e6:.1f} MB per decode step; load {' '.join(machine.load())}")
    print(f"llama.cpp single-stream share of it: {l / bound:.2f}; kvasird aggregate: "
          f"{k / bound:.2f}x the single-stream bound")


if __name__ == "__main__":
    sys.exit(main())
