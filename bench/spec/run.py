#!/usr/bin/env python3
"""bench/spec: speculative decoding against its own baseline, one run.

Starts kvasird once per configuration (`--configs none,ngram`: the
`[speculative]` table's `method`; "none" writes no table, so it runs on a
daemon that does not know speculation yet; `ngram:max_draft=4+ngram_max=3`
adds keys to that one configuration; `--set section.key=value` adds keys to
every configuration, `speculative.*` ones to every configuration but
"none") on the default 2-stage CPU plan (the model's layers halved, cores
shared), and streams a prompt set of bench/spec/prompts (`--set-name
a,b,c,d`) through /v1/chat/completions at each `--concurrency`, greedy
unless `--temperature`. Reported per configuration, set and concurrency:
output tok/s, TTFT p50, ITL p50/p99 (between chunks that carry output), the
ratio to "none" of the same run, and the prompts whose greedy text differs
from "none"'s. For set c (an agent loop re-sending its conversation) the
turns from the second on are reported again on their own. Speculative
counters of /kvasir/v1/stats and /metrics (any name with spec, draft or
accept) are reported as deltas over each run, with the mean accepted length
where the names allow. `--rounds N` (`--abba`: 2) runs every configuration
N times, the order reversed every other round; the pooled report
(pool.py) then gives ITL p50/p99 over every round's gaps and the ratios
to "none" with bootstrap intervals over requests, and whether the target
(ITL p99 <= 1.05x, tok/s >= 0.95x) is met, not met or unresolved.

The ceiling (ceiling.py): from "none"'s greedy outputs (token ids from the
stream's logprobs, prompt ids from /tokenize), what an ngram drafter
(ngram_max 4 down to ngram_min 2) would have had accepted at k = 1..8, the
batch-1 speedup the stages' cost models predict from it, and on the schema
set an estimate of grammar-forced drafts. The token ids go into the JSON;
--ceiling-from replays them without a daemon.

  python3 bench/spec/run.py [--bin build/bin] [--configs none,ngram]
      [--set-name a,b,c,d] [--concurrency 1,16] [--max-tokens 128] [--json PATH]
      [--rounds N | --abba] [--prompts N]
  python3 bench/spec/run.py --self-test     no daemon: the simulation and the sets
  python3 bench/spec/run.py --quick         smoke: 2 prompts a set, 16 tokens; not a figure
  python3 bench/spec/run.py --ceiling-from PATH [--ngram-max N --ngram-min N]

Printed first: the CPU model, the load, Kvasir's SIMD level per kernel; the
load again after each run (the machine may be shared).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "forward"))
import ceiling  # noqa: E402
import chat  # noqa: E402
import machine  # noqa: E402
import pool  # noqa: E402

ROOT = machine.ROOT
PROMPTS = os.path.join(HERE, "prompts")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
KS = list(range(1, 9))
COUNTER = re.compile(r"spec|draft|accept", re.I)

CONFIG = """[model]
path = "{model}"
[plan]
max_rows = {rows}
[[stages]]
layers = "0-{mid_1}"
device = "cpu"
threads = {threads}
[[stages]]
layers = "{mid}-{last}"
device = "cpu"
threads = {threads}
[server]
socket = "{sock}"
http = "127.0.0.1:{port}"
"""


def toml_value(v):
    if re.fullmatch(r"-?\d+(\.\d+)?|true|false", v) or v.startswith(("\"", "[", "{")):
        return v
    return json.dumps(v)


def config_text(a, name, extra):
    """The daemon's config: the base plan, then `section.key = value` sets
    grouped by table, the `[speculative]` one first when name != none."""
    n = a.layers
    text = CONFIG.format(model=a.model, rows=max(32, max(a.conc)), mid_1=n // 2 - 1, mid=n // 2,
                         last=n - 1, threads=a.threads, sock="{sock}", port=a.port)
    tables = {}
    if name != "none":
        tables["speculative"] = {"method": json.dumps(name)}
    for item in a.sets + extra:
        key, _, value = item.partition("=")
        section, _, k = key.strip().rpartition(".")
        if section == "speculative" and name == "none":
            continue
        tables.setdefault(section, {})[k] = toml_value(value.strip())
    for section, kv in tables.items():
        if f"[{section}]" in text:  # a table the base already has: add to it
            lines = "".join(f"{k} = {v}\n" for k, v in kv.items())
            text = text.replace(f"[{section}]\n", f"[{section}]\n{lines}", 1)
        else:
            text += f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items())
    return text


class Daemon:
    """kvasird from a config text; `refused` holds its log's tail when it
    exits (or never gets ready) instead of serving."""

    def __init__(self, a, text):
        self.dir = tempfile.mkdtemp(prefix="kvasir-spec-")
        self.sock = os.path.join(self.dir, "k.sock")
        self.cfg = os.path.join(self.dir, "k.toml")
        self.log_path = os.path.join(self.dir, "kvasird.log")
        self.refused = None
        with open(self.cfg, "w") as f:
            f.write(text.replace("{sock}", self.sock))
        wrap = ["taskset", "-c", a.cores] if a.cores else []
        self.log = open(self.log_path, "w")
        self.p = subprocess.Popen(wrap + [os.path.join(a.bin, "kvasird"), "--config", self.cfg],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        # Short waits in a loop, so a daemon that exits at load is reported
        # at once rather than after the whole ready timeout.
        deadline = time.time() + 180
        while True:
            r = subprocess.run([os.path.join(a.bin, "kvasir"), "status", "--socket", self.sock,
                                "--wait", "2"], capture_output=True, text=True)
            if r.returncode == 0 or self.p.poll() is not None or time.time() > deadline:
                break
        if r.returncode != 0 or self.p.poll() is not None:
            self.stop()
            tail = open(self.log_path, errors="replace").read()[-1500:]
            self.refused = tail.strip() or r.stderr.strip()

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            self.p.wait()
        self.log.close()


def load_set(name, quick, prompts=0):
    """A prompt set; its first 2 (quick) or `prompts` (0: all) requests."""
    with open(os.path.join(PROMPTS, f"{name}.jsonl")) as f:
        reqs = [json.loads(x) for x in f if x.strip()]
    return reqs[:2] if quick else reqs[:prompts] if prompts else reqs


def flatten(obj, prefix=""):
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}{i}."))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out[prefix[:-1]] = obj
    return out


def counters(port):
    """Every numeric stat (and /metrics sample) whose name says spec, draft
    or accept: {name: value}."""
    out = {}
    try:
        stats = chat.get_text(port, "/kvasir/v1/stats")
        out.update({k: v for k, v in flatten(json.loads(stats or "{}")).items() if COUNTER.search(k)})
    except (OSError, ValueError):
        pass
    metrics = chat.get_text(port, "/metrics") or ""
    for line in metrics.splitlines():
        m = re.match(r"([^#\s][^\s]*)\s+([-\d.eE+]+)$", line)
        if m and COUNTER.search(m[1]):
            out["metrics:" + m[1]] = float(m[2])
    return out


def accepted_length(delta):
    """vLLM's mean acceptance length, 1 + accepted / drafts, from the
    deltas of counters named so (the stats' first, else /metrics'); None
    where there are none."""
    for stats in (True, False):
        acc = [v for k, v in delta.items() if k.startswith("metrics:") != stats
               and re.search(r"accepted(_tokens)?(_total)?(\{.*\})?$", k)]
        drafts = [v for k, v in delta.items() if k.startswith("metrics:") != stats
                  and re.search(r"(num_drafts|drafts|draft_steps)(_total)?(\{.*\})?$", k)]
        if acc and drafts and drafts[0]:
            return 1 + acc[0] / drafts[0]
    return None


def measure(a, port, reqs, conc):
    """One timed run of a set: a warm-up request first (its prefix differs
    from every prompt's after the first message), then the set (with
    --replay, the set once untimed under the same salt before it)."""
    # A salt per run: the prompts' KV cached by an earlier run (another
    # concurrency of the same set) must not shorten this one's prefills;
    # within a run the agent loop's turns still share their prefix.
    opts = {"max_tokens": a.max_tokens, "temperature": a.temperature, "seed": a.seed,
            "logprobs": a.logprobs, "salt": f"run-{time.time_ns()}"}
    chat.one(port, {"id": "warm", "messages": [{"role": "user", "content": "Say hi."}]},
             dict(opts, max_tokens=4))
    if a.replay:  # the same requests once untimed, under the same salt
        chat.run(port, reqs, conc, opts)
    before = counters(port)
    recs, wall = chat.run(port, reqs, conc, opts)
    after = counters(port)
    # Ratios and means over the daemon's life say nothing about this run:
    # the mean accepted length is recomputed from the counters' deltas.
    delta = {k: after[k] - before.get(k, 0) for k in after if not re.search(r"rate|mean", k)}
    s = chat.summary(recs, wall)
    s["spec_counters"] = {k: v for k, v in delta.items() if v}
    s["mean_accepted_length"] = accepted_length(delta)  # 1.00 when drafts were all rejected
    return s, recs


def widened(reqs, conc):
    """The set repeated until each of `conc` streams has a prompt: copy k
    (from 1) of a prompt gets the id "ID~k" and a cache salt of its own, so
    it neither reuses another copy's KV nor drafts from another copy's
    output (the suffix drafter draws on outputs of the same salt only)."""
    if conc <= len(reqs):
        return reqs
    out = list(reqs)
    for k in range(1, -(-conc // len(reqs))):
        out += [dict(q, id=f"{q['id']}~{k}", salt=f"copy{k}") for q in reqs]
    return out


def later_turns(recs, reqs):
    """Set c from the second turn on: per-request tok/s (tokens / request
    time, summed over the turns), TTFT and ITL."""
    sub = [r for r, q in zip(recs, reqs) if q.get("turn", 1) >= 2 and not r["error"]]
    e2e = sum(r["e2e"] for r in sub)
    s = chat.summary(sub, e2e)
    return s


def token_ids(port, cache, piece):
    """The id of one generated token from its text (a single-token
    /tokenize); a text that is not one token (a split UTF-8 character)
    gets an id of its own that matches nothing in a prompt."""
    if piece not in cache:
        toks = chat.post_json(port, "/tokenize", {"prompt": piece, "add_special_tokens": False})["tokens"]
        cache[piece] = toks[0] if len(toks) == 1 else -1 - len(cache)
    return cache[piece]


def ceiling_pairs(port, reqs, recs):
    """[(prompt ids, output ids)] of the requests that answered, for the
    simulation; output ids from the logprobs' token texts, or (without
    logprobs) the text re-tokenized."""
    pairs, cache = [], {}
    for q, r in zip(reqs, recs):
        if r["error"]:
            continue
        body = {"messages": q["messages"]}
        if "tools" in q:
            body["tools"] = q["tools"]
        prompt = chat.post_json(port, "/tokenize", body)["tokens"]
        if r["pieces"]:
            out = [token_ids(port, cache, p) for p in r["pieces"]]
        else:
            out = chat.post_json(port, "/tokenize", {"prompt": r["text"], "add_special_tokens": False})["tokens"]
        pairs.append((prompt, out))
    return pairs


def stage_costs(port):
    """Each stage's cost model from /kvasir/v1/stats (docs/scheduler.md):
    busy ~ fixed + per_token * tokens + per_kctx * context / 1024 +
    per_sample * sampled rows."""
    try:
        stats = json.loads(chat.get_text(port, "/kvasir/v1/stats") or "{}")
    except (OSError, ValueError):
        return []
    return [st["cost"] for st in stats.get("stages", []) if "cost" in st]


def stage_kernels(port):
    """Each stage's kernel choices (`stages[].simd` in /kvasir/v1/stats,
    docs/kernels.md): two daemons whose greedy texts part may have chosen
    other numerics."""
    try:
        stats = json.loads(chat.get_text(port, "/kvasir/v1/stats") or "{}")
    except (OSError, ValueError):
        return []
    return [st.get("simd", "") for st in stats.get("stages", [])]


def predict(rows, costs, ctx, measured_ms=0.0):
    """Batch-1 speedup each k would give by the stages' own cost models: a
    step verifying 1 + d tokens (d the mean draft) at context ctx costs
    the sum over stages (one sequence crosses them in turn) of fixed +
    (1 + d) * (per_token + per_kctx * ctx / 1024 + per_sample), and yields
    tokens_per_step tokens. What the measured batch-1 step (ITL p50,
    `measured_ms`) has beyond the models' step (hand-offs, the bridge,
    streaming) is added as a fixed cost; without it the gain is
    understated."""
    def model(n):
        return sum(c["fixed_ms"] + n * (c["per_token_ms"] + c["per_kctx_ms"] * ctx / 1024
                                        + c.get("per_sample_ms", 0.0)) for c in costs)
    extra = max(0.0, measured_ms - model(1)) if measured_ms == measured_ms else 0.0  # NaN: none

    def step(n):
        return model(n) + extra
    for r in rows:
        d = r["proposed"] / r["steps"] if r["steps"] else 0.0
        r["predicted_speedup"] = r["tokens_per_step"] * step(1) / step(1 + d) if costs and step(1) else None
        r["step_ms"] = step(1)
    return rows


def line(name, s):
    err = f", {s['errors']} ERRORS (first: {s['first_error']})" if s["errors"] else ""
    acc = s.get("mean_accepted_length")
    acc = f", mean accepted length {acc:.2f}" if acc is not None else ""
    return (f"  {name:14s} {s['tok_s']:7.1f} tok/s  TTFT p50 {s['ttft_p50']:7.1f} ms  ITL p50 "
            f"{s['itl_p50']:6.1f} p99 {s['itl_p99']:7.1f} ms  ({s['tokens']} tokens){acc}{err}")


def print_ceiling(name, rows):
    print(f"  ceiling ({name}; from none's greedy outputs): k: tokens/step, mean accepted "
          "length (drafted steps), drafted-correctly fraction, acceptance rate")
    print("    " + "  ".join(f"k={r['k']}: {r['tokens_per_step']:.2f} {r['mean_accepted_length']:.2f} "
                             f"{r['accepted_fraction']:.2f} {r['acceptance_rate']:.2f}" for r in rows))
    if rows and rows[0].get("predicted_speedup"):
        print(f"    batch-1 speedup by the stages' cost models (step {rows[0]['step_ms']:.1f} ms): "
              + "  ".join(f"k={r['k']}: {r['predicted_speedup']:.2f}" for r in rows))


def mean_context(pairs):
    """The mean context a decode step attends over: prompt + half the output."""
    n = sum(len(o) for _, o in pairs)
    return sum(len(o) * (len(p) + len(o) / 2) for p, o in pairs) / n if n else 0.0


def run_ceiling(a, set_name, reqs, recs, out):
    """The ceiling of one set from "none"'s greedy outputs; the token ids
    are kept in the JSON (--ceiling-from replays them)."""
    pairs = ceiling_pairs(a.port, reqs, recs)
    ok = [(q, r) for q, r in zip(reqs, recs) if not r["error"]]
    out["token_ids"][set_name] = {q["id"]: {"prompt": p, "output": o, "pieces": r["pieces"]}
                                  for (q, r), (p, o) in zip(ok, pairs)}
    out["cost"] = stage_costs(a.port)
    ceilings(a, set_name, [q for q, _ in ok], out["token_ids"][set_name], out)


def ceilings(a, set_name, reqs, saved, out):
    """Print and keep in out["ceiling"] the ngram ceiling of a set (set c:
    also from the second turn on; a schema set: the forced-key estimate
    too). `saved`: id -> {"prompt", "output", "pieces"} of `reqs`."""
    pairs = [(saved[q["id"]]["prompt"], saved[q["id"]]["output"]) for q in reqs]
    step = out["ceiling_step_ms"].get(set_name, 0.0)
    groups = [(set_name, pairs)]
    if any(q.get("turn", 1) >= 2 for q in reqs):
        groups.append((f"{set_name} turns>=2", [p for p, q in zip(pairs, reqs) if q.get("turn", 1) >= 2]))
    for label, ps in groups:
        rows = ceiling.aggregate(ps, KS, a.ngram_max, a.ngram_min)
        out["ceiling"][label] = predict(rows, out["cost"], mean_context(ps), step)
        print_ceiling(label, rows)
    if not all("response_format" in q for q in reqs):
        return
    if not all(saved[q["id"]]["pieces"] for q in reqs):
        print("  (forced-key estimate needs the logprobs' token texts: skipped)")
        return
    forced, both = [], []
    for q, (p, o) in zip(reqs, pairs):
        keys = list(q["response_format"]["json_schema"]["schema"]["properties"])
        f = [[o[j] for j in d] for d in ceiling.forced_proposals(saved[q["id"]]["pieces"], keys, max(KS))]
        g = ceiling.proposals(p, o, a.ngram_max, a.ngram_min, max(KS))
        forced.append(f)
        both.append([x or y for x, y in zip(f, g)])
    for label, props in ((f"{set_name} forced", forced), (f"{set_name} forced+ngram", both)):
        rows = ceiling.aggregate(pairs, KS, props=props)
        out["ceiling"][label] = predict(rows, out["cost"], mean_context(pairs), step)
        print_ceiling(label, rows)


FIGURES = ("tok_s", "ttft_p50", "itl_p50", "itl_p99")


def round_record(s):
    """What the JSON keeps of one round: its figures, tokens, load, set c's
    later turns and every request's gaps (ms) for the pooled report."""
    r = {k: s[k] for k in FIGURES + ("tokens", "wall_s") if k in s}
    r.update({k: s[k] for k in ("load", "later_turns", "gaps") if k in s})
    return r


def merged(a, p, s):
    """Another round `s` of one configuration, set and concurrency joined to
    `p` (the rounds so far): the means of the rounds' figures (set c's later
    turns too), the counters and tokens summed, the first round's texts;
    each round's figures and gaps under "rounds" (pool.py pools them).
    Greedy text that changed between the rounds counts as an error: it is
    deterministic."""
    m = dict(p)
    m["rounds"] = p["rounds"] + [round_record(s)]
    for k in FIGURES:
        m[k] = sum(r[k] for r in m["rounds"]) / len(m["rounds"])
    lts = [r["later_turns"] for r in m["rounds"] if "later_turns" in r]
    if lts and len(lts) == len(m["rounds"]):
        m["later_turns"] = dict(lts[0], **{k: sum(lt[k] for lt in lts) / len(lts) for k in FIGURES})
    m["tokens"] = p["tokens"] + s["tokens"]
    m["errors"] = p["errors"] + s["errors"]
    counts = dict(p["spec_counters"])
    for k, v in s["spec_counters"].items():
        counts[k] = counts.get(k, 0) + v
    m["spec_counters"] = counts
    m["mean_accepted_length"] = accepted_length(counts) if counts else p.get("mean_accepted_length")
    if a.temperature == 0:
        changed = [i for i, t in s["texts"].items() if p["texts"].get(i) != t]
        if changed:
            print(f"  round {len(m['rounds'])}'s greedy text differs from the first's on {len(changed)}: "
                  f"{', '.join(changed)}")
            m["errors"] += len(changed)
            m.setdefault("first_error", f"greedy text changed between rounds: {changed[0]}")
    return m


def round_order(configs, rounds):
    """Each round runs every configuration, the order reversed every other
    round (rounds 2: ABBA; 4: AB BA AB BA): the daemon that runs first was
    up to ~5% faster, whichever it was."""
    return [c for r in range(rounds) for c in (configs if r % 2 == 0 else configs[::-1])]


def run_config(a, label, method, extra, out):
    """Start kvasird with one configuration (`method` plus the speculative
    keys `extra`) and run every set and concurrency on it; fills
    out["configs"][label] (and the ceiling, from "none")."""
    text = config_text(a, method, extra)
    res = out["configs"].setdefault(label, {"config": text, "refused": None, "runs": {}})
    print(f"\n== configuration {label}", flush=True)
    d = Daemon(a, text)
    if d.refused:
        res["refused"] = d.refused
        print(f"  REFUSED: kvasird did not start with this configuration (does {a.bin}/kvasird know "
              f"the [speculative] table?). Its log ends:\n    " + d.refused.replace("\n", "\n    "))
        return
    try:
        for set_name in a.set_names:
            reqs = load_set(set_name, a.quick, a.prompts)
            for conc in a.conc:
                run_reqs = widened(reqs, conc)
                s, recs = measure(a, a.port, run_reqs, conc)
                s["load"] = machine.load()
                s["texts"] = {r["id"]: r["text"] for r in recs}
                s["gaps"] = {r["id"]: [round(g * 1e3, 3) for g in r["gaps"]] for r in recs if not r["error"]}
                print(line(f"{set_name} @{conc}", s) + f"  load {' '.join(s['load'])}", flush=True)
                if set_name == "c":
                    s["later_turns"] = later_turns(recs, run_reqs)
                    print(line("c turns>=2", s["later_turns"]) + " (per-request tok/s)")
                if s["spec_counters"]:
                    print("    counters: " + ", ".join(f"{k} +{v:g}" for k, v in s["spec_counters"].items()))
                key = f"{set_name}@{conc}"
                if key in res["runs"]:
                    res["runs"][key] = merged(a, res["runs"][key], s)
                else:
                    res["runs"][key] = dict(s, rounds=[round_record(s)])
                    del res["runs"][key]["gaps"]
                if method == "none" and a.temperature == 0 and set_name not in out["ceiling"]:
                    out["ceiling_step_ms"][set_name] = s["itl_p50"] if conc == 1 else 0.0
                    run_ceiling(a, set_name, run_reqs, recs, out)
        res["kernels"] = stage_kernels(a.port)
        for i, k in enumerate(res["kernels"]):
            print(f"  stage {i} kernels: {k}")
    finally:
        d.stop()


def compare(a, out):
    """Ratios to "none" and greedy text differences, per set and concurrency."""
    base = out["configs"].get("none")
    if not base or base["refused"]:
        print("\n(no \"none\" run: no ratios)")
        return 0
    print("\n== ratios to none (tok/s; TTFT and ITL: time ratios, below 1 is faster)"
          + (f"; each figure the mean of {a.rounds} rounds" if a.rounds > 1 else ""))
    differ = 0
    for name, res in out["configs"].items():
        if name == "none" or res["refused"]:
            continue
        for key, s in res["runs"].items():
            b = base["runs"].get(key)
            if not b:
                continue
            r = lambda k, x=s, y=b: x[k] / y[k] if y[k] else float("nan")
            s["ratio"] = {k: r(k) for k in ("tok_s", "ttft_p50", "itl_p50", "itl_p99")}
            extra = ""
            if "later_turns" in s and "later_turns" in b:
                lt = s["later_turns"]["tok_s"] / b["later_turns"]["tok_s"] if b["later_turns"]["tok_s"] else 0
                s["ratio"]["later_turns_tok_s"] = lt
                extra = f", turns>=2 {lt:.2f}"
            diffs = [i for i, t in s["texts"].items() if b["texts"].get(i) != t]
            s["differs"] = diffs
            differ += len(diffs) if a.temperature == 0 else 0
            same = ("greedy text identical" if not diffs else
                    f"greedy text DIFFERS on {len(diffs)}: {', '.join(diffs)}") if a.temperature == 0 else ""
            print(f"  {name:8s} {key:6s} tok/s {s['ratio']['tok_s']:.2f}{extra}, TTFT p50 "
                  f"{s['ratio']['ttft_p50']:.2f}, ITL p50 {s['ratio']['itl_p50']:.2f} "
                  f"p99 {s['ratio']['itl_p99']:.2f}; {same}")
    pooled_report(base, out)
    return differ


def pooled_report(base, out):
    """Per configuration, set and concurrency: ITL over every gap of every
    round, the ratios to "none" with bootstrap intervals (pool.py) and
    whether the target is met; kept in the JSON under "pooled"."""
    print(f"\n== pooled over the rounds: ratio [{pool.LEVEL:.0%} interval: ITL p99 by {pool.RESAMPLES} "
          "bootstrap draws of rounds, then requests, paired; tok/s by t over the rounds' log ratios]; "
          "none's figure in brackets")
    for name, res in out["configs"].items():
        if name == "none" or res["refused"]:
            continue
        for key, s in res["runs"].items():
            b = base["runs"].get(key)
            if b:
                s["pooled"] = pool.report(b["rounds"], s["rounds"])
                print(pool.line(name, key, s["pooled"]))


def parse_configs(spec):
    """"none,ngram:max_draft=4+ngram_max=3" -> [(label, method, [sets])]."""
    out = []
    for item in spec.split(","):
        method, _, keys = item.partition(":")
        sets = [f"speculative.{kv}" for kv in keys.split("+") if kv]
        out.append((item, method.strip(), sets))
    return out


def self_test():
    """No daemon: the simulation's answers, the sets' shape, the configs."""
    ceiling.self_test()
    for name in "abcd":
        reqs = load_set(name, False)
        assert len(reqs) >= 20, (name, len(reqs))
        assert len({r["id"] for r in reqs}) == len(reqs), name
        for r in reqs:
            assert r["messages"] and r["messages"][-1]["role"] in ("user", "tool"), r["id"]
            assert name != "d" or r["response_format"]["type"] == "json_schema", r["id"]
    assert any(r.get("turn", 0) >= 2 for r in load_set("c", False))
    a = argparse.Namespace(layers=30, model="m.gguf", conc=[1], threads=1, port=1,
                           sets=["speculative.max_draft=4", "kv.memory=512MiB"])
    none = config_text(a, "none", [])
    assert "[speculative]" not in none and 'memory = "512MiB"' in none, none
    ngram = config_text(a, "ngram", ["speculative.ngram_max=3"])
    assert '[speculative]\nmethod = "ngram"\nmax_draft = 4\nngram_max = 3\n' in ngram, ngram
    assert parse_configs("none,ngram:max_draft=2") == [
        ("none", "none", []), ("ngram:max_draft=2", "ngram", ["speculative.max_draft=2"])]
    rows = predict([{"steps": 10, "proposed": 20, "tokens_per_step": 2.0}],
                   [{"fixed_ms": 3.0, "per_token_ms": 1.0, "per_kctx_ms": 0.0}] * 2, 0)
    assert abs(rows[0]["predicted_speedup"] - 2.0 * 8 / 12) < 1e-9, rows  # (3+1)*2 vs (3+3)*2
    rows = predict(rows, [{"fixed_ms": 3.0, "per_token_ms": 1.0, "per_kctx_ms": 0.0}] * 2, 0, 12.0)
    assert abs(rows[0]["predicted_speedup"] - 2.0 * 12 / 16) < 1e-9, rows  # 4 ms more a step
    assert accepted_length({"engine.speculative.drafts": 10, "engine.speculative.draft_tokens": 40,
                            "engine.speculative.accepted_tokens": 15,
                            "metrics:kvasir_spec_decode_num_drafts_total{method=\"ngram\"}": 10}) == 2.5
    assert accepted_length({"metrics:kvasir_spec_decode_num_drafts_total{method=\"ngram\"}": 4,
                            "metrics:kvasir_spec_decode_num_accepted_tokens_total{method=\"ngram\"}": 2}) == 1.5
    assert accepted_length({"plan.max_draft": 4}) is None
    assert accepted_length({"engine.speculative.drafts": 3, "engine.speculative.accepted_tokens": 0}) == 1.0
    assert round_order(["A", "B"], 2) == ["A", "B", "B", "A"]
    assert round_order(["A", "B"], 4) == ["A", "B", "B", "A", "A", "B", "B", "A"]
    assert round_order(["A", "B", "C"], 1) == ["A", "B", "C"]
    assert len(load_set("a", False, 5)) == 5 and len(load_set("a", True, 5)) == 2
    pool.self_test()
    print("bench/spec self-test: ok")
    return 0


def ceiling_from(a):
    """The ceilings again from a saved run's token ids, without a daemon."""
    run = json.load(open(a.ceiling_from))
    if not run.get("token_ids"):
        print(f"{a.ceiling_from} holds no token ids (a greedy run of \"none\" saves them)")
        return 1
    out = {"ceiling": {}, "cost": run.get("cost", []), "ceiling_step_ms": run.get("ceiling_step_ms", {})}
    runs = run.get("configs", {}).get("none", {}).get("runs", {})
    print(f"ngram {a.ngram_max}..{a.ngram_min}")
    for set_name, saved in run["token_ids"].items():
        if set_name not in out["ceiling_step_ms"] and f"{set_name}@1" in runs:
            out["ceiling_step_ms"][set_name] = runs[f"{set_name}@1"]["itl_p50"]
        reqs = [q for q in load_set(set_name, False) if q["id"] in saved]
        ceilings(a, set_name, reqs, saved, out)
    return 0


def main():
    # SIGTERM unwinds like Ctrl-C, so the daemon is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("KVASIR_BIN", os.path.join(ROOT, "build", "bin")),
                    help="folder of kvasird, kvasir and kvasir-local")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--layers", type=int, default=30, help="the model's layer count (halved into 2 stages)")
    ap.add_argument("--configs", default="none,ngram")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--set-name", default="a,b,c,d", help="prompt sets (bench/spec/prompts)")
    ap.add_argument("--concurrency", default="1", help="comma-separated")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--no-logprobs", dest="logprobs", action="store_false",
                    help="do not ask for logprobs (the ceiling then re-tokenizes the text)")
    ap.add_argument("--ngram-max", type=int, default=4)
    ap.add_argument("--ngram-min", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0,
                    help="threads per stage (0: every core, the stages sharing them by need: "
                         "the default plan)")
    ap.add_argument("--cores", default="", help="taskset CPU list (default: not pinned)")
    ap.add_argument("--port", type=int, default=18190)
    ap.add_argument("--json", default="/tmp/kvasir-spec/spec.json")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run every configuration N times, the order reversed every other round "
                         "(AB BA AB ...); every figure the mean of its rounds, and the pooled report "
                         "(ITL over every round's gaps, ratios with bootstrap intervals)")
    ap.add_argument("--abba", action="store_true",
                    help="--rounds 2: in order, then in reverse order (the daemon that runs first "
                         "was measured up to ~5%% faster at 16 concurrent: the order cancels)")
    ap.add_argument("--prompts", type=int, default=0, help="the first N prompts of each set (0: all)")
    ap.add_argument("--replay", action="store_true",
                    help="send each run's requests once untimed, then time them again under the same "
                         "cache salt: the suffix drafter finds every greedy output in its cache (every "
                         "draft right) and prefills hit the prefix cache; what a draft position costs, "
                         "not what a drafter finds")
    ap.add_argument("--quick", action="store_true", help="smoke test: 2 prompts a set, 16 tokens")
    ap.add_argument("--self-test", action="store_true", help="no daemon: check the simulation and sets")
    ap.add_argument("--ceiling-from", metavar="JSON",
                    help="no daemon: the ngram ceiling again from a run's saved token ids "
                         "(e.g. with other --ngram-max/--ngram-min)")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if a.ceiling_from:
        return ceiling_from(a)
    a.conc = [int(x) for x in a.concurrency.split(",")]
    a.rounds = 2 if a.abba else a.rounds
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    a.model = os.path.abspath(a.model)  # the daemon runs in a temporary folder
    a.set_names = a.set_name.split(",")
    if a.quick:
        a.max_tokens = min(a.max_tokens, 16)
    local = os.path.join(a.bin, "kvasir-local")
    head = machine.describe(local) if os.path.exists(local) else f"cpu: {machine.cpu_model()}"
    print(head + f"\nbin: {a.bin}; model: {a.model}; 2 CPU stages x {a.threads or 'all cores,'} thread(s), cores "
          f"{a.cores or 'shared, not pinned'}; max_tokens {a.max_tokens}, temperature {a.temperature:g}"
          + ("; QUICK: not a figure" if a.quick else ""), flush=True)
    out = {"machine": head, "args": {k: v for k, v in vars(a).items()}, "configs": {}, "ceiling": {}, "token_ids": {},
           "ceiling_ctx": {}, "ceiling_step_ms": {}, "cost": [],
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    configs = parse_configs(a.configs)
    for label, method, extra in round_order(configs, a.rounds):
        run_config(a, label, method, extra, out)
    differ = compare(a, out)
    out["load_after"] = machine.load()
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"\nload after: {' '.join(out['load_after'])}; JSON: {a.json}")
    refused = [n for n, r in out["configs"].items() if r["refused"]]
    errors = sum(s["errors"] for r in out["configs"].values() for s in r["runs"].values())
    return 1 if refused or errors or differ else 0


if __name__ == "__main__":
    sys.exit(main())
