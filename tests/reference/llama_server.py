"""The built llama-server (bench/peers/build) as a reference peer for the
scripts under tests/reference: started on a free loopback port, waited for
until /health answers, and asked over plain HTTP (no client library)."""
import json
import os
import socket
import subprocess
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, route, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{route}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def start_server(path, args):
    """llama-server on model `path` with extra `args`, 2 threads, one slot;
    returns (process, port) once it is healthy."""
    bindir = subprocess.run([os.path.join(ROOT, "bench", "peers", "build")], check=True,
                            capture_output=True, text=True).stdout.strip()
    port = free_port()
    proc = subprocess.Popen([os.path.join(bindir, "llama-server"), "-m", path, "-np", "1", "-t", "2",
                             "--port", str(port), "--no-warmup"] + list(args),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("llama-server did not come up")
