#!/usr/bin/env python3
"""The structured-output figures of docs/structured-outputs.md, against one
kvasird (the default model, 2 CPU stages x --threads threads):

  throughput  --concurrency (16) chat requests at once, every one under the
              same JSON schema (compiled before timing starts), against the
              same requests unconstrained; output tokens per second of
              each, the two alternating --rounds times on the same daemon
              so that drift in a shared machine's load hits both alike. The
              schema forces at least 80 non-empty strings (160 tokens or
              more, over the default --max-tokens of 128), and the
              unconstrained requests set ignore_eos: every request of both
              kinds writes exactly --max-tokens tokens (the finish reasons
              printed say so).
  ttft        for each schema of tests/integration/structured_schemas.json:
              a request with that schema never seen before (a fresh
              "description" makes it a new spec: checked by the daemon,
              compiled by the tail stage) against the same request
              again (the tail's cache hit) and the same request
              unconstrained, one at a time, max_tokens 1 (so the time is
              the time to the first token); --ttft-repeat such triples per
              schema.

  python3 bench/structured/run.py --bin build/bin [--out /tmp/kvasir-structured]
          [--only throughput,ttft] [--rounds 3] [--concurrency 16] [--max-tokens 128]

Prints the CPU model, `uptime` before and after each part, every run's
figures, and the ratios. The compile time of each schema alone:
build/bin/bench_grammar_compile MODEL tests/integration/structured_schemas.json.
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# 80 to 96 non-empty strings: more than 128 tokens whatever the model writes.
LONG_SCHEMA = {"type": "object",
               "properties": {"items": {"type": "array", "minItems": 80, "maxItems": 96,
                                        "items": {"type": "string", "minLength": 1,
                                                  "maxLength": 12}}},
               "required": ["items"]}
PROMPT = [{"role": "system", "content": "You answer with JSON only."},
          {"role": "user", "content": "List as many animals as you can as JSON."}]


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path, timeout=600):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def post(sock, route, body):
    c = UnixHTTP(sock)
    try:
        c.request("POST", route, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        data = json.loads(r.read())
        if r.status != 200:
            raise RuntimeError(f"{route}: {r.status} {data}")
        return data
    finally:
        c.close()


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


class Daemon:
    def __init__(self, a):
        self.sock = os.path.join(a.out, "kvasir.sock")
        cfg = os.path.join(a.out, "kvasir.toml")
        stages = "".join(f'[[stages]]\nlayers = "{r}"\ndevice = "cpu"\nthreads = {a.threads}\n'
                         for r in ("0-14", "15-29"))
        open(cfg, "w").write(f'[model]\npath = "{a.model}"\n{stages}[kv]\nmemory = "256MiB"\n'
                             f'[server]\nsocket = "{self.sock}"\n')
        self.log = open(os.path.join(a.out, "kvasird.log"), "w")
        self.p = subprocess.Popen([os.path.join(a.bin, "kvasird"), "--config", cfg],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        r = subprocess.run([os.path.join(a.bin, "kvasir"), "status", "--wait", "300",
                            "--socket", self.sock], capture_output=True, text=True)
        if r.returncode != 0:
            self.stop()
            sys.exit(f"kvasird did not start: see {self.log.name}")

    def stop(self):
        self.p.terminate()
        self.p.wait()
        self.log.close()


def request(a, constrained, seed, schema=None, max_tokens=None):
    body = {"messages": PROMPT, "max_tokens": max_tokens or a.max_tokens, "temperature": 0.8,
            "seed": seed}
    if constrained:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "bench", "schema": schema or LONG_SCHEMA}}
    else:
        body["ignore_eos"] = True
    return body


def cpu_seconds(pid):
    """User + system CPU seconds of a process (all its threads)."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def processes(d):
    """kvasird and its stage processes, by name: daemon, stage0, stage1."""
    out = {"daemon": d.p.pid}
    kids = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(d.p.pid)],
                          capture_output=True, text=True).stdout.splitlines()
    for line in kids:
        pid, args = line.strip().split(None, 1)
        if "--stage" in args:
            out["stage" + args.split("--stage", 1)[1].split()[0]] = int(pid)
    return out


def one_batch(a, d, constrained, round_):
    """--concurrency requests at once: output tokens / wall seconds, and the
    CPU each process spent per output token (less sensitive than the wall
    time to what else the machine runs)."""
    bodies = [request(a, constrained, 1000 * round_ + i) for i in range(a.concurrency)]
    procs = processes(d)
    cpu0 = {k: cpu_seconds(p) for k, p in procs.items()}
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(max_workers=a.concurrency) as pool:
        outs = list(pool.map(lambda b: post(d.sock, "/v1/chat/completions", b), bodies))
    wall = time.monotonic() - t0
    tokens = sum(o["usage"]["completion_tokens"] for o in outs)
    cpu = {k: (cpu_seconds(p) - cpu0[k]) * 1e3 / tokens for k, p in procs.items()}
    lengths = {c["finish_reason"] for o in outs for c in o["choices"]}
    return {"tokens": tokens, "wall_s": wall, "tok_s": tokens / wall,
            "cpu_ms_per_token": cpu, "finish": sorted(lengths)}


def throughput(a, d):
    print(f"== throughput: {uptime()}", flush=True)
    post(d.sock, "/v1/chat/completions", request(a, True, 1, max_tokens=4))  # compile it once
    post(d.sock, "/v1/chat/completions", request(a, False, 1, max_tokens=4))
    runs = {False: [], True: []}
    for r in range(a.rounds):
        for constrained in ([False, True] if r % 2 == 0 else [True, False]):
            s = one_batch(a, d, constrained, r)
            runs[constrained].append(s)
            kind = "schema" if constrained else "free"
            cpu = ", ".join(f"{k} {v:.2f}" for k, v in sorted(s["cpu_ms_per_token"].items()))
            print(f"round {r} {kind:6}: {s['tokens']} tokens in {s['wall_s']:.2f} s = "
                  f"{s['tok_s']:.1f} tok/s; CPU ms per token: {cpu} (finish {s['finish']})",
                  flush=True)
    free = sum(s["tok_s"] for s in runs[False]) / a.rounds
    cons = sum(s["tok_s"] for s in runs[True]) / a.rounds
    pairs = [c["tok_s"] / f["tok_s"] for f, c in zip(runs[False], runs[True])]
    print(f"throughput at {a.concurrency} concurrent, {a.max_tokens} tokens each: "
          f"unconstrained {free:.1f} tok/s, JSON schema {cons:.1f} tok/s, "
          f"ratio {cons / free:.3f} (per round {', '.join(f'{p:.3f}' for p in pairs)}; "
          f"goal >= 0.9)", flush=True)
    for k in sorted(runs[False][0]["cpu_ms_per_token"]):
        f = statistics.median(x["cpu_ms_per_token"][k] for x in runs[False])
        c = statistics.median(x["cpu_ms_per_token"][k] for x in runs[True])
        print(f"CPU ms per output token, {k}: unconstrained {f:.2f}, JSON schema {c:.2f} "
              f"(median of rounds)", flush=True)
    print(f"== after throughput: {uptime()}", flush=True)
    return {"free": runs[False], "schema": runs[True], "ratio": cons / free}


def ttft(a, d):
    print(f"== ttft: {uptime()}", flush=True)
    schemas = json.load(open(os.path.join(ROOT, "tests/integration/structured_schemas.json")))
    free = []
    rows, nonce = [], time.time_ns()
    for s in schemas:
        new, cached = [], []
        for k in range(a.ttft_repeat):
            schema = dict(s["schema"], description=f"bench {nonce} {k}")
            # new, cached, then the same request unconstrained, one at a time
            for bucket, body in ((new, request(a, True, k, schema=schema, max_tokens=1)),
                                 (cached, request(a, True, k, schema=schema, max_tokens=1)),
                                 (free, request(a, False, k, max_tokens=1))):
                t0 = time.monotonic()
                post(d.sock, "/v1/chat/completions", body)
                bucket.append(time.monotonic() - t0)
        row = (s["name"], statistics.median(new) * 1e3, statistics.median(cached) * 1e3)
        rows.append(row)
        print(f"{row[0]:18} new {row[1]:7.1f} ms, cached {row[2]:6.1f} ms, "
              f"overhead {row[1] - row[2]:7.1f} ms", flush=True)
    over = [r[1] - r[2] for r in rows]
    print(f"ttft: unconstrained {statistics.median(free) * 1e3:.1f} ms; cached schema median "
          f"{statistics.median(r[2] for r in rows):.1f} ms; a new schema adds "
          f"{statistics.median(over):.1f} ms median, {max(over):.1f} ms at most "
          f"({a.ttft_repeat} triples per schema)", flush=True)
    print(f"== after ttft: {uptime()}", flush=True)
    return {"rows": rows, "free_ms": statistics.median(free) * 1e3}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "build/bin"))
    p.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--out", default="/tmp/kvasir-structured")
    p.add_argument("--only", default="throughput,ttft")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--ttft-repeat", type=int, default=3)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    print(f"cpu: {cpu_model()}, {os.cpu_count()} cpus; {a.threads} thread(s) per stage")
    d = Daemon(a)
    results = {}
    try:
        if "throughput" in a.only:
            results["throughput"] = throughput(a, d)
        if "ttft" in a.only:
            results["ttft"] = ttft(a, d)
    finally:
        d.stop()
    json.dump(results, open(os.path.join(a.out, "results.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
