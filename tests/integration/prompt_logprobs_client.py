"""Prompt logprobs against a running kvasird (test_prompt_logprobs.sh).

Usage: prompt_logprobs_client.py SOCKET. Prints ok/FAIL per check; exits 1
on any failure. The daemon's plan cuts prefill into chunks of 64 tokens.
"""
import http.client
import json
import socket
import sys


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=300)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


SOCK = sys.argv[1]
fails = 0


def post(route, body):
    c = UnixConnection(SOCK)
    c.request("POST", route, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, json.loads(r.read())


def check(what, cond, detail=""):
    global fails
    print(("ok   " if cond else "FAIL ") + what + ("" if cond else f": {detail}"))
    if not cond:
        fails += 1


def tokenize(text):
    st, j = post("/tokenize", {"prompt": text, "add_special_tokens": False})
    assert st == 200, j
    return j["tokens"]


def greedy_ids(prompt_ids, n):
    """n greedy tokens after prompt_ids, as ids with their logprobs: each
    generated piece must tokenize alone to one id, and the ids must spell
    the text the daemon returned (else the check cannot be made)."""
    st, j = post("/v1/completions", {"prompt": prompt_ids, "max_tokens": n, "temperature": 0,
                                      "logprobs": 0, "ignore_eos": True})
    assert st == 200, j
    lp = j["choices"][0]["logprobs"]
    ids = []
    for piece in lp["tokens"]:
        t = tokenize(piece)
        assert len(t) == 1, (piece, t)
        ids.append(t[0])
    st, d = post("/detokenize", {"tokens": ids})
    assert st == 200 and d["prompt"] == j["choices"][0]["text"], (d, j["choices"][0]["text"])
    return ids, lp["token_logprobs"]


def score(prompt, **extra):
    body = {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0}
    body.update(extra)
    return post("/v1/completions", body)


def agree(a, b, tol=1e-3):
    return len(a) == len(b) and all(x is not None and y is not None and abs(x - y) <= tol
                                    for x, y in zip(a, b))


# 1. echo with logprobs and a generation: the prompt's tokens first.
text = "The capital of France is"
st, j = post("/v1/completions", {"prompt": text, "max_tokens": 4, "temperature": 0,
                                  "logprobs": 1, "echo": True})
c = j["choices"][0]
lp = c["logprobs"]
n_prompt = j["usage"]["prompt_tokens"]
check("echo+logprobs: 200", st == 200, j)
check("echo+logprobs: prompt tokens then 4 generated", len(lp["tokens"]) == n_prompt + 4,
      len(lp["tokens"]))
check("echo+logprobs: first token null", lp["token_logprobs"][0] is None and
      lp["top_logprobs"][0] is None, lp["token_logprobs"][:2])
check("echo+logprobs: the others scored", all(v is not None and v <= 0
                                              for v in lp["token_logprobs"][1:]))
check("echo+logprobs: tokens spell the text", "".join(lp["tokens"]) == c["text"],
      (lp["tokens"], c["text"]))
offs, o = [], 0
for t in lp["tokens"]:
    offs.append(o)
    o += len(t)
check("echo+logprobs: text_offset into the returned text", lp["text_offset"] == offs,
      (lp["text_offset"], offs))
check("echo+logprobs: text starts with the prompt", c["text"].startswith(text), c["text"])

# 2. echo with max_tokens 0 scores what a greedy generation reported.
for name, prompt_text in [
    ("short", "The capital of France is"),
    ("long (3 prefill chunks)", " ".join(["The old lighthouse keeper counted the ships that "
                                          "passed the rocks each night, and wrote them down."]
                                         * 9)),
]:
    p = tokenize(prompt_text)
    gen, gen_lp = greedy_ids(p, 8)
    st, j = score(p + gen)
    c = j["choices"][0]
    lps = c["logprobs"]["token_logprobs"]
    check(f"score {name} ({len(p)} + 8 tokens): 200, no new token, length",
          st == 200 and c["finish_reason"] == "length" and j["usage"]["completion_tokens"] == 0
          and len(lps) == len(p) + 8, (st, c.get("finish_reason"), j.get("usage"), len(lps)))
    check(f"score {name}: the last 8 equal the greedy logprobs (1e-3)", agree(lps[-8:], gen_lp),
          (lps[-8:], gen_lp))
    check(f"score {name}: every position but the first scored",
          lps[0] is None and all(v is not None for v in lps[1:]),
          [i for i, v in enumerate(lps) if v is None])
    st2, d = post("/detokenize", {"tokens": p + gen})
    check(f"score {name}: the text is the prompt's", c["text"] == d["prompt"], (c["text"], d))

# 3. prompt_logprobs (vLLM's shape), and no cached prefix for it.
long_ids = tokenize(" ".join(["A quiet river ran under the stone bridge near the mill."] * 12))
body = {"prompt": long_ids, "max_tokens": 1, "prompt_logprobs": 2, "temperature": 0}
post("/v1/completions", {"prompt": long_ids, "max_tokens": 1})  # now cached
st, j = post("/v1/completions", body)
pl = j["choices"][0].get("prompt_logprobs")
check("prompt_logprobs: 200, one entry per prompt token",
      st == 200 and isinstance(pl, list) and len(pl) == len(long_ids), (st, j))
check("prompt_logprobs: a cached prefix is not taken",
      j["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, j["usage"])
check("prompt_logprobs: null first, then a dict at every position",
      pl[0] is None and all(isinstance(d, dict) for d in pl[1:]),
      [i for i, d in enumerate(pl) if not isinstance(d, dict)])
good = True
for i, d in enumerate(pl[1:], start=1):
    own = d.get(str(long_ids[i]))
    alt = {e["rank"] for k, e in d.items() if k != str(long_ids[i])}
    # The top 2 by rank, less the prompt's token where it is one of them.
    want = {1, 2} - ({own["rank"]} if own else set())
    if own is None or own["rank"] < 1 or own["logprob"] > 0 or alt != want:
        good = False
        print("  position", i, d)
        break
    if any(set(e) != {"logprob", "rank", "decoded_token"} for e in d.values()):
        good = False
        print("  fields", d)
        break
check("prompt_logprobs: the prompt's token (rank >= 1) and up to 2 alternatives", good)
st, s = score(long_ids)
same = agree([d[str(long_ids[i])]["logprob"] for i, d in enumerate(pl) if i > 0],
             s["choices"][0]["logprobs"]["token_logprobs"][1:], 1e-4)
check("prompt_logprobs equal echo's token_logprobs", same)
top1 = [min(d.values(), key=lambda e: e["rank"]) for d in pl[1:]]
check("prompt_logprobs: rank 1 is the most likely", all(
    e["rank"] == 1 and all(e["logprob"] >= f["logprob"] for f in d.values())
    for e, d in zip(top1, pl[1:])))

# 4. The 400s.
st, j = post("/v1/completions", {"prompt": "x", "max_tokens": 0})
check("max_tokens 0 without echo: 400 naming max_tokens",
      st == 400 and j["error"]["param"] == "max_tokens", (st, j))
st, j = post("/v1/completions", {"prompt": "x", "prompt_logprobs": 1, "stream": True})
check("prompt_logprobs with stream: 400 naming it",
      st == 400 and j["error"]["param"] == "prompt_logprobs", (st, j))
st, j = post("/v1/completions", {"prompt": "x", "prompt_logprobs": 21})
check("prompt_logprobs 21: 400 naming it", st == 400 and j["error"]["param"] == "prompt_logprobs",
      (st, j))

sys.exit(1 if fails else 0)
