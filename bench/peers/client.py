"""bench/peers/client.py: one light streaming client for both servers
(kvasird and llama-server), so neither gets a client of its own.

OpenAI `/v1/completions` over HTTP/1.1 (http.client, a thread per request in
flight), prompts as token ids (both servers accept an array of ids; no
tokenizer on the client, the same ids reach both), `ignore_eos: true`,
`temperature: 0`, `stream: true` with `stream_options.include_usage`.

Per request it records the time to the first streamed token (TTFT) and the
gaps between streamed chunks (ITL); output tokens are the server's usage
count. A server that holds a chunk back (an incomplete UTF-8 character)
merges two tokens into one gap: rare with byte-level BPE, the same for both.

Load shapes (SHAPES): closed loop (`concurrency` requests always in flight
until `requests` are done) or bursts (`bursts` groups of `burst` requests
sent at once, `gap_s` apart, whatever is still running).
"""
import http.client
import json
import random
import statistics
import threading
import time

# name -> list of runs: (prompt_len, max_tokens, concurrency, requests, bursts, burst, gap_s)
SHAPES = {
    "long-heavy": [(1024, 64, 8, 32, 0, 0, 0.0)],
    "short-heavy": [(128, 128, 1, 4, 0, 0, 0.0), (128, 128, 16, 64, 0, 0, 0.0),
                    (128, 128, 64, 128, 0, 0, 0.0)],
    "bursty": [(256, 128, 0, 0, 4, 16, 10.0)],
}


def quick(runs):
    """The smoke version of a shape: same form, few short requests."""
    out = []
    for p, m, c, r, b, n, g in runs:
        out.append((min(p, 64), 8, min(c, 4), min(r, 4) if r else 0, min(b, 2), min(n, 3), min(g, 1.0)))
    return out


def prompt_ids(seed, n, vocab=49152):
    """n random ids, distinct per request (no prefix cache hits on either
    server), above the special tokens at the start of the vocabulary."""
    rnd = random.Random(seed)
    return [rnd.randrange(100, vocab - 100) for _ in range(n)]


def one(host, port, ids, max_tokens, rec):
    """Stream one completion; fill rec with t0, ttft, gaps, tokens, error."""
    body = json.dumps({"prompt": ids, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    rec.update(ttft=None, gaps=[], tokens=0, error=None)
    t0 = time.perf_counter()
    try:
        c = http.client.HTTPConnection(host, port, timeout=900)
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            rec["error"] = f"HTTP {r.status}: {r.read()[:200]!r}"
            return
        last = None
        for line in r:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            ev = json.loads(data)
            if ev.get("usage"):
                rec["tokens"] = ev["usage"]["completion_tokens"]
            if not ev.get("choices"):
                continue
            now = time.perf_counter()
            if last is None:
                rec["ttft"] = now - t0
            else:
                rec["gaps"].append(now - last)
            last = now
        c.close()
    except (OSError, http.client.HTTPException, ValueError) as e:
        rec["error"] = repr(e)


def run(host, port, prompt_len, max_tokens, concurrency, requests, bursts, burst, gap_s, seed=0):
    """One run of a shape; returns the records and the wall time."""
    recs = [dict() for _ in range(requests if requests else bursts * burst)]
    jobs = [(prompt_ids(seed * 100003 + i, prompt_len), recs[i]) for i in range(len(recs))]
    threads = []
    t = time.perf_counter()
    if requests:  # closed loop: `concurrency` workers take requests in turn
        lock = threading.Lock()
        todo = list(jobs)

        def worker():
            while True:
                with lock:
                    if not todo:
                        return
                    ids, rec = todo.pop(0)
                one(host, port, ids, max_tokens, rec)
        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        [x.start() for x in threads]
    else:  # bursts: `burst` at once, every gap_s, open loop
        for b in range(bursts):
            for ids, rec in jobs[b * burst:(b + 1) * burst]:
                x = threading.Thread(target=one, args=(host, port, ids, max_tokens, rec))
                x.start()
                threads.append(x)
            if b + 1 < bursts:
                time.sleep(gap_s)
    [x.join() for x in threads]
    return recs, time.perf_counter() - t


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def summary(recs, wall):
    """{tok_s, ttft_p50/p99 ms, itl_p50/p99 ms, errors, requests}."""
    ok = [r for r in recs if not r.get("error") and r.get("ttft") is not None]
    ttft = [r["ttft"] * 1e3 for r in ok]
    gaps = [g * 1e3 for r in ok for g in r["gaps"]]
    return {"requests": len(recs), "errors": len(recs) - len(ok),
            "first_error": next((r["error"] for r in recs if r.get("error")), None),
            "tok_s": sum(r["tokens"] for r in ok) / wall, "ttft_p50": pct(ttft, 50),
            "ttft_p99": pct(ttft, 99), "itl_p50": pct(gaps, 50), "itl_p99": pct(gaps, 99),
            "itl_mean": statistics.fmean(gaps) if gaps else float("nan")}
