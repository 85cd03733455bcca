#!/usr/bin/env python3
"""Load and abort storm against a real kvasird over its Unix socket.

Usage: load_client.py SOCK PID [--requests N] [--aborts N] [--concurrency N]
                      [--timeout S] [--rss-slack-mib M] [--json FILE]

Phase 1, burst: N requests (default 2,000) submitted at once, each on its own
connection. Every one must complete (200 with text) or be refused with a clear
"busy": 429 or 503 with the OpenAI error body. Anything else (a reset, a
timeout — each request has a client-side deadline —, another status, a
malformed body) is a failure. The daemon's RSS (/proc/PID/status) is sampled
throughout and must stay under its starting value + --rss-slack-mib.

Phase 2, aborts: N streaming requests (default 10,000), --concurrency at a
time, each closed by the client at a random point: before its request is
fully sent, right after sending (while queued), after the response head, or
after 1–3 events (mid-stream).

After each phase the daemon must return to its starting state: free KV
blocks == total, nothing running or waiting (GET /kvasir/v1/stats), and the
same number of open fds (/proc/PID/fd) and threads (/proc/PID/task) as before
the phase. Stdlib only (asyncio + raw HTTP/1.1), so it runs anywhere.
Exit 0 = passed, 1 = failed. Figures are printed (and written with --json).
"""
import argparse
import asyncio
import json
import os
import random
import sys
import time

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def proc_counts(pid):
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    threads = len(os.listdir(f"/proc/{pid}/task"))
    return fds, threads


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def read_response(reader):
    """Reads one HTTP/1.1 response (Content-Length or chunked). Returns (status, body bytes)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for l in lines[1:]:
        if ":" in l:
            k, v = l.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                break
            body += chunk[:-2]
    else:
        body = await reader.read()
    return status, body


def request_bytes(body, stream=False):
    data = json.dumps(body).encode()
    return (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
        + data
    )


async def get_json(sock, path):
    reader, writer = await asyncio.open_unix_connection(sock)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status, body = await asyncio.wait_for(read_response(reader), 30)
        return status, json.loads(body)
    finally:
        writer.close()


async def engine_stats(sock):
    _, st = await get_json(sock, "/kvasir/v1/stats")
    return st["engine"]


async def settle(sock, pid, base, what, seconds=20):
    """Waits until blocks, fds and threads are back at the baseline; checks them."""
    deadline = time.monotonic() + seconds
    while True:
        e = await engine_stats(sock)
        await asyncio.sleep(0.05)  # let the server close the stats connection
        fds, threads = proc_counts(pid)
        back = (
            e["running"] == 0
            and e["waiting"] == 0
            and e["blocks_free"] == e["blocks_total"]
            and fds == base["fds"]
            and threads == base["threads"]
        )
        if back or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    check(e["running"] == 0 and e["waiting"] == 0, f"{what}: nothing running or waiting "
          f"(running {e['running']}, waiting {e['waiting']})")
    check(e["blocks_free"] == e["blocks_total"], f"{what}: no leaked KV block "
          f"(free {e['blocks_free']} of {e['blocks_total']})")
    check(fds == base["fds"], f"{what}: open fds back to {base['fds']} (now {fds})")
    check(threads == base["threads"], f"{what}: threads back to {base['threads']} (now {threads})")
    return {"blocks_free": e["blocks_free"], "fds": fds, "threads": threads}


def is_busy_body(body):
    try:
        err = json.loads(body)["error"]
        return isinstance(err.get("message"), str) and err["message"] != "" and "type" in err
    except (ValueError, KeyError, TypeError, AttributeError):
        return False


async def one_request(sock, i, timeout, max_tokens):
    body = {"prompt": f"Request {i} says", "max_tokens": max_tokens, "temperature": 0.7,
            "seed": i}
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(sock), timeout)
    except (OSError, asyncio.TimeoutError) as e:
        return ("connect_error", repr(e))
    try:
        writer.write(request_bytes(body))
        await writer.drain()
        status, data = await asyncio.wait_for(read_response(reader), timeout)
    except asyncio.TimeoutError:
        return ("timeout", "")
    except (OSError, asyncio.IncompleteReadError, ValueError) as e:
        return ("io_error", repr(e))
    finally:
        writer.close()
    if status == 200:
        try:
            text = json.loads(data)["choices"][0]["text"]
            return ("ok", text)
        except (ValueError, KeyError, IndexError):
            return ("bad_body", data[:200])
    if status in (429, 503) and is_busy_body(data):
        return (f"busy_{status}", json.loads(data)["error"].get("code"))
    return (f"status_{status}", data[:200])


async def burst(args, base):
    n = args.requests
    rss0 = rss_kib(args.pid)
    peak = [rss0]
    done = asyncio.Event()

    async def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(args.pid))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    t0 = time.monotonic()
    results = await asyncio.gather(
        *(one_request(args.sock, i, args.timeout, args.max_tokens) for i in range(n)))
    wall = time.monotonic() - t0
    done.set()
    await sampler
    kinds = {}
    for kind, _ in results:
        kinds[kind] = kinds.get(kind, 0) + 1
    print(f"burst: {n} requests in {wall:.1f} s: {kinds}", flush=True)
    shown = set()
    for kind, detail in results:
        if not (kind == "ok" or kind.startswith("busy_")) and kind not in shown:
            shown.add(kind)
            print(f"  first {kind}: {detail!r}")
    completed = kinds.get("ok", 0)
    busy = sum(v for k, v in kinds.items() if k.startswith("busy_"))
    check(completed + busy == n, f"burst: every request completed ({completed}) or was refused "
          f"busy ({busy}); {n - completed - busy} otherwise")
    check(completed > 0, "burst: some requests completed")
    grow_mib = (peak[0] - rss0) / 1024
    check(grow_mib <= args.rss_slack_mib,
          f"burst: daemon RSS peak {peak[0] / 1024:.1f} MiB, start {rss0 / 1024:.1f} MiB "
          f"(+{grow_mib:.1f} MiB, bound +{args.rss_slack_mib} MiB)")
    after = await settle(args.sock, args.pid, base, "after the burst")
    return {"requests": n, "wall_s": round(wall, 2), "answers": kinds,
            "rss_start_mib": round(rss0 / 1024, 1), "rss_peak_mib": round(peak[0] / 1024, 1),
            "rss_end_mib": round(rss_kib(args.pid) / 1024, 1), "after": after}


# Half the aborted requests open with one shared text (a few KV blocks the
# prefix cache holds and they share), a quarter ask for several choices:
# aborts land mid-n and on shared blocks too.
SHARED = ("You are a careful assistant. Answer briefly, cite nothing, and stop when the "
          "question is answered. Requests below are numbered; treat each on its own. ")


async def one_abort(sock, i, rng, timeout):
    prompt = (SHARED if rng.random() < 0.5 else "") + f"Abort {i}:"
    body = {"prompt": prompt, "max_tokens": rng.randint(8, 64), "ignore_eos": True,
            "stream": True, "temperature": 0.8, "seed": i}
    if rng.random() < 0.25:
        body["n"] = rng.randint(2, 4)
    data = request_bytes(body)
    # The mix keeps the storm cheap on 2 cores: a mid-stream abort costs a
    # prefill and a few decode steps, the others next to nothing.
    r = rng.random()
    if r < 0.15:
        how = "partial_request"
    elif r < 0.5:
        how = "queued"
    elif r < 0.7:
        how = "after_head"
    else:
        how = "mid_stream"
    events = rng.randint(1, 3)
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(sock), timeout)
    except (OSError, asyncio.TimeoutError) as e:
        return how, "connect_error"
    try:
        if how == "partial_request":
            writer.write(data[: rng.randint(1, len(data) - 1)])
            await writer.drain()
            return how, "closed"
        writer.write(data)
        await writer.drain()
        if how == "queued":
            return how, "closed"
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status = int(head.split(b" ")[1])
        if status != 200:
            return how, f"status_{status}"
        if how == "after_head":
            return how, "closed"
        seen = 0
        buf = b""
        while seen < events:
            chunk = await asyncio.wait_for(reader.read(4096), timeout)
            if not chunk:
                return how, "eof_early"
            buf += chunk
            seen = buf.count(b"data: ")
            if b"[DONE]" in buf:
                return how, "finished"  # a short max_tokens ran out first: fine
        return how, "closed"
    except asyncio.TimeoutError:
        return how, "timeout"
    except (OSError, asyncio.IncompleteReadError, ValueError):
        return how, "io_error"
    finally:
        writer.close()


async def aborts(args, base):
    rng = random.Random(args.seed)
    n = args.aborts
    counter = iter(range(n))
    tally = {}

    async def worker():
        for i in counter:
            how, outcome = await one_abort(args.sock, i, rng, args.timeout)
            key = f"{how}:{outcome}"
            tally[key] = tally.get(key, 0) + 1

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    wall = time.monotonic() - t0
    print(f"aborts: {n} in {wall:.1f} s: {dict(sorted(tally.items()))}", flush=True)
    bad = {k: v for k, v in tally.items()
           if not (k.endswith(":closed") or k.endswith(":finished") or k.endswith(":status_429"))}
    check(not bad, f"aborts: every client got what it waited for before closing {bad or ''}")
    st = await engine_stats(args.sock)
    after = await settle(args.sock, args.pid, base, "after the aborts")
    # Settled: no block referenced (free counts the evictable ones), and the
    # shared text is still cached: the storm did exercise the prefix cache.
    pc = (await engine_stats(args.sock)).get("prefix_cache", {})
    if pc.get("enabled"):
        check(pc["blocks_evictable"] == pc["blocks_cached"],
              f"after the aborts: every cached block evictable ({pc})")
        check(pc["hits"] > 0 and pc["blocks_cached"] > 0,
              f"after the aborts: the shared prefix was cached and hit ({pc})")
    return {"aborts": n, "concurrency": args.concurrency, "wall_s": round(wall, 2),
            "outcomes": tally, "after": after, "engine": st}


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sock")
    ap.add_argument("pid", type=int)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--aborts", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=150)
    ap.add_argument("--rss-slack-mib", type=float, default=256)
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--json")
    args = ap.parse_args()

    # Warm up (first-use allocations, lazily made threads), then the baseline.
    status, _ = await get_json(args.sock, "/health")
    check(status == 200, "daemon ready")
    r = await one_request(args.sock, -1, args.timeout, args.max_tokens)
    check(r[0] == "ok", f"a single request completes ({r[0]})")
    await asyncio.sleep(0.3)
    e = await engine_stats(args.sock)
    await asyncio.sleep(0.1)
    fds, threads = proc_counts(args.pid)
    base = {"fds": fds, "threads": threads, "blocks_total": e["blocks_total"]}
    print(f"baseline: {base}, RSS {rss_kib(args.pid) / 1024:.1f} MiB", flush=True)
    report = {"baseline": base}
    if args.requests:
        report["burst"] = await burst(args, base)
    if args.aborts:
        report["aborts"] = await aborts(args, base)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print("all passed" if not failures else f"{len(failures)} FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
