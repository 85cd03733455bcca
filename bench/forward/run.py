#!/usr/bin/env python3
"""bench/forward: prefill and decode tokens/s of kvasir-local next to
llama.cpp's own llama-bench on the same model file and thread count,
measured in the same run, interleaved repetition by repetition (this machine
may be shared and noisy: the ratio is the figure to read), and decode as a
share of the machine's memory bandwidth.

  scripts/build && python3 bench/forward/run.py [--threads 2] [--repeat 3]
      [--model PATH] [--quick]

The peer is llama.cpp's llama-bench (bench/peers/build: built once for this
CPU with pinned ISA flags); the script re-runs itself under
bench/peers/python. The three figures, as llama-bench names them:
  pp512:        a 512-token prompt, tokens/s;
  tg128:        128 decode steps from an empty context (kvasir-local: after
                a 1-token prompt), tokens/s;
  tg128 @ d512: 128 decode steps after a 512-token context (llama-bench -d).
Prompts are random token ids on both sides (llama-bench's own; kvasir-local
--ids), greedy, end-of-sequence ignored. --quick: 64/8/64 tokens, one
repetition (a smoke test that both sides run; not a figure).

Bandwidth share = bytes of weights read per decode step x tg tokens/s / the
triad GB/s of bench/membw on the same number of threads (measured before
each repetition), each at its best of the repetitions. (The default model,
~97 MB, fits a large L3, so a share above 1 is possible;
bench/peers/make_model.py writes a 1.1 GB model that does not.)
Printed first: the CPU model, the load, the SIMD level of each of Kvasir's
kernels (kvasir-local --simd-info), what the peers were built from (bench/
peers/build's stamp: version, ISA flags, compiler) and what llama-bench
reports (its CPU, backends, weight repacking).
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402

ROOT = machine.ROOT
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
LOCAL = os.environ.get("KVASIR_LOCAL", os.path.join(ROOT, "build", "bin", "kvasir-local"))


def kvasir(model, ids, n_gen, threads, chunk=512):
    """(prefill tok/s, decode tok/s) of one kvasir-local run."""
    out = subprocess.run([LOCAL, "-m", model, "--ids", ",".join(map(str, ids)), "-n", str(n_gen),
                          "-t", str(threads), "--chunk", str(chunk), "--ignore-eos", "-q"],
                         capture_output=True, text=True, check=True)
    m = re.search(r"prefill (\d+) tokens in ([\d.]+) s .*decode (\d+) tokens in ([\d.]+) s", out.stderr)
    pre_n, pre_s, dec_n, dec_s = int(m[1]), float(m[2]), int(m[3]), float(m[4])
    return pre_n / pre_s, (dec_n / dec_s if dec_n else 0.0)


def llama_bench(bench, model, threads, args):
    """llama-bench's JSON records for one invocation (one repetition)."""
    out = subprocess.run([bench, "-m", model, "-t", str(threads), "-r", "1", "-o", "json"] + args,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def one_round(a, bench, ids):
    """(kvasir pp, llama pp, kvasir tg, llama tg, kvasir tg@d, llama tg@d)."""
    P, N, D = a.prompt, a.gen, a.depth
    kp, _ = kvasir(a.model, ids[:P], 1, a.threads)
    _, kt = kvasir(a.model, ids[:1], N + 1, a.threads)
    _, kd = kvasir(a.model, ids[:D], N + 1, a.threads)
    recs = llama_bench(bench, a.model, a.threads, ["-p", str(P), "-n", str(N)])
    recs += llama_bench(bench, a.model, a.threads, ["-p", "0", "-n", str(N), "-d", str(D)])
    find = lambda p, n, d: next(r["avg_ts"] for r in recs
                                if r["n_prompt"] == p and r["n_gen"] == n and r.get("n_depth", 0) == d)
    return kp, find(P, 0, 0), kt, find(0, N, 0), kd, find(0, N, D), recs[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--quick", action="store_true", help="smoke test: 64/8/64 tokens, 1 repetition")
    a = ap.parse_args()
    a.prompt, a.gen, a.depth = (64, 8, 64) if a.quick else (512, 128, 512)
    if a.quick:
        a.repeat = 1
    peers = machine.peers()
    bench = os.path.join(peers, "llama-bench")
    print(machine.describe(LOCAL), flush=True)
    print(f"peers: {machine.peers_stamp(peers)}")
    print(f"model: {a.model}")
    wbytes = machine.weight_bytes(a.model)
    print(f"weights read per decode step: {wbytes / 1e6:.1f} MB", flush=True)
    rnd = random.Random(0)
    ids = [rnd.randrange(100, 49000) for _ in range(max(a.prompt, a.depth))]
    rows = []
    for r in range(a.repeat):
        bw, bw_cpu, _ = machine.membw(a.threads)
        *row, info = one_round(a, bench, ids)
        if r == 0:
            print(f"llama-bench: cpu {info.get('cpu_info')}, backends {info.get('backends')}, "
                  f"repack {info.get('repack')}, flash_attn {info.get('flash_attn')}, "
                  f"type_k {info.get('type_k')}, n_batch {info.get('n_batch')}/{info.get('n_ubatch')}")
        rows.append(row + [bw, bw_cpu])
        print(f"run {r}: pp{a.prompt} kvasir {row[0]:8.1f} llama.cpp {row[1]:8.1f} | tg{a.gen} kvasir "
              f"{row[2]:7.1f} llama.cpp {row[3]:7.1f} | tg{a.gen}@d{a.depth} kvasir {row[4]:7.1f} "
              f"llama.cpp {row[5]:7.1f} tok/s | membw triad {bw:.2f} GB/s "
              f"| load {' '.join(machine.load())}", flush=True)
    best = lambda i: max(x[i] for x in rows)
    share = lambda i: wbytes * best(i) / (best(6) * 1e9)
    print(f"\nthreads={a.threads} llama-bench (best of {a.repeat}){' QUICK: not a figure' if a.quick else ''}")
    for name, i in ((f"pp{a.prompt}", 0), (f"tg{a.gen}", 2), (f"tg{a.gen} @ d{a.depth}", 4)):
        print(f"{name:14s} kvasir {best(i):8.1f} tok/s, llama.cpp {best(i + 1):8.1f} tok/s, "
              f"ratio {best(i) / best(i + 1):.2f}")
    print(f"decode share of the memory bandwidth (weights {wbytes / 1e6:.1f} MB/token, "
          f"triad {best(6):.2f} GB/s best by wall clock, {best(7):.2f} by CPU time): "
          f"tg{a.gen} kvasir {share(2):.2f}, llama.cpp {share(3):.2f}")


if __name__ == "__main__":
    sys.exit(main())
