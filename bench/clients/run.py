#!/usr/bin/env python3
"""bench/clients: the field's own clients, unmodified, against kvasird.

  python3 bench/clients/run.py [--only lm-eval|aiperf] [--quick]
      [--threads 2] [--cores 0,1] [--model PATH] [--out DIR]

lm-eval (EleutherAI's harness, `local-completions`) runs two tasks shipped
in bench/clients/data/ (no network): kvasir_mc, 40 four-way questions
scored by log-likelihood (160 `echo: true, logprobs: 1` requests on token
ids), and kvasir_gen, 40 one-word answers after a 4-shot prefix, greedy,
exact match. It runs them against kvasird, then against llama.cpp's
llama-server on the same model file, and prints both scores with their
standard errors, then how far apart the two servers were request by
request: the largest and median difference of a choice's log-likelihood,
the questions whose best choice differs, the generations that differ.
llama-server refuses `echo`, so its log-likelihood requests go through
bench/clients/echo_shim.py (one native call per prompt position; every
other request passes through unchanged).

aiperf (NVIDIA's benchmark client) then profiles kvasird's OpenAI
endpoints, /v1/completions and /v1/chat/completions, streamed: a few
synthetic requests, the token counts by the model's tokenizer (written
from the GGUF file by bench/clients/hf_tokenizer.py); its summary table
is printed as it prints it.

The servers: bench/serve/run.py's (kvasird on 2 CPU stages, the layers
halved, threads / 2 each; llama-server with one slot, -t threads), both
under `taskset -c CORES`, one at a time. The clients: bench/clients/python
(lm-eval and aiperf pinned, re-run under it). Artifacts (lm-eval's results
and samples, aiperf's exports, the logs) go to --out (default a fresh
temporary folder, printed). --quick: 8 documents a task, 4 requests an
endpoint (a smoke test, not a figure). Exit status 1 when a client failed.
"""
import argparse
import contextlib
import glob
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(HERE, "data")
TASKS = ("kvasir_mc", "kvasir_gen")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}


def clients_python():
    """Re-exec the running script under bench/clients/python (once)."""
    if not os.environ.get("KVASIR_CLIENTS_PY"):
        py = os.path.join(HERE, "python")
        os.execv(py, [py, "--run", os.path.abspath(sys.argv[0])] + sys.argv[1:])


def serve_module():
    """bench/serve/run.py, for its kvasird and llama-server starters."""
    spec = importlib.util.spec_from_file_location("serve_run",
                                                  os.path.join(ROOT, "bench", "serve", "run.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def tool(name):
    return os.path.join(os.path.dirname(sys.executable), name)


def get_json(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def wait_shim(port, proc, limit_s=30):
    t = time.time()
    while time.time() - t < limit_s:
        if proc.poll() is not None:
            raise RuntimeError(f"echo_shim exited with {proc.returncode}")
        try:
            get_json(f"http://127.0.0.1:{port}/health")
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("echo_shim did not answer")


@contextlib.contextmanager
def echo_shim(port, upstream_port):
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "echo_shim.py"), "--port",
                          str(port), "--upstream", f"http://127.0.0.1:{upstream_port}"])
    try:
        wait_shim(port, p)
        yield port
    finally:
        p.terminate()
        p.wait()


def run_logged(cmd, log, cwd=None, tail=40, offline=True):
    """Run cmd with its output in `log`; on failure print its tail and raise.
    offline: the Hugging Face libraries told so (no hub lookups)."""
    env = dict(os.environ, **(OFFLINE if offline else {}))
    t = time.time()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        lines = open(log, errors="replace").read().splitlines()
        sys.stderr.write("\n".join(lines[-tail:]) + "\n")
        raise RuntimeError(f"{os.path.basename(cmd[0])} exited with {rc} (log: {log})")
    return time.time() - t


def lm_eval(name, port, model_id, tok, out, limit):
    """lm-eval local-completions on both tasks against 127.0.0.1:port;
    returns (results, samples by task, wall seconds)."""
    args = ",".join([f"base_url=http://127.0.0.1:{port}/v1/completions", f"model={model_id}",
                     "tokenizer_backend=huggingface", f"tokenizer={tok}",
                     "tokenized_requests=True", "num_concurrent=1", "max_retries=1",
                     "max_length=2048"])
    dest = os.path.join(out, f"lm-eval-{name}")
    cmd = [tool("lm-eval"), "run", "--model", "local-completions", "--model_args", args,
           "--tasks", ",".join(TASKS), "--include_path", DATA, "--batch_size", "1",
           "--output_path", dest, "--log_samples"] + (["--limit", str(limit)] if limit else [])
    # cwd DATA: the task YAMLs name their jsonl files relative to it.
    wall = run_logged(cmd, dest + ".log", cwd=DATA)
    results = json.load(open(sorted(glob.glob(f"{dest}/**/results_*.json", recursive=True))[-1]))
    samples = {}
    for task in TASKS:
        path = sorted(glob.glob(f"{dest}/**/samples_{task}_*.jsonl", recursive=True))[-1]
        samples[task] = {s["doc_id"]: s for s in map(json.loads, open(path))}
    return results["results"], samples, wall


def task_texts():
    """The texts lm-eval tokenizes: each question with each of its choices,
    each generation prompt (the YAMLs' templates, written out here)."""
    shots = ("Q: What is the capital of Spain?\nA: Madrid\n\nQ: What is 2 plus 2?\nA: 4\n\n"
             "Q: What is the opposite of up?\nA: down\n\nQ: Which animal says moo?\nA: cow\n\n")
    texts = []
    for d in map(json.loads, open(os.path.join(DATA, "mc.jsonl"))):
        texts += [f"Question: {d['question']}\nAnswer: {c}" for c in d["choices"]]
    for d in map(json.loads, open(os.path.join(DATA, "gen.jsonl"))):
        texts.append(f"{shots}Q: {d['question']}\nA:")
    return texts


def tokenizer_check(tok, port, llama):
    """How many task texts tokenizer.json encodes as the server does
    (kvasird's /tokenize, or llama-server's)."""
    from transformers import AutoTokenizer
    t = AutoTokenizer.from_pretrained(tok)
    texts, same = task_texts(), 0
    for text in texts:
        body = {"content": text, "add_special": False} if llama else \
            {"prompt": text, "add_special_tokens": False}
        req = urllib.request.Request(f"http://127.0.0.1:{port}/tokenize",
                                     json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            same += json.load(r)["tokens"] == t(text, add_special_tokens=False).input_ids
    who = "llama-server" if llama else "kvasird"
    print(f"tokenizer.json and {who}'s /tokenize agree on {same} of {len(texts)} task texts",
          flush=True)
    return len(texts) - same


def score(res, task, metric):
    r = res[task]
    return r[f"{metric},none"], r.get(f"{metric}_stderr,none", float("nan"))


def compare(ks, ls):
    """Lines on how far apart the two servers were, request by request."""
    diffs, rank = [], 0
    mc_k, mc_l = ks["kvasir_mc"], ls["kvasir_mc"]
    for d in sorted(mc_k):
        a = [float(x[0]) for x in mc_k[d]["filtered_resps"]]
        b = [float(x[0]) for x in mc_l[d]["filtered_resps"]]
        diffs += [abs(x - y) for x, y in zip(a, b)]
        rank += a.index(max(a)) != b.index(max(b))
    gen_k, gen_l = ks["kvasir_gen"], ls["kvasir_gen"]
    differ = [d for d in sorted(gen_k) if gen_k[d]["filtered_resps"] != gen_l[d]["filtered_resps"]]
    lines = [f"kvasir_mc: {len(diffs)} choices, |log-likelihood kvasird - llama.cpp| max "
             f"{max(diffs):.4f}, median {statistics.median(diffs):.4f}; best choice differs "
             f"on {rank} of {len(mc_k)} questions",
             f"kvasir_gen: {len(differ)} of {len(gen_k)} generations differ"]
    for d in differ[:5]:
        lines.append(f"  doc {d}: kvasird {gen_k[d]['filtered_resps']!r}, "
                     f"llama.cpp {gen_l[d]['filtered_resps']!r}")
    return lines


def print_scores(kres, lres, kwall, lwall):
    print(f"\n{'task':11s} {'metric':12s} {'kvasird':>18s} {'llama.cpp':>18s}")
    for task, metric in (("kvasir_mc", "acc"), ("kvasir_mc", "acc_norm"),
                         ("kvasir_gen", "exact_match")):
        k, l = score(kres, task, metric), score(lres, task, metric)
        print(f"{task:11s} {metric:12s} {k[0]:9.4f} ± {k[1]:.4f} {l[0]:9.4f} ± {l[1]:.4f}")
    print(f"lm-eval wall: kvasird {kwall:.1f} s, llama.cpp {lwall:.1f} s (through echo_shim: "
          f"one call per prompt position)")


def aiperf(port, model_id, tok, out, requests):
    """aiperf profile on kvasird's two OpenAI endpoints; prints its summary."""
    errors = 0
    for endpoint in ("completions", "chat"):
        dest = os.path.join(out, f"aiperf-{endpoint}")
        cmd = [tool("aiperf"), "profile", "--model", model_id, "--url",
               f"http://127.0.0.1:{port}", "--endpoint-type", endpoint, "--streaming",
               "--tokenizer", tok, "--request-count", str(requests), "--concurrency", "2",
               "--isl", "64", "--isl-stddev", "0", "--osl", "32",
               "--extra-inputs", "ignore_eos:true", "--random-seed", "1", "--ui-type", "none",
               "--no-gpu-telemetry", "--workers-max", "2", "--artifact-dir", dest]
        # Chat: count the input as the server does, the template included.
        cmd += ["--apply-chat-template"] if endpoint == "chat" else []
        print(f"\n== aiperf profile, {endpoint}, {requests} requests at 2 concurrent, "
              "64 tokens in / 32 out, streamed", flush=True)
        try:
            # Not HF_HUB_OFFLINE: aiperf 0.13.0 then takes a tokenizer path for
            # a hub cache entry and refuses it (HFValidationError); online, a
            # local folder is loaded as it is, with no request.
            run_logged(cmd, dest + ".log", offline=False)
        except RuntimeError as e:
            print(f"aiperf FAILED: {e}")
            errors += 1
            continue
        print(summary_of(dest + ".log"))
        errors += request_errors(dest)
    return errors


def summary_of(log):
    """aiperf's main console table (LLM Metrics) and the lines after it."""
    lines = open(log, errors="replace").read().splitlines()
    start = next((i for i, x in enumerate(lines) if x.strip().endswith("| LLM Metrics")), None)
    return "\n".join(x for x in (lines[start:] if start is not None else lines[-40:]) if x.strip())


def request_errors(dest):
    """Failed requests in aiperf's JSON export (0 if it has none)."""
    for path in glob.glob(f"{dest}/**/*aiperf*.json", recursive=True):
        data = json.load(open(path))
        n = (data.get("error_request_count") or {}).get("avg", 0) if isinstance(data, dict) else 0
        if n:
            print(f"aiperf: {int(n)} failed requests ({path})")
            return int(n)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["lm-eval", "aiperf"])
    ap.add_argument("--threads", type=int, default=2, help="threads each server computes with")
    ap.add_argument("--cores", default="0,1", help="taskset CPU list both servers run on")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--port", type=int, default=18190,
                    help="kvasird's; llama-server's is +1, echo_shim's +2")
    ap.add_argument("--out", help="artifacts folder (default: a fresh temporary one)")
    ap.add_argument("--quick", action="store_true", help="smoke test: a few requests")
    a = ap.parse_args()
    clients_python()
    serve = serve_module()
    out = a.out or tempfile.mkdtemp(prefix="kvasir-clients-")
    os.makedirs(out, exist_ok=True)
    tok = os.path.join(out, "tokenizer")
    import hf_tokenizer
    hf_tokenizer.write(a.model, tok)
    print(f"model: {a.model}; cores {a.cores}, {a.threads} threads per server; artifacts {out}"
          + ("; QUICK: not a figure" if a.quick else ""), flush=True)
    limit = 8 if a.quick else None
    errors, kv = 0, None
    with serve.kvasird(a, 1):
        model_id = get_json(f"http://127.0.0.1:{a.port}/v1/models")["data"][0]["id"]
        errors += tokenizer_check(tok, a.port, False)
        if a.only != "aiperf":
            kv = guarded(lambda: lm_eval("kvasird", a.port, model_id, tok, out, limit))
        if a.only != "lm-eval":
            errors += aiperf(a.port, model_id, tok, out, 4 if a.quick else 16)
    if a.only != "aiperf":
        peers = subprocess.run([os.path.join(ROOT, "bench", "peers", "build")], check=True,
                               stdout=subprocess.PIPE, text=True).stdout.strip()
        with serve.llama_server(peers, a, 1, 2048) as (port, _), echo_shim(a.port + 2, port):
            errors += tokenizer_check(tok, port, True)
            ll = guarded(lambda: lm_eval("llama.cpp", a.port + 2, model_id, tok, out, limit))
        if kv is None or ll is None:
            return 1
        print("\n== lm-eval 0.4.13, local-completions, "
              f"{len(kv[1]['kvasir_mc'])} + {len(kv[1]['kvasir_gen'])} documents")
        print_scores(kv[0], ll[0], kv[2], ll[2])
        print("\n".join(compare(kv[1], ll[1])))
    return 1 if errors else 0


def guarded(fn):
    """fn(), or None after printing why it failed (the other runs go on)."""
    try:
        return fn()
    except (RuntimeError, OSError, ValueError, IndexError) as e:
        print(f"FAILED: {e}", flush=True)
        return None

if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main())
