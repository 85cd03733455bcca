#!/usr/bin/env python3
"""What bounds single-stream decode on this CPU (docs/kernels.md, "What
bounds decode"): a sampling profile of kvasir-local's decode beside the
machine's two limits, its memory bandwidth (build/bin/bench_membw) and its
arithmetic peak per core (build/bin/bench_peak).

  python3 bench/forward/profile.py [--bin build/bin] [--threads 2] [--tokens 512]

It runs `perf record -e cpu-clock` on `kvasir-local -t THREADS -n TOKENS`
after an 8-token prompt (decode is >98% of the run), sorts the samples into
the kernels' families (each quantised matmul by weight type, attention, the
thread pool's waits and hand-offs, the rest), and prints per family its share
of the CPU time, CPU milliseconds per token and, for the matmuls, the bytes
of weights it reads per token over that time: the rate it streams weights
while it runs, next to what one thread can read (`bench_membw 1`, by CPU
time). A matmul streaming far below the read rate is bound by its
instructions, not by memory; the pool's share is time spent waiting for the
other thread at the end of each parallel kernel.

Needs perf (Debian: `apt-get install linux-perf`) and the `gguf` reader of
bench/peers/python, which it re-runs itself under, like bench/forward/run.py.
"""
import argparse
import collections
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402

FAMILIES = [  # (name, pattern on the symbol), first match wins
    ("matmul Q4_1", r"QKind\)2>"),
    ("matmul Q4_0", r"QKind\)1>"),
    ("matmul Q8_0", r"QKind\)0>"),
    ("matmul Q4_K", r"tile_q45<false"),
    ("matmul Q5_K", r"tile_q45<true"),
    ("matmul Q6_K", r"tile_q6<"),
    ("activation quantise", r"quantize_"),
    ("attention", r"run_item|paged_attention"),
    ("thread pool: waits, hand-offs", r"ThreadPool"),
]


def family(symbol):
    for name, pat in FAMILIES:
        if re.search(pat, symbol):
            return name
    return "the rest (norms, RoPE, SwiGLU, residuals, sampling, kernel)"


def peak(bin_dir, threads):
    out = subprocess.run([os.path.join(bin_dir, "bench_peak"), str(threads), "0.3"],
                         capture_output=True, text=True, check=True).stdout
    line = out.strip().splitlines()[-1]
    return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", line) if k != "threads"}


def membw_line(bin_dir, threads):
    out = subprocess.run([os.path.join(bin_dir, "bench_membw"), str(threads), "0", "4"],
                         capture_output=True, text=True, check=True).stdout
    return {k: float(v) for k, v in re.findall(r"(\w+_gbs)=([\d.]+)", out)}


def weights_by_type(model):
    """Bytes of each weight type one decode step reads (the tied Q8_0
    embedding is read whole, as the output head)."""
    import gguf
    r = gguf.GGUFReader(model)
    by = collections.Counter()
    names = {t.name for t in r.tensors}
    for t in r.tensors:
        if t.name == "token_embd.weight" and "output.weight" in names:
            continue  # one row per token, when the head is separate
        by[t.tensor_type.name] += int(t.n_bytes)
    return by


def main():
    machine.peers_python()
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(machine.ROOT, "build", "bin"))
    ap.add_argument("--model", default=os.path.join(machine.ROOT, "models",
                                                    "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=512)
    a = ap.parse_args()
    if not shutil.which("perf"):
        sys.exit("profile: perf is not installed (Debian: apt-get install linux-perf)")
    local = os.path.join(a.bin, "kvasir-local")
    print(machine.describe(local))
    bw1, bwT = membw_line(a.bin, 1), membw_line(a.bin, a.threads)
    pk = peak(a.bin, 1)
    print(f"memory: 1 thread read {bw1['read_cpu_gbs']:.2f} GB/s (CPU time), triad "
          f"{bw1['triad_gbs']:.2f}; {a.threads} threads read {bwT['read_gbs']:.2f}, triad "
          f"{bwT['triad_gbs']:.2f} GB/s (wall clock)")
    print("arithmetic, one core: " + ", ".join(
        f"{k} {v:.1f} G/s" for k, v in pk.items() if v > 0))

    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "perf.data")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "1999", "-o", data,
                            "--", local, "-m", a.model, "--ids", "1,2,3,4,5,6,7,8", "-n",
                            str(a.tokens), "-t", str(a.threads), "--ignore-eos", "-q"],
                           capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        m = re.search(r"decode (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", r.stderr)
        if r.returncode != 0 or not m:
            sys.exit(f"profile: kvasir-local under perf failed:\n{r.stderr[-2000:]}")
        report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "symbol",
                                 "--stdio", "-g", "none"], capture_output=True, text=True).stdout
    tokens, tok_s = int(m[1]), float(m[3])
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    cpu_per_token = cpu_s / tokens  # load and the 8-token prompt included (< 2%)
    shares = collections.Counter()
    for line in report.splitlines():
        mm = re.match(r"\s*([\d.]+)%\s+\[[.k]\]\s+(.*\S)", line)
        if mm:
            shares[family(mm[2])] += float(mm[1]) / 100
    by_type = weights_by_type(a.model)
    total_bytes = sum(by_type.values())
    type_of = {f"matmul {t}": t for t in ("Q4_1", "Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K")}

    print(f"\nkvasir-local -t {a.threads}: decode {tok_s:.1f} tok/s, {cpu_per_token * 1e3:.2f} CPU ms "
          f"per token over {a.threads} threads; {total_bytes / 1e6:.1f} MB of weights per token "
          f"= {total_bytes * tok_s / 1e9:.2f} GB/s, {total_bytes * tok_s / 1e9 / bwT['triad_gbs']:.2f} "
          f"of the {a.threads}-thread triad")
    print("\n| part | share of CPU time | CPU ms / token | weights MB / token | GB/s while it runs "
          "| vs 1-thread read |")
    print("|---|---|---|---|---|---|")
    for name, share in shares.most_common():
        ms = share * cpu_per_token * 1e3
        t = type_of.get(name)
        if t and by_type.get(t):
            rate = by_type[t] / (ms / 1e3) / 1e9
            print(f"| {name} | {100 * share:.1f}% | {ms:.2f} | {by_type[t] / 1e6:.1f} | {rate:.2f} "
                  f"| {rate / bw1['read_cpu_gbs']:.2f} |")
        else:
            print(f"| {name} | {100 * share:.1f}% | {ms:.2f} | | | |")
    mat = sum(s for n, s in shares.items() if n.startswith("matmul"))
    mat_bytes = sum(by_type.get(t, 0) for t in type_of.values())
    floor_ms = mat_bytes / (bw1["read_cpu_gbs"] * 1e9) * 1e3
    print(f"\nmatmuls: {100 * mat:.1f}% of the CPU time; reading their {mat_bytes / 1e6:.1f} MB at one "
          f"thread's read rate would take {floor_ms:.2f} CPU ms per token against "
          f"{mat * cpu_per_token * 1e3:.2f} measured.")


if __name__ == "__main__":
    main()
