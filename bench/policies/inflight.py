#!/usr/bin/env python3
"""The in-flight gain with the even and the measured layer split.

Two micro-batches in flight on 2 CPU stages should approach 2x the
throughput of one; the even split of the default model (0-14 | 15-29)
caps the gain because the tail also computes the output head
(docs/scheduler.md, "Layer split by measured time"). For each split
(even, and `layers = "auto"`: kvasird measures the layers and balances
them at load) this runs the same closed-loop load with `plan.max_inflight`
1 and 2 through `kvasir bench --compare-policies`, the two runs back to
back, `--repeat` times in alternating order, and prints the gains
(same-run ratios: the machine is shared). Each gain is also split in two:
the stages' busy seconds at 2 over those at 1 (what the same requests cost
more in smaller micro-batches run side by side), and the gain times that
ratio (work / time at 2 in flight: how busy the ring kept its stages; its
ceiling on a load is what `batchlog.py --what-if` replays).

  python3 bench/policies/inflight.py --bin build/bin [--repeat 2] [--out DIR] [--set section.key=value]
      [--model PATH] [--splits even=0-14/15-29,auto=auto/auto,balanced=0-15/16-29] [--busy N]
      [--cpus 0/1]

`--busy N` runs N `nice -n 19` busy loops beside each pair (started before
the pair's daemons, ended after): a host with something always runnable,
where a stage that sleeps between hand-offs gets its core back late
(docs/ring.md, "Waits"). `--cpus A/B` pins the first stage to the CPUs A
and the second to B (`[[stages]] cpus`).

`--splits` names the splits to measure (NAME=FIRST/SECOND, comma-separated;
by default the --model's layers halved, and auto);
the balanced split of a load is the one `kvasir diagnose` proposes while it
runs on the even split (docs/scheduler.md).
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIG = """[model]
path = "{model}"
[plan]
max_rows = 32
max_tokens = 512
[[stages]]
layers = "{first}"
device = "cpu"
threads = 1{cpus0}
[[stages]]
layers = "{second}"
device = "cpu"
threads = 1{cpus1}
[kv]
memory = "256MiB"
[server]
socket = "unused.sock"
"""


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def block_count(model):
    """The model's layer count, read with gguf-py under bench/peers/python."""
    py = os.path.join(ROOT, "bench", "peers", "python")
    code = ("import sys, gguf; r = gguf.GGUFReader(sys.argv[1]); "
            "a = r.fields['general.architecture'].contents(); "
            "print(r.fields[a + '.block_count'].contents())")
    return int(subprocess.run([py, "--run", "-c", code, model], capture_output=True, text=True,
                              check=True).stdout.strip())


def start_busy(n):
    """n `nice -n 19 sh -c 'while :; do :; done'` loops, each its own process."""
    return [subprocess.Popen(["nice", "-n", "19", "sh", "-c", "while :; do :; done"])
            for _ in range(n)]


def stop_busy(procs):
    for p in procs:
        p.kill()
        p.wait()


def run(a, cfg, specs, out_json):
    cmd = [os.path.join(a.bin, "kvasir"), "bench", "--compare-policies", "--config", cfg,
           "--kvasird", os.path.join(a.bin, "kvasird"), "--policies", ",".join(specs),
           "--requests", str(a.requests), "--concurrency", str(a.concurrency),
           "--max-tokens", str(a.max_tokens), "--json", "--progress", "never"]
    print("$", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    open(out_json, "w").write(r.stdout)
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
        sys.exit(1)
    return json.loads(r.stdout)["policies"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--out", default="/tmp/kvasir-inflight")
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--concurrency", type=int, default=24)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--busy", type=int, default=0,
                   help="nice -n 19 busy loops to run beside each pair")
    p.add_argument("--cpus", default="", help="FIRST/SECOND: each stage's cpus (a CPU list)")
    p.add_argument("--set", default="", help="more settings for both runs, as section.key=value[:...]")
    p.add_argument("--splits", default="",
                   help="NAME=FIRST/SECOND[,...]: the layer splits to measure (default: the model's "
                        "layers halved as 'even', and 'auto')")
    a = p.parse_args()
    if not a.splits:
        n = block_count(a.model)
        a.splits = f"even=0-{n // 2 - 1}/{n // 2}-{n - 1},auto=auto/auto"
    os.makedirs(a.out, exist_ok=True)
    print(f"CPU: {cpu_model()}; {os.cpu_count()} cores")
    splits = {}
    for item in a.splits.split(","):
        name, _, ranges = item.partition("=")
        first, _, second = ranges.partition("/")
        if not name or not first or not second:
            p.error(f"--splits: '{item}' is not NAME=FIRST/SECOND")
        splits[name] = (first, second)
    one, two = "continuous+chunked:plan.max_inflight=1", "continuous+chunked:plan.max_inflight=2"
    if a.set:
        one, two = one + ":" + a.set, two + ":" + a.set
    gains = {k: [] for k in splits}
    work = {k: [] for k in splits}  # (gain, work ratio) per pair with stage figures
    for rep in range(a.repeat):
        for name, (f, s) in splits.items():
            cfg = os.path.join(a.out, f"{name}.toml")
            c0, _, c1 = a.cpus.partition("/")
            pins = [f'\ncpus = "{c}"' if c else "" for c in (c0, c1)]
            open(cfg, "w").write(CONFIG.format(model=a.model, first=f, second=s,
                                               cpus0=pins[0], cpus1=pins[1]))
            order = [one, two] if rep % 2 == 0 else [two, one]
            busy = start_busy(a.busy)
            try:
                print(f"{name} split, repeat {rep + 1}, {a.busy} busy loops: {uptime()}", flush=True)
                got = run(a, cfg, order, os.path.join(a.out, f"{name}-{rep}.json"))
            finally:
                stop_busy(busy)
            r1, r2 = got[one]["output_tok_s"], got[two]["output_tok_s"]
            gains[name].append(r2 / r1)
            print(f"  max_inflight 1: {r1:.2f} tok/s, 2: {r2:.2f} tok/s -> gain {r2 / r1:.2f}x "
                  f"({got[one]['completed']}+{got[two]['completed']} of {2 * a.requests} completed)",
                  flush=True)
            for k, label in ((one, "1"), (two, "2")):
                st = got[k].get("stages", [])
                print(f"    max_inflight {label}: layers "
                      + " | ".join(x["layers"] for x in st) + ", busy s "
                      + " | ".join(f"{x['busy_s']:.1f}" for x in st), flush=True)
            w1, w2 = (sum(x["busy_s"] for x in got[k].get("stages", [])) for k in (one, two))
            if w1 > 0 and w2 > 0:
                # gain = (work / time at 2) / (work at 2 / work at 1): how well the
                # ring keeps its stages busy, over what the same requests cost more
                # with two micro-batches (smaller ones, and both stages at once).
                work[name].append((r2 / r1, w2 / w1))
                print(f"    work at 2 / at 1: {w2 / w1:.3f}; ring's use of the stages: "
                      f"{r2 / r1 * w2 / w1:.2f}x", flush=True)
    print(f"after: {uptime()}")
    for name, g in gains.items():
        print(f"- {name} split: in-flight gain {', '.join(f'{x:.2f}x' for x in g)} "
              f"(mean {sum(g) / len(g):.2f}x; goal >= 1.85x with the balanced split)")
        if work[name]:  # the pairs whose daemons both reported their stages
            w = [x for _, x in work[name]]
            use = [gain * x for gain, x in work[name]]
            print(f"  work at 2 / at 1: {', '.join(f'{x:.3f}' for x in w)} (mean {sum(w) / len(w):.3f}); "
                  f"ring's use of the stages: mean {sum(use) / len(use):.2f}x")
    for name, (f, s) in splits.items():
        print(f"  {name}: layers {f} | {s}")


if __name__ == "__main__":
    main()
