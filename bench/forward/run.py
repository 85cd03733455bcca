#!/usr/bin/env python3
"""bench/forward: prefill and decode tokens/s of kvasir-local next to llama.cpp
(llama-cpp-python) on the same model file and thread count, measured in the
same run (this machine is shared and noisy: the ratio is the figure to read),
and single-stream decode as a share of the machine's memory bandwidth.

  scripts/build && python3 bench/forward/run.py [--threads 2] [--repeat 3]

The peer is installed (or found) by scripts/install-peer, and this script
re-runs itself under its venv. Prefill: one 512-token prompt. Decode: 128
tokens after a 32-token prompt (greedy, end-of-sequence ignored).

Bandwidth share = bytes of weights read per decode step × decode tok/s ÷ the
triad GB/s of bench/membw on the same number of threads (measured before each
repetition, wall clock like the tok/s), each at its best of the repetitions:
what the engine reaches against what the machine gives, both on their best
run on a machine that may be loaded. (The default model, ~97 MB, fits a
large L3 (many server CPUs have more than 100 MB), so a decode step need not go to
DRAM, and a share above 1 is possible.)
Printed first: the CPU model, the load, the SIMD level of each of Kvasir's
kernels (kvasir-local --simd-info) and what llama.cpp says it used (its
system_info and the buffer types of its weights).
"""
import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402

ROOT = machine.ROOT
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
LOCAL = os.environ.get("KVASIR_LOCAL", os.path.join(ROOT, "build", "bin", "kvasir-local"))

TEXT = ("The history of computing is a long story of people trying to make machines that "
        "think, count and remember. ") * 80


def kvasir(ids, n_gen, threads, chunk=512):
    out = subprocess.run([LOCAL, "-m", MODEL, "--ids", ",".join(map(str, ids)), "-n", str(n_gen),
                          "-t", str(threads), "--chunk", str(chunk), "--ignore-eos", "-q"],
                         capture_output=True, text=True, check=True)
    m = re.search(r"prefill (\d+) tokens in ([\d.]+) s .*decode (\d+) tokens in ([\d.]+) s", out.stderr)
    pre_n, pre_s, dec_n, dec_s = int(m[1]), float(m[2]), int(m[3]), float(m[4])
    return pre_n / pre_s, (dec_n / dec_s if dec_n else 0.0)


def llama_prefill(llm, ids):
    llm.reset()
    t = time.perf_counter()
    llm.eval(ids)
    return len(ids) / (time.perf_counter() - t)


def main():
    machine.peer()
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    import llama_cpp
    print(machine.describe(LOCAL), flush=True)
    llm, sysinfo, buffers = machine.llama_load(MODEL, n_ctx=1024, n_batch=512, n_threads=a.threads,
                                               n_threads_batch=a.threads)
    print(f"llama.cpp {llama_cpp.__version__}: {sysinfo}")
    print("llama.cpp weights: " + "; ".join(buffers))
    wbytes = machine.weight_bytes(MODEL)
    print(f"weights read per decode step: {wbytes / 1e6:.1f} MB", flush=True)
    ids = llm.tokenize(TEXT.encode(), add_bos=False)
    p512, p32 = ids[:512], ids[:32]
    rows = []
    for r in range(a.repeat):
        bw, bw_cpu, _ = machine.membw(a.threads)
        kp, _ = kvasir(p512, 1, a.threads)
        _, kd = kvasir(p32, 129, a.threads)
        lp = llama_prefill(llm, p512)
        ld = machine.llama_decode(llm, p32, 129)
        rows.append((kp, lp, kd, ld, bw, bw_cpu))
        print(f"run {r}: prefill kvasir {kp:8.1f} llama.cpp {lp:8.1f} tok/s | "
              f"decode kvasir {kd:7.1f} llama.cpp {ld:7.1f} tok/s | membw triad {bw:.2f} GB/s "
              f"(CPU time {bw_cpu:.2f}) | load {' '.join(machine.load())}", flush=True)
    best = lambda i: max(x[i] for x in rows)
    share = lambda i: wbytes * best(i) / (best(4) * 1e9)
    print(f"\nthreads={a.threads} llama-cpp-python {llama_cpp.__version__} (best of {a.repeat})")
    print(f"prefill 512: kvasir {best(0):.1f} tok/s, llama.cpp {best(1):.1f} tok/s, ratio {best(0)/best(1):.2f}")
    print(f"decode 128:  kvasir {best(2):.1f} tok/s, llama.cpp {best(3):.1f} tok/s, ratio {best(2)/best(3):.2f}")
    print(f"decode share of the memory bandwidth (weights {wbytes / 1e6:.1f} MB/token, "
          f"triad {best(4):.2f} GB/s best by wall clock, {best(5):.2f} by CPU time): "
          f"kvasir {share(2):.2f}, llama.cpp {share(3):.2f}")


if __name__ == "__main__":
    sys.exit(main())
