"""The machine and the peers, for bench/forward and bench/serve.

- peers(): re-runs the calling script under bench/peers/python (numpy, gguf)
  and returns the folder of llama.cpp's llama-bench and llama-server
  (bench/peers/build: built once for this CPU with pinned ISA flags).
- peers_python(): only the re-run under bench/peers/python (for gguf).
- describe(): the CPU model, the load (uptime), Kvasir's SIMD level per kernel
  (kvasir-local --simd-info) — lines to print before the figures.
- membw(threads): the machine's bandwidth (build/bin/bench_membw).
- weight_bytes(model): bytes of weights one decode step reads.
- kvasird(bin, config, wrap): a daemon started from a config text (its
  "{sock}" filled in), under `wrap` (e.g. taskset), ready; yields its
  socket, stopped on exit.
- peers_stamp(bin): what the peers were built from (version, flags, compiler).
- block_count(model): the model's layer count (to split it into stages).
"""
import contextlib
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def peers_python():
    """Re-exec the running script under bench/peers/python (once): numpy
    and gguf, no llama.cpp."""
    if not os.environ.get("KVASIR_PEERS_PY"):
        py = os.path.join(ROOT, "bench", "peers", "python")
        os.execv(py, [py, "--run", os.path.abspath(sys.argv[0])] + sys.argv[1:])


def peers():
    """peers_python(); then build or find the llama.cpp peers (bench/peers/
    build) and return their bin folder. KVASIR_PEERS_ISA=avx2: both engines
    at AVX2 alone, what an AVX2-only machine runs (the peers built with
    `--isa avx2`, Kvasir pinned by KVASIR_SIMD=avx2, inherited by every
    process the bench starts)."""
    peers_python()
    cmd = [os.path.join(ROOT, "bench", "peers", "build")]
    isa = os.environ.get("KVASIR_PEERS_ISA", "")
    if isa:
        if isa != "avx2":
            raise SystemExit(f"KVASIR_PEERS_ISA={isa}: only avx2 is known")
        cmd += ["--isa", isa]
        os.environ.setdefault("KVASIR_SIMD", isa)
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout.strip()


def peers_stamp(bin_dir):
    """What the peers were built from: bench/peers/build's stamp (version,
    CMake arguments, compiler), one line."""
    with open(os.path.join(os.path.dirname(bin_dir), "stamp")) as f:
        return "; ".join(line.strip() for line in f)


def block_count(model):
    import gguf
    r = gguf.GGUFReader(model)
    arch = r.fields["general.architecture"].contents()
    return int(r.fields[f"{arch}.block_count"].contents())


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


@contextlib.contextmanager
def kvasird(bin_dir, config, wrap=()):
    """Start kvasird from `config` (its "{sock}" replaced by a fresh socket
    path) under the command prefix `wrap`, wait until `kvasir status` says
    ready, yield the socket path."""
    d = tempfile.mkdtemp(prefix="kvasir-bench-")
    sock = os.path.join(d, "k.sock")
    cfg = os.path.join(d, "k.toml")
    with open(cfg, "w") as f:
        f.write(config.replace("{sock}", sock))
    p = subprocess.Popen(list(wrap) + [os.path.join(bin_dir, "kvasird"), "--config", cfg],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        subprocess.run([os.path.join(bin_dir, "kvasir"), "status", "--socket", sock, "--wait", "120"],
                       check=True, capture_output=True)
        yield sock
    finally:
        p.terminate()
        p.wait()
