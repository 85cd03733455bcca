#!/usr/bin/env python3
"""The prefix caching figures of docs/benchmarks.md: workloads that share
prefixes, each run against a kvasird with `kv.prefix_caching` on and one
with it off (the default model, 2 CPU stages sharing the cores: threads = 0,
the default; --threads N for N per stage), on and off
alternating so drift in a shared machine's load hits both alike:

  shared   64 requests, one 1,024-token system prompt + 32 own tokens each,
           32 output tokens, concurrency 8
  chat     8 conversations x 6 turns (64 user tokens per turn, 32 output
           tokens: each turn resends the conversation), concurrency 8
  n4       one request with n = 4 against four separate requests with the
           same 512-token prompt (sent together), 32 output tokens each

The no-sharing case, bench/policies' trace under continuous+chunked with
caching on and off alternating, stage and daemon CPU seconds beside the
throughput: `--only nosharing`. What a parallel-sampling choice's last
prompt block costs (copied on write): `--only partial`.

  python3 bench/prefix/run.py --bin build/bin [--out /tmp/kvasir-prefix] [--only shared,chat,n4]
  python3 bench/prefix/run.py --bin build/bin --only partial --repeat 5   # the last block's cost to the other choices
  python3 bench/prefix/run.py --bin build/bin --only nosharing --repeat 2

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
            for caching in ([False, True] if (repeat + a.on_first) % 2 == 0 else [True, False]):
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


def partial_block(a):
    """What a choice's last prompt block costs with copy-on-write.

    On a daemon with caching, alone, one after the other: n = 4 on a
    512-token prompt (block-aligned: choices 1-3 copy choice 0's last block
    and compute its last position; recomputing it would be 16 positions
    each) and on a 497-token one (the last token alone in its block: 1
    position each, nothing to copy), and n = 1 on both lengths (the 15
    extra prompt tokens of choice 0). Each prompt is fresh (its own prefix
    group). What the block costs the choices is (n4 at 512 - n4 at 497) -
    (n1 at 512 - n1 at 497): about 0 with the copy (before it, 0.55 s of
    4.97 s, docs/measurements/2026-12-01.md), in the stage processes' CPU seconds (utime
    + stime: on a shared machine wall time mostly measures the other jobs)
    and in wall seconds."""
    d = Daemon(a, True, "partial")
    stages = children(d.p.pid)
    times = {}
    try:
        g = 10
        for repeat in range(a.repeat):
            for n, length in [(4, 512), (4, 497), (1, 512), (1, 497)]:
                trace = os.path.join(a.out, f"partial-{n}-{length}-{repeat}.jsonl")
                write_trace(trace, [{"t": 0, "prompt_len": 0, "prefix_group": g,
                                     "prefix_len": length, "max_tokens": 8, "n": n}])
                g += 1
                cpu0 = cpu_seconds(stages)
                s = d.bench(["--trace", trace], trace.replace(".jsonl", ".json"))
                times.setdefault((n, length), []).append((cpu_seconds(stages) - cpu0, s["duration_s"]))
    finally:
        d.stop()
    med = lambda v, i: sorted(x[i] for x in v)[len(v) // 2]
    print("| request | stage CPU s (median of %d) | wall s (median) |" % a.repeat)
    print("|---|---|---|")
    for k in sorted(times):
        print(f"| n = {k[0]}, {k[1]} tokens | {med(times[k], 0):.3f} | {med(times[k], 1):.3f} |")
    for i, unit in [(0, "stage CPU"), (1, "wall")]:
        m = {k: med(v, i) for k, v in times.items()}
        cost = (m[(4, 512)] - m[(4, 497)]) - (m[(1, 512)] - m[(1, 497)])
        print(f"- the block-aligned prompt's extra cost to choices 1-3: {cost:.3f} s of {unit}, "
              f"{100 * cost / m[(4, 512)]:.1f}% of the n = 4 request's {m[(4, 512)]:.2f} s")


def no_sharing(a):
    """bench/policies' default trace (24 short, 3 long prompts, seed 1: no
    prefix shared) under continuous+chunked, caching off and on
    alternating: throughput, and the CPU seconds of the stage processes
    and of kvasird itself (the scheduler's lookups and hashing run there),
    which a loaded machine does not blur as it does wall time."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("policies", os.path.join(ROOT, "bench", "policies", "run.py"))
    pol = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pol)
    args = argparse.Namespace(seed=1, shorts=24, short_len=128, short_max=128, short_gap=0.05,
                              longs=3, long_len=1536, long_max=32, long_start=20.0, long_gap=5.0)
    trace = os.path.join(a.out, "policies-trace.jsonl")
    write_trace(trace, pol.make_trace(args))
    rows = {}
    for repeat in range(a.repeat):
        for caching in ([False, True] if repeat % 2 == 0 else [True, False]):
            tag = f"nosharing-{'on' if caching else 'off'}-{repeat}"
            print(f"== {tag}: {uptime()}", file=sys.stderr, flush=True)
            d = Daemon(a, caching, tag)
            stages = children(d.p.pid)
            try:
                c0, m0 = cpu_seconds(stages), cpu_seconds([d.p.pid])
                s = d.bench(["--trace", trace], os.path.join(a.out, tag + ".json"))
                rows.setdefault(caching, []).append(
                    (s["output_tok_s"], cpu_seconds(stages) - c0, cpu_seconds([d.p.pid]) - m0,
                     s.get("prefix_hit_rate"), uptime()))
            finally:
                d.stop()
    print("| caching | run | output tok/s | stage CPU s | kvasird CPU s | hit rate | load after |")
    print("|---|---|---|---|---|---|---|")
    for caching, rs in sorted(rows.items()):
        for i, r in enumerate(rs):
            print(f"| {'on' if caching else 'off'} | {i} | {r[0]:.2f} | {r[1]:.1f} | {r[2]:.2f} | {r[3]} | {r[4].split('average:')[1].strip()} |")
    if True in rows and False in rows:
        tot = lambda c, i: sum(r[i] for r in rows[c])
        print(f"\n- output tok/s on/off = {tot(True, 0) / tot(False, 0):.3f} (target within 2%), "
              f"stage CPU on/off = {tot(True, 1) / tot(False, 1):.3f}, kvasird CPU on/off = "
              f"{tot(True, 2) / tot(False, 2):.3f}")


def children(pid):
    """The stage processes of kvasird `pid`."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def cpu_seconds(pids):
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in pids:
        fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


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
    p.add_argument("--threads", type=int, default=0, help="threads per stage (0: the cores, shared)")
    p.add_argument("--kv", default="256MiB")
    p.add_argument("--repeat", type=int, default=1, help="runs per workload and setting")
    p.add_argument("--only", type=lambda s: s.split(","), default=None)
    p.add_argument("--on-first", type=int, default=0, choices=[0, 1],
                   help="1: the first repeat runs caching on before off")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    if a.only == ["partial"]:
        partial_block(a)
    elif a.only == ["nosharing"]:
        no_sharing(a)
    else:
        report(run(a))
    print(f"\n({time.time() - t0:.0f} s; raw JSON in {a.out})")


if __name__ == "__main__":
    main()
