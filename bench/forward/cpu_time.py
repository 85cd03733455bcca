#!/usr/bin/env python3
"""bench/forward/cpu_time.py: the CPU time of one prefill, two builds of
kvasir-local compared on a machine others are loading.

  python3 bench/forward/cpu_time.py --base OLD/bin --new build/bin
      [--model FILE] [--prompt 128] [--rounds 5]

Wall-clock figures swing with whatever else runs on the cores; the CPU time
a single-threaded process spends is much steadier. Per build and round:
kvasir-local with one thread, a P-token prompt of random ids and one output
token, minus the same with a 1-token prompt (model load, one decode step),
user + system seconds of the child (getrusage). The two builds alternate
round by round; printed per round and as medians, with the new / base ratio.
"""
import argparse
import os
import random
import resource
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import machine  # noqa: E402


def cpu_seconds(local, model, ids):
    """User + system seconds of one kvasir-local run (one thread)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([local, "-m", model, "--ids", ",".join(map(str, ids)), "-n", "1", "-t", "1",
                    "--chunk", "512", "--ignore-eos", "-q"], check=True, capture_output=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="folder holding the base build's kvasir-local")
    ap.add_argument("--new", required=True, help="folder holding the new build's kvasir-local")
    ap.add_argument("--model", default=os.path.join(machine.ROOT, "models",
                                                    "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    rng = random.Random(1)
    ids = [rng.randrange(100, 40000) for _ in range(a.prompt)]
    print(f"{a.model}: prefill of {a.prompt} tokens, one thread, CPU ms; load "
          f"{' '.join(machine.load())}", flush=True)
    got = {"base": [], "new": []}
    for r in range(a.rounds):
        for name in ("base", "new"):
            local = os.path.join(getattr(a, name), "kvasir-local")
            ms = 1e3 * (cpu_seconds(local, a.model, ids) - cpu_seconds(local, a.model, ids[:1]))
            got[name].append(ms)
            print(f"  round {r + 1} {name}: {ms:.0f} ms", flush=True)
    b, n = median(got["base"]), median(got["new"])
    print(f"median base {b:.0f} ms, new {n:.0f} ms: new / base {n / b:.2f}; load "
          f"{' '.join(machine.load())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
