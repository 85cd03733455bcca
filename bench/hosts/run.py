#!/usr/bin/env python3
"""bench/hosts: the ring across two hosts against the same ring on one.

Two "hosts" are network namespaces joined through kvasir-linkshaper
(scripts/netns-hosts; docs/netns-hosts.md), which adds DELAY ms each way.
Both runs serve the same 2-stage plan of the model, each stage 1 thread on
a core of its own (stage 0 on CPU 0, stage 1 on CPU 1: two one-core hosts),
`max_inflight` 2, grammar off (no request here is constrained, and the
figures stay comparable with the runs before a remote tail had one):

  one host   kvasird in host 1 runs both stages (shared memory);
  two hosts  kvasird in host 1 runs stage 0 and joins `kvasird --worker`
             in host 2 (pinned to CPU 1), which runs stage 1; the link
             crosses the shaper.

The light client (bench/peers/client.py) runs in host 1 against the
leader's HTTP port: C concurrent streams of P-token prompts and M output
tokens, and one stream for the ITL overhead. Prints each run's output
tok/s, TTFT and ITL, the ratios, and the batch-1 ITL overhead beside the
round trip the shaper adds (2 x DELAY).

  sudo python3 bench/hosts/run.py [--bin build/bin] [--delay 0.2,2] [--bridge] [--spin-us 0] [--concurrency 16]
      [--requests 48] [--prompt 128] [--max-tokens 64] [--model PATH] [--paired 0]

--paired N: the batch-1 overhead measured instead with both instances up at
once (the one-host one on port PORT+1; each idle while the other serves),
N rounds of one request to each in turn, and the median of the rounds'
differences in ITL p50: a drift of the machine over the runs (the one-host
run's own ITL p50 moved 7.6-9.4 ms between sittings) then falls on both
sides of each difference. The 16-concurrent runs are not taken then.

--bridge adds a run with a kernel bridge in place of the shaper (nothing
added, no user-space hop): the shaper's own share of the link's cost apart.
--spin-us S sets [plan] spin_us in both runs: each stage, the bridge and
each relay poll S µs for their next hand-off (a relay's link frames
included) before they sleep.

Needs root (namespaces). The issue's targets: 2 hosts >= 0.9x one host at
0.2 ms per hop, >= 0.75x at 2 ms; batch-1 ITL overhead <= the added round
trip + 10%.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench", "forward"))
import machine  # noqa: E402

NETNS = os.path.join(ROOT, "scripts", "netns-hosts")
PREFIX = "kvbench"
PORT = 18480
WORKER = "10.77.0.2:7710"
CONFIG = """[model]
path = "{model}"
[plan]
max_rows = 64
max_tokens = 512
max_inflight = 2
{spin}[[stages]]
layers = "0-{mid_1}"
threads = 1
cpus = "0"
[[stages]]
layers = "{mid}-{last}"
threads = 1
cpus = "1"
{host}
[kv]
block_size = 16
memory = "1GiB"
[grammar]
enabled = false
{cluster}
[server]
socket = "{sock}"
http = "10.77.0.1:{port}"
"""

# Run in host 1: the client, one run, its summary as JSON on stdout.
CLIENT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import client
p, m, c, r = (int(x) for x in sys.argv[2:6])
client.run("10.77.0.1", int(sys.argv[6]), min(p, 32), 4, 1, 1, 0, 0, 0.0, seed=999)
print(json.dumps(client.summary(*client.run("10.77.0.1", int(sys.argv[6]), p, m, c, r, 0, 0, 0.0, seed=7))))
"""


def netns(*args, **kw):
    return subprocess.run([NETNS, *args], check=True, env={**os.environ, "KVASIR_NETNS_PREFIX": PREFIX},
                          **kw)


def popen_in(host, cmd, log):
    env = {**os.environ, "KVASIR_NETNS_PREFIX": PREFIX, "UCX_NET_DEVICES": "eth0"}
    return subprocess.Popen([NETNS, "exec", str(host), *cmd], stdout=log, stderr=subprocess.STDOUT,
                            env=env)


def wait_health(proc, log_path, port, limit_s=180):
    t = time.time()
    while time.time() - t < limit_s:
        if proc.poll() is not None:
            raise RuntimeError(f"kvasird exited: {open(log_path).read()[-2000:]}")
        r = subprocess.run([NETNS, "exec", "1", "python3", "-c",
                            f"import urllib.request as u; print(u.urlopen('http://10.77.0.1:{port}/health', timeout=3).status)"],
                           capture_output=True, text=True,
                           env={**os.environ, "KVASIR_NETNS_PREFIX": PREFIX})
        if r.stdout.strip() == "200":
            return
        time.sleep(0.5)
    raise RuntimeError(f"kvasird not healthy: {open(log_path).read()[-2000:]}")


def measure(a, c, r, port=PORT):
    out = subprocess.run([NETNS, "exec", "1", "python3", "-c", CLIENT, os.path.join(ROOT, "bench", "peers"),
                          str(a.prompt), str(a.max_tokens), str(c), str(r), str(port)],
                         check=True, capture_output=True, text=True,
                         env={**os.environ, "KVASIR_NETNS_PREFIX": PREFIX})
    return json.loads(out.stdout.strip().splitlines()[-1])


def serve(a, d, two_hosts, port=PORT):
    """Start the instance (and its worker); returns its processes once healthy."""
    n = machine.block_count(a.model)
    key = os.path.join(d, "cluster.key")
    with open(key, "wb") as f:
        f.write(os.urandom(32))
    os.chmod(key, 0o600)
    cfg = CONFIG.format(model=a.model, mid_1=n // 2 - 1, mid=n // 2, last=n - 1, port=port,
                        sock=os.path.join(d, "k.sock"),
                        spin=f"spin_us = {a.spin_us}\n" if a.spin_us else "",
                        host=f'host = "{WORKER}"' if two_hosts else "",
                        cluster=f'[cluster]\nkey = "{key}"' if two_hosts else "")
    path = os.path.join(d, "k.toml")
    with open(path, "w") as f:
        f.write(cfg)
    procs = []
    if two_hosts:
        wlog = open(os.path.join(d, "worker.log"), "w")
        procs.append(popen_in(2, ["taskset", "-c", "1", os.path.join(a.bin, "kvasird"), "--worker",
                                  "--listen", WORKER, "--cluster-key", key], wlog))
    llog_path = os.path.join(d, "leader.log")
    procs.append(popen_in(1, [os.path.join(a.bin, "kvasird"), "--config", path], open(llog_path, "w")))
    wait_health(procs[-1], llog_path, port)
    return procs


def stop(procs):
    for p in reversed(procs):
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def paired(a, delay):
    """Both instances up at once; a.paired rounds of one stream to each in turn."""
    with tempfile.TemporaryDirectory(prefix="kvasir-bench-hosts-") as d1, \
            tempfile.TemporaryDirectory(prefix="kvasir-bench-hosts-") as d2:
        procs = serve(a, d2, True)
        try:
            procs += serve(a, d1, False, PORT + 1)
            diffs, one, two = [], [], []
            for k in range(a.paired):
                order = [(PORT + 1, one), (PORT, two)]
                for port, out in (order if k % 2 == 0 else order[::-1]):
                    out.append(measure(a, 1, 2, port)["itl_p50"])
                diffs.append(two[-1] - one[-1])
        finally:
            stop(procs)
    med = statistics.median
    print(f"+{delay:g} ms each way (round trip +{2 * delay:g} ms), paired, {a.paired} rounds, load "
          f"{' '.join(machine.load())}:\n  1-stream ITL p50 one host {med(one):.2f} ms (rounds "
          f"{min(one):.2f}-{max(one):.2f}), two hosts {med(two):.2f} ({min(two):.2f}-{max(two):.2f}); "
          f"overhead, the median of the rounds' differences: {med(diffs):+.2f} ms "
          f"(quartiles {statistics.quantiles(diffs, n=4)[0]:+.2f} / "
          f"{statistics.quantiles(diffs, n=4)[2]:+.2f}) against the added round trip "
          f"{2 * delay:g} ms" + (f" ({med(diffs) / (2 * delay):.2f}x)" if delay > 0 else ""),
          flush=True)


def line(name, s):
    return (f"  {name:10s} {s['tok_s']:7.1f} tok/s  TTFT p50 {s['ttft_p50']:7.1f} ms  "
            f"ITL p50 {s['itl_p50']:6.2f} p99 {s['itl_p99']:7.2f} ms"
            + (f"  {s['errors']} ERRORS ({s['first_error']})" if s["errors"] else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--delay", default="0.2,2", help="ms added each way per hop, comma-separated")
    ap.add_argument("--bridge", action="store_true",
                    help="also a run with a kernel bridge in place of the shaper")
    ap.add_argument("--spin-us", type=int, default=0,
                    help="[plan] spin_us: stages, bridge and relays poll this long before sleeping")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--paired", type=int, default=0,
                    help="N > 0: only the batch-1 overhead, both instances up, N alternating rounds")
    a = ap.parse_args()
    machine.peers_python()  # gguf, for the model's layer count
    a.bin = os.path.abspath(a.bin)
    a.model = os.path.abspath(a.model)
    local = os.path.join(a.bin, "kvasir-local")
    print(machine.describe(local) if os.path.exists(local) else f"cpu: {machine.cpu_model()}",
          flush=True)
    print(f"{a.prompt} in / {a.max_tokens} out; {a.concurrency} concurrent x {a.requests} requests, "
          f"then 1 stream x 8; stage 0 on CPU 0, stage 1 on CPU 1, max_inflight 2", flush=True)
    settings = [("bridge", 0.0)] if a.bridge else []
    settings += [("shaper", float(x)) for x in a.delay.split(",") if x]
    for wire, delay in settings:
        up = ["--bridge"] if wire == "bridge" else ["--delay", str(delay)]
        netns("up", "2", *up, stdout=subprocess.DEVNULL)
        try:
            netns("exec", "1", "ping", "-c", "1", "-W", "2", "10.77.0.2", stdout=subprocess.DEVNULL)
            if a.paired > 0:
                paired(a, delay)
                continue
            res = {}
            for name, two in (("one host", False), ("two hosts", True)):
                with tempfile.TemporaryDirectory(prefix="kvasir-bench-hosts-") as d:
                    procs = serve(a, d, two)
                    try:
                        res[name] = (measure(a, a.concurrency, a.requests), measure(a, 1, 8))
                    finally:
                        stop(procs)
            what = ("a kernel bridge, no shaper" if wire == "bridge" else
                    f"+{delay:g} ms each way (round trip +{2 * delay:g} ms)")
            print(f"{what}, load {' '.join(machine.load())}:", flush=True)
            for name, (s16, s1) in res.items():
                print(line(name, s16) + f"   | 1 stream: ITL p50 {s1['itl_p50']:.2f} ms")
            (b16, b1), (h16, h1) = res["one host"], res["two hosts"]
            over = h1["itl_p50"] - b1["itl_p50"]
            vs = f" ({over / (2 * delay):.2f}x)" if delay > 0 else ""
            print(f"  two hosts / one host: tok/s {h16['tok_s'] / b16['tok_s']:.2f}x at "
                  f"{a.concurrency} concurrent; 1-stream ITL p50 +{over:.2f} ms against the added "
                  f"round trip {2 * delay:g} ms{vs}", flush=True)
        finally:
            netns("down", stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
