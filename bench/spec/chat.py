"""A light streaming client of kvasird's /v1/chat/completions for bench/spec.

  one(port, req, opts) -> record: ttft, gaps (between chunks that carry
      output), tokens (usage.completion_tokens), text (content plus each
      tool call as name + arguments: what a client sees), pieces (the
      token texts of the stream's logprobs, one per generated token, when
      asked), error.
  run(port, reqs, concurrency, opts) -> (records, wall seconds): closed loop,
      `concurrency` workers taking the requests in order.
  get_json / post_json: plain HTTP helpers (stats, tokenize).
"""
import http.client
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "peers"))
import client  # noqa: E402  (bench/peers/client.py: the one summary of a run)


def post_json(port, path, body, timeout=300):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"POST {path}: HTTP {r.status}: {data[:300]!r}")
    return json.loads(data)


def get_text(port, path, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("GET", path)
    r = c.getresponse()
    data = r.read().decode(errors="replace")
    c.close()
    return data if r.status == 200 else None


def body_of(req, opts):
    b = {"messages": req["messages"], "max_tokens": opts["max_tokens"],
         "temperature": opts["temperature"], "stream": True,
         "stream_options": {"include_usage": True}}
    if opts.get("seed") is not None:
        b["seed"] = opts["seed"]
    salt = "-".join(s for s in (opts.get("salt"), req.get("salt")) if s)
    if salt:
        b["cache_salt"] = salt
    if opts.get("logprobs"):
        b.update(logprobs=True, top_logprobs=0)
    for key in ("tools", "response_format"):
        if key in req:
            b[key] = req[key]
    return b


def _consume(r, rec, t0):
    """Read the SSE stream into rec."""
    last = None
    calls = {}
    content = []
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
        for ch in ev.get("choices") or []:
            delta = ch.get("delta") or {}
            lp = (ch.get("logprobs") or {}).get("content") or []
            rec["pieces"].extend(t["token"] for t in lp)
            if delta.get("content"):
                content.append(delta["content"])
            for tc in delta.get("tool_calls") or []:
                c = calls.setdefault(tc.get("index", 0), {"name": "", "arguments": ""})
                fn = tc.get("function") or {}
                c["name"] += fn.get("name") or ""
                c["arguments"] += fn.get("arguments") or ""
            if not (delta.get("content") or delta.get("tool_calls") or lp):
                continue
            now = time.perf_counter()
            if last is None:
                rec["ttft"] = now - t0
            else:
                rec["gaps"].append(now - last)
            last = now
    rec["text"] = "".join(content) + "".join(
        f"\n<call {c['name']}>{c['arguments']}" for _, c in sorted(calls.items()))


def one(port, req, opts):
    rec = {"id": req["id"], "ttft": None, "gaps": [], "tokens": 0, "text": "", "pieces": [],
           "error": None}
    t0 = time.perf_counter()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
        c.request("POST", "/v1/chat/completions", json.dumps(body_of(req, opts)),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            rec["error"] = f"HTTP {r.status}: {r.read()[:300]!r}"
        else:
            _consume(r, rec, t0)
        c.close()
    except (OSError, http.client.HTTPException, ValueError) as e:
        rec["error"] = repr(e)
    rec["e2e"] = time.perf_counter() - t0
    return rec


def run(port, reqs, concurrency, opts):
    recs = [None] * len(reqs)
    todo = list(range(len(reqs)))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            recs[i] = one(port, reqs[i], opts)

    t = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(min(concurrency, len(reqs)))]
    [x.start() for x in threads]
    [x.join() for x in threads]
    return recs, time.perf_counter() - t


def summary(recs, wall):
    """bench/peers/client.py's summary (tok_s, TTFT and ITL p50/p99 in ms,
    requests, errors) plus the tokens and the wall time."""
    s = client.summary(recs, wall if wall else float("inf"))
    s["tokens"] = sum(r["tokens"] for r in recs if not r["error"] and r["ttft"] is not None)
    s["wall_s"] = wall
    return s
