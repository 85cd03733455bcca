#!/usr/bin/env python3
"""The scheduler figures of docs/scheduler.md: every policy on one mixed trace.

Generates a trace of short and long (>= 1,500-token) prompts, writes a
2-CPU-stage config of the default model, and runs
`kvasir bench --compare-policies` on it (one kvasird per policy, the same
trace each), then a run with a KV pool too small for the load. Prints the
figures as markdown with each scheduling goal checked, and `uptime` before and
after (the machine is shared; the load says how far to trust the figures).

  python3 bench/policies/run.py --bin build/bin [--out /tmp/kvasir-policies]

--trace-kind picks another trace (docs/scheduler.md, "Scheduling by time"):
long-heavy (half 1,600-token prompts, half 32, 48 generated, 12 at a time),
short-heavy (mostly 64-192-token prompts, a few 900-1,300, 16 at a time),
poisson-burst (Poisson arrivals with a burst, mixed lengths, open loop).
With --itl-check it first measures the ITL the same requests see when no
prefill runs (every prompt 32 tokens, same outputs and arrivals), then adds
a continuous+chunked run with scheduler.itl_target_ms at 3x that and checks
the time-budget goals. --runs replaces --policies with run specs
(POLICY[:section.key=value...], docs/cli.md).

Everything it writes (trace, configs, raw JSON) stays in --out.
"""
import argparse
import json
import os
import random
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POLICIES = ["naive", "static", "continuous", "continuous+chunked"]


def make_trace(a):
    """Shorts arrive in a burst at the start; longs land while they decode.

    Arrivals are front-loaded so every policy is saturated (throughput is the
    engine's, not the trace's); the long prompts arrive one by one from 20 s
    on, 5 s apart (the shorts' own prefill, 24 x ~136 tokens, takes 12-20 s
    on two CPU stages, longer under the whole-prefill policies), so
    whole-prompt prefills land in the middle of decodes, which is what
    chunked prefill exists to smooth out. Shorts are 128-144 prompt and
    128 output tokens (a chat turn); the earlier trace used 48-64 / 96 and
    longs at 1, 3, 5 s (--short-len 48 --short-max 96 --long-start 1 --long-gap 2).
    """
    rng = random.Random(a.seed)
    reqs = []
    for i in range(a.shorts):
        reqs.append({"t": round(i * a.short_gap, 3), "prompt_len": a.short_len + rng.randrange(0, 17),
                     "max_tokens": a.short_max})
    for i in range(a.longs):
        reqs.append({"t": round(a.long_start + i * a.long_gap, 3),
                     "prompt_len": a.long_len + rng.randrange(0, 65), "max_tokens": a.long_max})
    reqs.sort(key=lambda r: r["t"])
    return reqs


def make_kind_trace(a):
    """The traces of the time-budget goals (none of them tuned on)."""
    rng = random.Random(a.seed)
    reqs = []
    if a.trace_kind == "long-heavy":
        for i in range(24):
            reqs.append({"t": 0, "prompt_len": 1600 if i % 2 == 0 else 32, "max_tokens": 48})
    elif a.trace_kind == "short-heavy":
        for i in range(40):
            long = i % 7 == 5
            reqs.append({"t": 0, "prompt_len": rng.randrange(900, 1301) if long else rng.randrange(64, 193),
                         "max_tokens": 64})
    elif a.trace_kind == "poisson-burst":
        t = 0.0
        for i in range(30):
            t += rng.expovariate(0.4)
            reqs.append({"t": round(t, 3)})
        for i in range(10):
            reqs.append({"t": round(30 + 0.05 * i, 3)})
        reqs.sort(key=lambda r: r["t"])
        for r in reqs:
            r["prompt_len"] = max(16, min(1800, int(rng.lognormvariate(5.3, 1.0))))
            r["max_tokens"] = 48
    return reqs


def kind_concurrency(kind):
    return {"long-heavy": 12, "short-heavy": 16}.get(kind, 0)


def config(model, kv_memory, threads, chunk_size, batch_tokens, prefix_caching=None):
    sched = f"[scheduler]\nchunk_size = {chunk_size}\n" if chunk_size else ""
    caching = "" if prefix_caching is None else f"prefix_caching = {str(prefix_caching).lower()}\n"
    plan = f"[plan]\nmax_tokens = {batch_tokens}\n" if batch_tokens else ""
    return f"""{sched}{plan}[model]
path = "{model}"
[[stages]]
layers = "0-14"
device = "cpu"
threads = {threads}
[[stages]]
layers = "15-29"
device = "cpu"
threads = {threads}
[kv]
memory = "{kv_memory}"
{caching}[server]
socket = "unused.sock"
"""


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def bench(a, cfg, trace, policies, out_json, itl_target=0):
    cmd = [os.path.join(a.bin, "kvasir"), "bench", "--compare-policies", "--config", cfg,
           "--kvasird", os.path.join(a.bin, "kvasird"), "--policies", ",".join(policies),
           "--trace", trace, "--json", "--progress", "never"]
    if a.concurrency:
        cmd += ["--concurrency", str(a.concurrency)]
    if itl_target:
        cmd += ["--itl-target", f"{itl_target:.1f}"]
    print("$", " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    open(out_json, "w").write(r.stdout)
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
    return json.loads(r.stdout)["policies"] if r.stdout.strip() else {}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"), help="folder of kvasir and kvasird")
    p.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--out", default="/tmp/kvasir-policies")
    p.add_argument("--threads", type=int, default=1, help="threads per stage")
    p.add_argument("--shorts", type=int, default=24)
    p.add_argument("--short-len", type=int, default=128)
    p.add_argument("--short-max", type=int, default=128)
    p.add_argument("--short-gap", type=float, default=0.05, help="seconds between short arrivals")
    p.add_argument("--longs", type=int, default=3)
    p.add_argument("--long-len", type=int, default=1536)
    p.add_argument("--long-max", type=int, default=32)
    p.add_argument("--long-start", type=float, default=20.0)
    p.add_argument("--long-gap", type=float, default=5.0)
    p.add_argument("--kv", default="256MiB", help="kv.memory of the roomy runs")
    p.add_argument("--small-kv", default="23400KiB",
                   help="kv.memory of the too-small run: 130 blocks of 180 KiB, room for the longest request alone")
    p.add_argument("--chunk-size", type=int, default=0,
                   help="scheduler.chunk_size (0: the default, 512); only continuous+chunked uses it")
    p.add_argument("--batch-tokens", type=int, default=0,
                   help="plan.max_tokens, the token budget of one micro-batch (0: the default, 512); "
                        "on a loaded machine keep a batch under the stage watchdog's 10 s floor")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--prefix-caching", choices=["default", "on", "off"], default="default",
                   help="kv.prefix_caching (default: the daemon's, on except under static)")
    p.add_argument("--skip-small", action="store_true")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: print the figures from the JSON files already in --out")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--trace-kind", default="default",
                   choices=["default", "long-heavy", "short-heavy", "poisson-burst"])
    p.add_argument("--concurrency", type=int, default=-1,
                   help="requests outstanding at most (default: the trace kind's; 0 = open loop)")
    p.add_argument("--runs", default="", help="run specs POLICY[:section.key=value...], comma-separated")
    p.add_argument("--itl-check", action="store_true",
                   help="measure the no-prefill ITL, then add a run at 3x it as scheduler.itl_target_ms")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.concurrency < 0:
        a.concurrency = kind_concurrency(a.trace_kind)
    if a.runs:
        a.policies = a.runs
    if a.trace_kind != "default":
        return main_kind(a)

    trace = os.path.join(a.out, "trace.jsonl")
    reqs = make_trace(a)
    with open(trace, "w") as f:
        for r in reqs:
            f.write(json.dumps(r) + "\n")
    roomy = os.path.join(a.out, "roomy.toml")
    small = os.path.join(a.out, "small.toml")
    caching = None if a.prefix_caching == "default" else a.prefix_caching == "on"
    open(roomy, "w").write(config(a.model, a.kv, a.threads, a.chunk_size, a.batch_tokens, caching))
    open(small, "w").write(config(a.model, a.small_kv, a.threads, a.chunk_size, a.batch_tokens, caching))

    def load(path):
        try:
            return json.load(open(path))["policies"]
        except (OSError, ValueError, KeyError):
            return {}

    runs = {}
    if a.report_only:
        before = mid = after = "(not run now)"
        for pol in a.policies.split(","):
            runs.update(load(os.path.join(a.out, f"policy-{pol}.json")))
        small_run = load(os.path.join(a.out, "small.json"))
    else:
        before = uptime()
        # One invocation per policy, so each result is on disk as soon as it is in.
        for pol in a.policies.split(","):
            print(f"uptime before {pol}: {uptime()}", flush=True)
            runs.update(bench(a, roomy, trace, [pol], os.path.join(a.out, f"policy-{pol}.json")))
        mid = uptime()
        small_run = {} if a.skip_small else bench(a, small, trace, ["continuous+chunked"],
                                                  os.path.join(a.out, "small.json"))
        after = uptime()

    n_prompt = sum(r["prompt_len"] for r in reqs)
    print(f"trace: {a.shorts} short prompts ({a.short_len}-{a.short_len + 16} tokens, {a.short_max} "
          f"generated) and {a.longs} long ({a.long_len}-{a.long_len + 64} tokens, {a.long_max} "
          f"generated); {n_prompt} prompt tokens; 2 CPU stages x {a.threads} thread(s); "
          f"chunk_size {a.chunk_size or 'default (512)'}")
    print(f"uptime before: {before}\nuptime between: {mid}\nuptime after: {after}\n")
    rows = [("output tok/s", lambda s: f"{s['output_tok_s']:.1f}"),
            ("total tok/s", lambda s: f"{s['total_tok_s']:.1f}"),
            ("requests/s", lambda s: f"{s['requests_per_s']:.3f}"),
            ("TTFT p50 / p99 ms", lambda s: f"{s['ttft_ms']['p50']:.0f} / {s['ttft_ms']['p99']:.0f}"),
            ("ITL p50 / p99 ms", lambda s: f"{s['itl_ms']['p50']:.0f} / {s['itl_ms']['p99']:.0f}"),
            ("E2E p50 / p99 ms", lambda s: f"{s['e2e_ms']['p50']:.0f} / {s['e2e_ms']['p99']:.0f}"),
            ("KV waste", lambda s: "n/a" if s["kv_waste"] is None else f"{100 * s['kv_waste']:.2f}%"),
            ("preemptions", lambda s: str(s["preemptions"])),
            ("completed / failed", lambda s: f"{s['completed']} / {s['failed']}")]
    names = [n for n in a.policies.split(",") if n in runs]
    print("| | " + " | ".join(f"`{n}`" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for label, f in rows:
        cells = []
        for n in names:
            s = runs[n]
            cells.append(f(s) if "error" not in s else "error")
        print(f"| {label} | " + " | ".join(cells) + " |")

    def get(n, k):
        s = runs.get(n, {})
        return None if "error" in s or not s else s[k] if not isinstance(k, tuple) else s[k[0]][k[1]]

    print()
    c = "continuous+chunked"
    if get(c, "output_tok_s") and get("naive", "output_tok_s"):
        r = get(c, "output_tok_s") / get("naive", "output_tok_s")
        print(f"- output tok/s chunked / naive = {r:.2f} (goal >= 2): {'met' if r >= 2 else 'NOT met'}")
    if get(c, "output_tok_s") and get("static", "output_tok_s"):
        r = get(c, "output_tok_s") / get("static", "output_tok_s")
        print(f"- output tok/s chunked / static = {r:.2f} (goal >= 1): {'met' if r >= 1 else 'NOT met'}")
    if get(c, ("itl_ms", "p99")) and get("continuous", ("itl_ms", "p99")):
        r = get(c, ("itl_ms", "p99")) / get("continuous", ("itl_ms", "p99"))
        print(f"- ITL p99 chunked / continuous = {r:.2f} (goal <= 0.5): {'met' if r <= 0.5 else 'NOT met'}")
    w = get(c, "kv_waste")
    if w is not None:
        print(f"- KV waste, chunked, over {runs[c]['kv_waste_samples']} samples = {100 * w:.2f}% "
              f"(goal < 4%): {'met' if w < 0.04 else 'NOT met'}")
    if small_run:
        s = small_run.get(c, {})
        if "error" in s or not s:
            print(f"- small pool ({a.small_kv}): error {s.get('error')}")
        else:
            okk = s["completed"] == len(reqs) and s["failed"] == 0
            print(f"- small pool ({a.small_kv}), chunked: {s['completed']}/{len(reqs)} completed, "
                  f"{s['preemptions']} preemptions, output {s['output_tok_s']:.1f} tok/s: "
                  f"{'every request completed' if okk else 'NOT all completed'}")


def write_trace(path, reqs):
    with open(path, "w") as f:
        for r in reqs:
            f.write(json.dumps(r) + "\n")


def row_table(runs, names):
    rows = [("output tok/s", lambda s: f"{s['output_tok_s']:.1f}"),
            ("TTFT p50 / p99 ms", lambda s: f"{s['ttft_ms']['p50']:.0f} / {s['ttft_ms']['p99']:.0f}"),
            ("ITL p50 / p99 ms", lambda s: f"{s['itl_ms']['p50']:.0f} / {s['itl_ms']['p99']:.0f}"),
            ("ITL samples in target", lambda s: "-" if not s.get("goodput") or s["goodput"].get("itl_within_target") is None
             else f"{100 * s['goodput']['itl_within_target']:.1f}% <= {s['goodput']['itl_target_ms']:.0f} ms"),
            ("goodput (req)", lambda s: "-" if not s.get("goodput") else f"{100 * s['goodput']['fraction']:.0f}%"),
            ("KV waste", lambda s: "n/a" if s["kv_waste"] is None else f"{100 * s['kv_waste']:.2f}%"),
            ("preemptions", lambda s: str(s["preemptions"])),
            ("completed / failed", lambda s: f"{s['completed']} / {s['failed']}"),
            ("uptime before", lambda s: s.get("uptime", "?").split("load average:")[-1].strip())]
    print("| | " + " | ".join(f"`{n}`" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for label, f in rows:
        print(f"| {label} | " + " | ".join("error" if "error" in runs[n] else f(runs[n]) for n in names) + " |")


def run_each(a, cfg, trace, names, tag, itl_target=0):
    runs = {}
    for n in names:
        up = uptime()
        print(f"uptime before {n}: {up}", flush=True)
        safe = "".join(ch if ch.isalnum() else "_" for ch in n)
        got = bench(a, cfg, trace, [n], os.path.join(a.out, f"{tag}-{safe}.json"), itl_target)
        for k, v in got.items():
            v["uptime"] = up
            runs[k] = v
    return runs


def main_kind(a):
    """A time-budget trace: the runs, then the goals of docs/scheduler.md."""
    reqs = make_kind_trace(a)
    trace = os.path.join(a.out, "trace.jsonl")
    write_trace(trace, reqs)
    cfg = os.path.join(a.out, "roomy.toml")
    open(cfg, "w").write(config(a.model, a.kv, a.threads, a.chunk_size, a.batch_tokens))
    c = "continuous+chunked"
    names = a.policies.split(",") if a.runs or a.policies != ",".join(POLICIES) else \
        [c, f"{c}:scheduler.itl_target_ms=0", "continuous", "naive"]
    target = 0
    runs = {}
    if a.itl_check:
        # The ITL the same requests see when no prefill runs: the median gap
        # of the same trace under the same policy without a target (prefill
        # steps are few among the decode steps, so the median gap has none).
        none = f"{c}:scheduler.itl_target_ms=0"
        runs.update(run_each(a, cfg, trace, [none], "run"))
        itl0 = runs[none]["itl_ms"]["p50"]
        target = 3 * itl0
        print(f"no-prefill ITL (p50 without a target) {itl0:.1f} ms -> itl_target_ms {target:.0f}", flush=True)
        names = [none] + [n for n in names if n != none] + [f"{c}:scheduler.itl_target_ms={target:.0f}"]
    runs.update(run_each(a, cfg, trace, [n for n in names if n not in runs], "run", target))
    print(f"\ntrace {a.trace_kind}: {len(reqs)} requests, {sum(r['prompt_len'] for r in reqs)} prompt "
          f"and {sum(r['max_tokens'] for r in reqs)} output tokens, concurrency {a.concurrency or 'open loop'}; "
          f"2 CPU stages x {a.threads} thread(s)\n")
    ok = [n for n in names if n in runs]
    row_table(runs, ok)
    report_kind(runs, names, c, target)


def report_kind(runs, names, c, target):
    def get(n, *k):
        s = runs.get(n)
        if not s or "error" in s:
            return None
        for x in k:
            s = s[x]
        return s
    print()
    none = f"{c}:scheduler.itl_target_ms=0"
    cp, kp = get(c, "itl_ms", "p99"), get("continuous", "itl_ms", "p99")
    if cp and kp:
        print(f"- ITL p99 {c} / continuous = {cp / kp:.2f} (goal <= 0.5): {'met' if cp / kp <= 0.5 else 'NOT met'}")
    best = max([(get(n, "output_tok_s") or 0, n) for n in names if n != c and n in runs] or [(0, "")])
    if get(c, "output_tok_s") and best[0]:
        r = get(c, "output_tok_s") / best[0]
        print(f"- output tok/s {c} / best other ({best[1]}) = {r:.2f} (goal >= 0.95): {'met' if r >= 0.95 else 'NOT met'}")
    if target:
        t = f"{c}:scheduler.itl_target_ms={target:.0f}"
        w = get(t, "goodput", "itl_within_target")
        if w is not None:
            print(f"- ITL samples within {target:.0f} ms at that target = {100 * w:.1f}% (goal >= 95%): {'met' if w >= 0.95 else 'NOT met'}")
        if get(t, "output_tok_s") and get(none, "output_tok_s"):
            r = get(t, "output_tok_s") / get(none, "output_tok_s")
            print(f"- output tok/s at that target / without a target = {r:.2f} (goal >= 0.8): {'met' if r >= 0.8 else 'NOT met'}")
    for n in names:
        if n in runs and "error" not in runs[n]:
            s = runs[n]
            w = s["kv_waste"]
            print(f"- {n}: {s['completed']}/{s['requests']} completed, KV waste "
                  f"{'n/a' if w is None else f'{100 * w:.2f}%'} (goal < 4%)")


if __name__ == "__main__":
    main()
