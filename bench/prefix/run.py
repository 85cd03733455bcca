#!/usr/bin/env python3
"""The prefix caching figures of docs/benchmarks.md: workloads that share
prefixes, each run against a kvasird with `kv.prefix_caching` on and one
with it off (the default model, 2 CPU stages x 1 thread), on and off
alternating so drift in a shared machine's load hits both alike:

  shared   64 requests, one 1,024-token system prompt + 32 own tokens each,
           32 output tokens, concurrency 8
  chat     8 conversations x 6 turns (64 user tokens per turn, 32 output
           tokens: each turn resends the conversation), concurrency 8
  n4       one request with n = 4 against four separate requests with the
           same 512-token prompt (sent together), 32 output tokens each

The no-sharing case (bench/policies' trace) is
`python3 bench/policies/run.py --policies continuous+chunked --skip-small
--prefix-caching on|off`.

  python3 bench/prefix/run.py --bin build/bin [--out /tmp/kvasir-prefix] [--only shared,chat,n4]

Prints each run's figures, the ratios against the targets, and `uptime`
around each run (the machine is shared; the load says how far to trust it).
Everything it writes (configs, traces, raw JSON, daemon logs) stays in --out.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def config(a, caching, sock):
    return f"""[model]
path = "{a.model}"
[[stages]]
layers = "0-14"
device = "cpu"
threads = {a.threads}
[[stages]]
layers = "15-29"
device = "cpu"
threads = {a.threads}
[kv]
memory = "{a.kv}"
prefix_caching = {str(caching).lower()}
[server]
socket = "{sock}"
"""


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


class Daemon:
    def __init__(self, a, caching, tag):
        self.a = a
        self.sock = os.path.join(a.out, f"{tag}.sock")
        cfg = os.path.join(a.out, f"{tag}.toml")
        open(cfg, "w").write(config(a, caching, self.sock))
        self.log = open(os.path.join(a.out, f"{tag}.log"), "w")
        self.p = subprocess.Popen([os.path.join(a.bin, "kvasird"), "--config", cfg],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        r = subprocess.run([os.path.join(a.bin, "kvasir"), "status", "--wait", "300",
                            "--socket", self.sock], capture_output=True, text=True)
        if r.returncode != 0:
            self.stop()
            sys.exit(f"kvasird ({tag}) did not start: see {self.log.name}")

    def bench(self, args, out_json):
        cmd = [os.path.join(self.a.bin, "kvasir"), "bench", "--socket", self.sock, "--json",
               "--progress", "never"] + args
        print("$", " ".join(cmd), file=sys.stderr, flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True)
        open(out_json, "w").write(r.stdout)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
        return json.loads(r.stdout) if r.stdout.strip() else {}

    def stop(self):
        self.p.terminate()
        self.p.wait()
        self.log.close()


def write_trace(path, lines):
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def workloads(a):
    n4 = os.path.join(a.out, "n4.jsonl")
    sep = os.path.join(a.out, "separate.jsonl")
    # The same 512 tokens for the four separate requests; another 512 for
    # the n = 4 one, so that the separate ones (run after it on the same
    # daemon) cannot reuse what it cached.
    same = {"t": 0, "prompt_len": 0, "prefix_group": 1, "prefix_len": 512, "max_tokens": 32}
    write_trace(n4, [dict(same, prefix_group=0, n=4)])
    write_trace(sep, [same] * 4)
    return {
        "shared": [["--requests", "64", "--concurrency", "8", "--shared-prefix-len", "1024",
                    "--prompt-len", "32", "--max-tokens", "32"]],
        "chat": [["--conversations", "8", "--turns", "6", "--prompt-len", "64",
                  "--max-tokens", "32", "--concurrency", "8"]],
        # n = 4 first, then the four separate requests, on each daemon.
        "n4": [["--trace", n4, "--concurrency", "1"], ["--trace", sep, "--concurrency", "4"]],
    }


def run(a):
    results = {}
    for name, benches in workloads(a).items():
        if a.only and name not in a.only:
            continue
        for repeat in range(a.repeat):
            for caching in ([False, True] if repeat % 2 == 0 else [True, False]):
                tag = f"{name}-{'on' if caching else 'off'}-{repeat}"
                print(f"== {tag}: {uptime()}", file=sys.stderr, flush=True)
                d = Daemon(a, caching, tag)
                try:
                    for k, args in enumerate(benches):
                        s = d.bench(args, os.path.join(a.out, f"{tag}-{k}.json"))
                        s["uptime"] = uptime()
                        results.setdefault((name, caching, k), []).append(s)
                finally:
                    d.stop()
    return results


def mean(runs, key, sub=None):
    v = [(r[key][sub] if sub else r[key]) for r in runs if r and r.get(key) is not None]
    return sum(v) / len(v) if v else float("nan")


def report(results):
    def get(name, caching, k=0):
        return results.get((name, caching, k), [])

    print(f"| workload | caching | duration s | output tok/s | TTFT mean ms | prefix hit rate | shared hit | completed |")
    print("|---|---|---|---|---|---|---|---|")
    for (name, caching, k), runs in sorted(results.items()):
        label = name + ("" if name != "n4" else (" (n=4)" if k == 0 else " (4 separate)"))
        print(f"| {label} | {'on' if caching else 'off'} | {mean(runs, 'duration_s'):.1f} | "
              f"{mean(runs, 'output_tok_s'):.1f} | {mean(runs, 'ttft_ms', 'mean'):.0f} | "
              f"{mean(runs, 'prefix_hit_rate'):.3f} | {mean(runs, 'shared_hit_rate'):.3f} | "
              f"{sum(r.get('completed', 0) for r in runs)}/{sum(r.get('requests', 0) for r in runs)} |")
    print()
    if get("shared", True) and get("shared", False):
        on, off = get("shared", True), get("shared", False)
        ttft = mean(off, "ttft_ms", "mean") / mean(on, "ttft_ms", "mean")
        tput = mean(on, "output_tok_s") / mean(off, "output_tok_s")
        hit = mean(on, "shared_hit_rate")
        print(f"- shared system prompt: mean TTFT off/on = {ttft:.2f}x (target >= 8), output tok/s "
              f"on/off = {tput:.2f}x (target >= 3), hit rate of the shared tokens {100 * hit:.1f}% "
              f"(target >= 95%)")
    if get("chat", True) and get("chat", False):
        r = mean(get("chat", False), "duration_s") / mean(get("chat", True), "duration_s")
        print(f"- multi-turn chat: total time off/on = {r:.2f}x (target >= 2)")
    if get("n4", True, 0) and get("n4", False, 1):
        n4 = mean(get("n4", True, 0), "duration_s")
        sep_off = mean(get("n4", False, 1), "duration_s")
        sep_on = mean(get("n4", True, 1), "duration_s")
        print(f"- n = 4 (caching on) vs four separate requests: {sep_off / n4:.2f}x faster than "
              f"four separate with caching off (target >= 1.8), {sep_on / n4:.2f}x against four "
              f"separate with caching on")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--out", default="/tmp/kvasir-prefix")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--kv", default="256MiB")
    p.add_argument("--repeat", type=int, default=1, help="runs per workload and setting")
    p.add_argument("--only", type=lambda s: s.split(","), default=None)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    results = run(a)
    report(results)
    print(f"\n({time.time() - t0:.0f} s; raw JSON in {a.out})")


if __name__ == "__main__":
    main()
