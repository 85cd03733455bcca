#!/usr/bin/env python3
"""A TCP transfer between two netns hosts, checked end to end.

  netns_tcp.py serve PORT          accept one connection, read to EOF, print
                                   {"bytes", "sha256", "seconds"} (first byte to EOF)
  netns_tcp.py send ADDR PORT N S  send N bytes made from seed S, print the same
                                   {"bytes", "sha256"} of what was sent
  netns_tcp.py echo-rtt ADDR PORT K / serve-echo PORT
                                   K one-byte round trips, print their times (ms)

The payload is pseudo-random (seeded) so a frame the shaper corrupted or
lost for good changes the checksum.
"""
import hashlib
import json
import random
import socket
import sys
import time

CHUNK = 1 << 16


def listener(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(1)
    print("listening", flush=True, file=sys.stderr)
    return s


def connect(addr, port):
    """Connects, retrying while the server is still starting (5 s at most)."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return socket.create_connection((addr, port), timeout=30)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def serve(port):
    conn, _ = listener(port).accept()
    h, n, first = hashlib.sha256(), 0, None
    while True:
        b = conn.recv(CHUNK)
        if not b:
            break
        if first is None:
            first = time.monotonic()
        h.update(b)
        n += len(b)
    secs = time.monotonic() - first if first else 0.0
    print(json.dumps({"bytes": n, "sha256": h.hexdigest(), "seconds": secs}))


def send(addr, port, n, seed):
    data = random.Random(seed).randbytes(n)
    c = connect(addr, port)
    c.sendall(data)
    c.shutdown(socket.SHUT_WR)
    c.recv(1)  # the server's close: everything was read
    print(json.dumps({"bytes": n, "sha256": hashlib.sha256(data).hexdigest()}))


def serve_echo(port):
    conn, _ = listener(port).accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while b := conn.recv(1):
        conn.sendall(b)


def echo_rtt(addr, port, k):
    c = connect(addr, port)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for _ in range(k):
        t = time.perf_counter()
        c.sendall(b"x")
        c.recv(1)
        times.append((time.perf_counter() - t) * 1e3)
    print(json.dumps({"rtt_ms": times}))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "serve":
        serve(int(args[0]))
    elif cmd == "send":
        send(args[0], int(args[1]), int(args[2]), int(args[3]))
    elif cmd == "serve-echo":
        serve_echo(int(args[0]))
    elif cmd == "echo-rtt":
        echo_rtt(args[0], int(args[1]), int(args[2]))
    else:
        sys.exit(__doc__)
