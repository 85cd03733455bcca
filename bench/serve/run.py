#!/usr/bin/env python3
"""bench/serve: kvasird next to llama.cpp's llama-server, the same model, the
same cores (taskset), the same thread count, and ONE light streaming client
for both (bench/peers/client.py: OpenAI /v1/completions, token-id prompts,
ignore_eos). Reported per run: output tok/s, TTFT and ITL p50/p99, and the
ratio Kvasir / llama.cpp (tok/s; for TTFT and ITL the ratio of times, so
below 1 is Kvasir faster).

  scripts/build && python3 bench/serve/run.py [--shape short-heavy] [--threads 2]
      [--cores 0,1] [--model PATH] [--concurrency 1,16] [--max-inflight N] [--quick]

Shapes (bench/peers/client.py, SHAPES):
  long-heavy:  1,024-token prompts, 64 out, 8 concurrent (32 requests);
  short-heavy: 128 in / 128 out at 1, 16 and 64 concurrent;
  bursty:      4 bursts of 16 requests (256 in / 128 out), 10 s apart.
  all:         the three in turn.
--concurrency: only the closed-loop runs at these concurrencies (on a
1B-class model at 2 cores the 64-concurrent run alone takes minutes).
--requests N / --max-tokens M: the closed-loop runs cut to N requests of M
output tokens (the 8B shape at 2 cores: one wave of 16 is minutes a server).
--quick: the same shapes cut to a few short requests (a smoke test that both
servers answer and are measured; not a figure).

The servers, one at a time, each warmed by one request before it is timed:
  llama-server -np C (C = the run's concurrency or burst size, so every
    request has a slot) -c C x (prompt + output + 64) -t T -tb T;
  kvasird: 2 CPU stages (the model's layers halved), each holding T
    threads that the stages share by need (the default plan's `threads = 0`
    on T cores: at most T compute at once, docs/ring.md "Cores shared by
    need"; `--split fixed`: T / 2 each, the figures before that option),
    max_rows >= C, 1 GiB of KV per stage, over TCP on 127.0.0.1, the
    plan's default max_inflight (one micro-batch for stages sharing the
    cores; --max-inflight 2: one per stage, the figures before that default).
The peers come from bench/peers/build; this script re-runs itself under
bench/peers/python. Printed first: the CPU model, the load, Kvasir's SIMD
level per kernel, what the peers were built from (bench/peers/build's
stamp: version, ISA flags, compiler) and llama-server's slots and context
(from its log; it logs no system_info at its default verbosity).
"""
import argparse
import contextlib
import http.client
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "forward"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "peers"))
import client  # noqa: E402
import machine  # noqa: E402

ROOT = machine.ROOT
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
BIN = os.environ.get("KVASIR_BIN", os.path.join(ROOT, "build", "bin"))

CONFIG = """
[model]
path = "{model}"
[plan]
max_rows = {rows}
max_tokens = 512
max_inflight = {inflight}
[[stages]]
layers = "0-{mid_1}"
device = "cpu"
threads = {threads}
[[stages]]
layers = "{mid}-{last}"
device = "cpu"
threads = {threads}
[kv]
block_size = 16
memory = "1GiB"
[server]
socket = "{sock}"
http = "127.0.0.1:{port}"
"""


def wait_http(port, proc, limit_s=300):
    """Until GET /health answers 200 (llama-server: the model is loaded)."""
    t = time.time()
    while time.time() - t < limit_s:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("llama-server did not become healthy")


@contextlib.contextmanager
def llama_server(peers, a, slots, ctx):
    log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)
    cmd = ["taskset", "-c", a.cores, os.path.join(peers, "llama-server"), "-m", a.model,
           "--host", "127.0.0.1", "--port", str(a.port + 1), "-np", str(slots), "-c", str(ctx),
           "-t", str(a.threads), "-tb", str(a.threads)]
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        try:
            wait_http(a.port + 1, p)
        except RuntimeError:
            sys.stderr.write(open(log.name, errors="replace").read()[-3000:])
            raise
        yield a.port + 1, log.name
    finally:
        p.terminate()
        p.wait()
        os.unlink(log.name)


def stage_threads(a):
    """Each stage's `threads`: all T, shared by need (what the default plan
    does on T cores), or T / 2 with --split fixed."""
    return max(1, a.threads // 2) if getattr(a, "split", "shared") == "fixed" else a.threads


def kvasird(a, rows):
    n = machine.block_count(a.model)
    cfg = CONFIG.format(model=a.model, rows=max(32, rows), mid_1=n // 2 - 1, mid=n // 2,
                        last=n - 1, threads=stage_threads(a), sock="{sock}", port=a.port,
                        inflight=getattr(a, "max_inflight", 0))  # bench/clients has none
    return machine.kvasird(BIN, cfg, wrap=["taskset", "-c", a.cores])


def measure(port, run, seed):
    p, m, c, r, b, n, g = run
    client.run("127.0.0.1", port, min(p, 32), 4, 1, 1, 0, 0, 0.0, seed=999)  # warm-up
    return client.summary(*client.run("127.0.0.1", port, p, m, c, r, b, n, g, seed=seed))


def line(name, s):
    err = f", {s['errors']} ERRORS (first: {s['first_error']})" if s["errors"] else ""
    return (f"  {name:9s} {s['tok_s']:8.1f} tok/s  TTFT p50 {s['ttft_p50']:8.1f} p99 "
            f"{s['ttft_p99']:8.1f} ms  ITL p50 {s['itl_p50']:7.1f} p99 {s['itl_p99']:7.1f} ms{err}")


def one_run(a, peers, run, k):
    p, m, c, r, b, n, g = run
    slots = c if r else n
    form = f"{c} concurrent, {r} requests" if r else f"{b} bursts of {n}, {g:g} s apart"
    print(f"{p} in / {m} out, {form}:", flush=True)
    with kvasird(a, slots):
        ks = measure(a.port, run, k)
    with llama_server(peers, a, slots, slots * (p + m + 64)) as (port, log):
        ls = measure(port, run, k)
        if k == 0:
            info = [x.split("load_model:")[1].strip() for x in open(log, errors="replace")
                    if "load_model:" in x and "n_slots" in x]
            print("  llama-server: " + ("; ".join(info) if info else "(no n_slots line in its log)"))
    print(line("kvasird", ks))
    print(line("llama.cpp", ls))
    ratio = lambda key: ks[key] / ls[key] if ls[key] else float("nan")
    print(f"  Kvasir / llama.cpp: tok/s {ratio('tok_s'):.2f}, TTFT p50 {ratio('ttft_p50'):.2f}, "
          f"ITL p50 {ratio('itl_p50'):.2f}, ITL p99 {ratio('itl_p99'):.2f}; "
          f"load {' '.join(machine.load())}", flush=True)
    return ks["errors"] + ls["errors"]


def cut(run, a):
    """A closed-loop run with --requests / --max-tokens applied (bursts as they are)."""
    p, m, c, r, b, n, g = run
    if not r:
        return run
    return (p, a.max_tokens or m, c, a.requests or r, b, n, g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="short-heavy", choices=list(client.SHAPES) + ["all"])
    ap.add_argument("--threads", type=int, default=2, help="threads each server computes with")
    ap.add_argument("--cores", default="0,1", help="taskset CPU list both servers run on")
    ap.add_argument("--split", default="shared", choices=["shared", "fixed"],
                    help="kvasird's stages: T threads each shared by need (the default plan), "
                         "or T / 2 each")
    ap.add_argument("--max-inflight", type=int, default=0,
                    help="kvasird's plan.max_inflight (0: the default, one micro-batch per stage "
                         "that computes at once: one for stages sharing the cores)")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--port", type=int, default=18180, help="kvasird's; llama-server's is +1")
    ap.add_argument("--concurrency", default="", help="only the closed-loop runs at these (comma-separated)")
    ap.add_argument("--requests", type=int, default=0, help="closed-loop runs: this many requests")
    ap.add_argument("--max-tokens", type=int, default=0, help="closed-loop runs: this many out")
    ap.add_argument("--quick", action="store_true", help="smoke test: a few short requests")
    a = ap.parse_args()
    only = {int(x) for x in a.concurrency.split(",") if x}
    peers = machine.peers()
    print(machine.describe(os.path.join(BIN, "kvasir-local")), flush=True)
    print(f"peers: {machine.peers_stamp(peers)}")
    print(f"model: {a.model}; cores {a.cores}, {a.threads} threads per server "
          f"(kvasird: {stage_threads(a)} a stage, {a.split})"
          + ("; QUICK: not a figure" if a.quick else ""), flush=True)
    shapes = list(client.SHAPES) if a.shape == "all" else [a.shape]
    errors, k = 0, 0
    for name in shapes:
        runs = [cut(r, a) for r in client.SHAPES[name] if not only or r[2] in only]
        print(f"\n== {name}")
        for run in (client.quick(runs) if a.quick else runs):
            errors += one_run(a, peers, run, k)
            k += 1
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
