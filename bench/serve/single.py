#!/usr/bin/env python3
"""bench/serve/single.py: one request's decode speed through the ring.

A single stream through kvasird (2 CPU stages) against the same model in one
process (kvasir-local) and llama.cpp (llama-bench, bench/peers), all on the
same cores, in the same run, interleaved round by round (this machine is shared
and noisy: rates drift, ratios within a round hold). The goals it checks:
ring >= 0.9x kvasir-local with the same threads, and >= 1.0x llama.cpp.

  scripts/build && python3 bench/serve/single.py [--threads 2] [--rounds 3] [--max-tokens 128]

Rates are decode tokens/s: kvasird's is 1000 / mean ITL as the client sees
it (`kvasir bench --concurrency 1`, streamed over the Unix socket, so the
HTTP path is included), kvasir-local's and llama.cpp's are their own decode
loops (llama-bench: tg MAX_TOKENS at depth 16, the prompt's length). Three
rings are measured: each stage holding `--threads` threads that
the stages share by need (`threads = 0` in the config: the default), the
same with the cores split statically (each stage threads / 2: what a fixed
split gives one request), and, from the stats, the ring's own cost: the mean
handoff into each stage and the tail-to-bridge return, per token.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "forward"))
import machine  # noqa: E402

ROOT = machine.ROOT
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
BIN = os.environ.get("KVASIR_BIN", os.path.join(ROOT, "build", "bin"))
PROMPT = "Request 0: write a short story about a robot number 0."

CONFIG = """
[model]
path = "{model}"
[plan]
max_rows = 32
max_tokens = 512
[[stages]]
layers = "0-14"
device = "cpu"
threads = {threads}
[[stages]]
layers = "15-29"
device = "cpu"
threads = {threads}
[kv]
block_size = 16
memory = "256MiB"
[server]
socket = "{sock}"
"""


def stats(sock):
    out = subprocess.run(["curl", "-s", "--unix-socket", sock, "http://x/kvasir/v1/stats"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def ring_rate(threads, max_tokens, requests):
    """(decode tok/s, [handoff us per stage], return us) of one stream at a time."""
    kvasir = os.path.join(BIN, "kvasir")
    with machine.kvasird(BIN, CONFIG.format(model=MODEL, sock="{sock}", threads=threads)) as sock:
        # One warm-up request: the first touches every page of the weights.
        subprocess.run([kvasir, "bench", "--socket", sock, "--requests", "1", "--max-tokens", "8",
                        "--prompt-len", "16", "--progress", "never"], check=True, capture_output=True)
        s0 = stats(sock)
        out = subprocess.run([kvasir, "bench", "--socket", sock, "--requests", str(requests),
                              "--concurrency", "1", "--max-tokens", str(max_tokens), "--prompt-len",
                              "16", "--json", "--progress", "never"],
                             check=True, capture_output=True, text=True).stdout
        s1 = stats(sock)
    itl = json.loads(out)["itl_ms"]["mean"]
    hand = []
    for a, b in zip(s0["stages"], s1["stages"]):
        n = b["handoffs"] - a["handoffs"]
        hand.append((b["handoff_s"] - a["handoff_s"]) * 1e6 / n if n else float("nan"))
    r0, r1 = s0["ring_return"], s1["ring_return"]
    n = r1["results"] - r0["results"]
    ret = (r1["seconds"] - r0["seconds"]) * 1e6 / n if n else float("nan")
    return 1000.0 / itl, hand, ret


def local_rate(threads, max_tokens):
    out = subprocess.run([os.path.join(BIN, "kvasir-local"), "-m", MODEL, "-p", PROMPT, "-n",
                          str(max_tokens), "-t", str(threads), "--ignore-eos", "-q"],
                         capture_output=True, text=True, check=True)
    m = re.search(r"decode \d+ tokens in [\d.]+ s \(([\d.]+) tok/s\)", out.stdout + out.stderr)
    return float(m[1])


def llama_rate(bench, threads, max_tokens):
    """llama-bench's decode tok/s after a 16-token context (the prompt's size)."""
    out = subprocess.run([bench, "-m", MODEL, "-t", str(threads), "-r", "1", "-o", "json", "-p", "0",
                          "-n", str(max_tokens), "-d", "16"], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)[0]["avg_ts"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2, help="cores the engines may use")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--requests", type=int, default=3, help="ring requests per round")
    a = ap.parse_args()
    peers = machine.peers()
    bench = os.path.join(peers, "llama-bench")
    print(machine.describe(os.path.join(BIN, "kvasir-local")), flush=True)
    print(f"peers: {machine.peers_stamp(peers)}")
    if a.threads != os.cpu_count():
        print(f"note: threads = 0 gives each stage all {os.cpu_count()} cpus; this run compares "
              f"against {a.threads}-thread peers")
    rows = []
    for r in range(a.rounds):
        shared, hand, ret = ring_rate(0 if a.threads == os.cpu_count() else a.threads,
                                      a.max_tokens, a.requests)
        split, _, _ = ring_rate(max(1, a.threads // 2), a.max_tokens, a.requests)
        local = local_rate(a.threads, a.max_tokens)
        peer = llama_rate(bench, a.threads, a.max_tokens)
        rows.append((shared, split, local, peer))
        print(f"round {r + 1}: ring shared cores {shared:.1f}, ring split cores {split:.1f}, "
              f"kvasir-local {local:.1f}, llama.cpp {peer:.1f} tok/s; handoff into stages "
              + ", ".join(f"{h:.0f}" for h in hand) + f" us, tail to bridge {ret:.0f} us; "
              f"load {' '.join(machine.load())}", flush=True)
    med = [statistics.median(c) for c in zip(*rows)]
    vs_local = statistics.median(r[0] / r[2] for r in rows)
    vs_peer = statistics.median(r[0] / r[3] for r in rows)
    split_vs_local = statistics.median(r[1] / r[2] for r in rows)
    print(f"median decode tok/s: ring (shared cores) {med[0]:.1f}, ring (split cores) {med[1]:.1f}, "
          f"kvasir-local {med[2]:.1f}, llama.cpp {med[3]:.1f}")
    print(f"ring / kvasir-local {vs_local:.2f} (target >= 0.9; split cores {split_vs_local:.2f}); "
          f"ring / llama.cpp {vs_peer:.2f} (target >= 1.0)")


if __name__ == "__main__":
    sys.exit(main())
