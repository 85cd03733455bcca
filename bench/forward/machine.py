"""The machine and the peer, for bench/forward and bench/serve.

- peer(): re-runs the calling script under the llama.cpp peer's venv
  (scripts/install-peer builds llama-cpp-python for this CPU with pinned
  options and checks a multi-token prompt first; docs/kernels.md).
- describe(): the CPU model, the load (uptime), Kvasir's SIMD level per kernel
  (kvasir-local --simd-info) — lines to print before the figures.
- membw(threads): the machine's bandwidth (build/bin/bench_membw).
- weight_bytes(model): bytes of weights one decode step reads.
- llama_load(...): a Llama plus what ggml says it used (system_info, the
  buffer types its weights were put in: CPU, CPU_REPACK, AMX).
- next_token(llm): greedy argmax over the last evaluated token's logits.
- llama_decode(llm, ids, n_gen): llama.cpp's greedy decode rate after `ids`.
- kvasird(bin, config): a daemon started from a config text (its "{sock}"
  filled in), ready; yields its socket, stopped on exit.
"""
import contextlib
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def peer():
    """Re-exec the running script under the peer's python (once)."""
    if os.environ.get("KVASIR_PEER"):
        return
    os.execv(os.path.join(ROOT, "scripts", "install-peer"),
             [os.path.join(ROOT, "scripts", "install-peer"), "--run",
              os.path.abspath(sys.argv[0])] + sys.argv[1:])


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def load():
    return open("/proc/loadavg").read().split()[:3]


def simd_info(local):
    """kvasir-local --simd-info: the level each quantised kernel runs at."""
    out = subprocess.run([local, "--simd-info"], capture_output=True, text=True)
    return out.stderr.strip()


def describe(local):
    return "\n".join([f"cpu: {cpu_model()} ({os.cpu_count()} cpus)",
                      "load average: " + " ".join(load()),
                      "kvasir " + simd_info(local).replace("\n", "\n  ")])


def membw(threads, binary=None):
    """(triad GB/s wall, triad GB/s CPU time, read GB/s wall) on `threads` threads."""
    binary = binary or os.path.join(os.path.dirname(os.environ.get(
        "KVASIR_LOCAL", os.path.join(ROOT, "build", "bin", "kvasir-local"))), "bench_membw")
    out = subprocess.run([binary, str(threads), "0", "4"], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"membw: threads=\d+ triad_gbs=([\d.]+) read_gbs=([\d.]+) "
                  r"triad_cpu_gbs=([\d.]+)", out)
    return float(m[1]), float(m[3]), float(m[2])


def weight_bytes(model):
    """Bytes read per decode step: every tensor, except the token embedding
    when the file has a separate output head (then only one of its rows is
    read). KV-cache reads (a few MB at these contexts) are left out."""
    import gguf
    r = gguf.GGUFReader(model)
    names = {t.name: int(t.n_bytes) for t in r.tensors}
    total = sum(names.values())
    if "output.weight" in names and "token_embd.weight" in names:
        total -= names["token_embd.weight"]
    return total


def llama_load(model, **kw):
    """A Llama and ggml's own account of it: (llm, system_info, buffer lines)."""
    import llama_cpp
    with tempfile.TemporaryFile(mode="w+b") as cap:
        saved = os.dup(2)
        os.dup2(cap.fileno(), 2)
        try:
            llm = llama_cpp.Llama(model_path=model, verbose=True, **kw)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        llama_cpp.llama.set_verbose(False)  # quiet from here on (its destructor logs too)
        llm.verbose = False
        cap.seek(0)
        log = cap.read().decode(errors="replace")
    buffers = sorted(set(m.group(0).strip() for m in
                         re.finditer(r"[\w_]+ model buffer size = +[\d.]+ MiB", log)))
    return llm, llama_cpp.llama_print_system_info().decode().strip(), buffers


def next_token(llm):
    """Greedy next token from the logits llama.cpp computed for the last
    evaluated token. (llm.scores holds them only with logits_all=True; with
    llama-cpp-python 0.3.36 its row is zeros otherwise.)"""
    import llama_cpp
    import numpy as np
    row = np.ctypeslib.as_array(llama_cpp.llama_get_logits(llm.ctx), shape=(llm.n_vocab(),))
    return int(np.argmax(row))


def llama_decode(llm, ids, n_gen):
    """Tokens/s of n_gen - 1 greedy decode steps after evaluating `ids`."""
    import time
    llm.reset()
    llm.eval(ids)
    tok = next_token(llm)
    t = time.perf_counter()
    for _ in range(n_gen - 1):
        llm.eval([tok])
        tok = next_token(llm)
    return (n_gen - 1) / (time.perf_counter() - t)


@contextlib.contextmanager
def kvasird(bin_dir, config):
    """Start kvasird from `config` (its "{sock}" replaced by a fresh socket
    path), wait until `kvasir status` says ready, yield the socket path."""
    d = tempfile.mkdtemp(prefix="kvasir-bench-")
    sock = os.path.join(d, "k.sock")
    cfg = os.path.join(d, "k.toml")
    with open(cfg, "w") as f:
        f.write(config.replace("{sock}", sock))
    p = subprocess.Popen([os.path.join(bin_dir, "kvasird"), "--config", cfg],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        subprocess.run([os.path.join(bin_dir, "kvasir"), "status", "--socket", sock, "--wait", "120"],
                       check=True, capture_output=True)
        yield sock
    finally:
        p.terminate()
        p.wait()
