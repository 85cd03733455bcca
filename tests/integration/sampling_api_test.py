#!/usr/bin/env python3
"""top_logprobs up to 20 and logit_bias against a REAL kvasird, over its Unix
socket (test_sampling_api.sh starts the daemon). Prints ok/FAIL per check;
exits 1 if any failed.

Usage: sampling_api_test.py SOCKET
"""
import http.client
import json
import socket
import sys

SOCK = sys.argv[1]
fails = 0


def ok(what):
    print("ok   " + what)


def bad(what):
    global fails
    fails += 1
    print("FAIL " + what)


def check(what, cond, detail=""):
    (ok if cond else bad)(what + ("" if cond else ": " + str(detail)))


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=300)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(300)
        self.sock.connect(self.path)


def post(route, body):
    """(status, parsed body); a stream's data events as a list."""
    c = UnixConnection(SOCK)
    c.request("POST", route, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read().decode()
    c.close()
    if body.get("stream") and r.status == 200:
        return r.status, [json.loads(l[6:]) for l in raw.splitlines()
                          if l.startswith("data: ") and l != "data: [DONE]"]
    return r.status, json.loads(raw)


def ids_of(text):
    return post("/tokenize", {"prompt": text, "add_special_tokens": False})[1]["tokens"]


def text_of(ids):
    return post("/detokenize", {"tokens": ids})[1]["prompt"]


PROMPT = "The capital of France is"
MSGS = [{"role": "user", "content": "Name a colour."}]


def chat(**kw):
    return post("/v1/chat/completions", {"messages": MSGS, **kw})


def complete(**kw):
    return post("/v1/completions", {"prompt": PROMPT, **kw})


def param_of(resp):
    return resp[1].get("error", {}).get("param") if resp[0] == 400 else resp


# --- top_logprobs: 20 sorted alternatives, the chosen token's consistent ----
for temp in (0, 1.0):
    st, r = chat(max_tokens=6, temperature=temp, seed=3, logprobs=True, top_logprobs=20)
    content = r["choices"][0]["logprobs"]["content"] if st == 200 else []
    check(f"chat top_logprobs 20 at T={temp}: 200 with tokens", st == 200 and len(content) > 0, r)
    for i, e in enumerate(content):
        tops = e["top_logprobs"]
        lps = [t["logprob"] for t in tops]
        check(f"T={temp} token {i}: 20 alternatives", len(tops) == 20, len(tops))
        check(f"T={temp} token {i}: sorted, highest first",
              all(a >= b for a, b in zip(lps, lps[1:])), lps)
        check(f"T={temp} token {i}: chosen logprob <= the best", e["logprob"] <= lps[0] + 1e-5,
              (e["logprob"], lps[0]))
        if temp == 0:
            check(f"greedy token {i} is the best alternative",
                  e["token"] == tops[0]["token"] and abs(e["logprob"] - lps[0]) < 1e-4,
                  (e, tops[0]))
        elif e["logprob"] >= lps[-1]:
            check(f"T=1 token {i}: among the alternatives with its logprob",
                  any(t["token"] == e["token"] and abs(t["logprob"] - e["logprob"]) < 1e-4
                      for t in tops), e)
st, r = complete(max_tokens=3, temperature=0, logprobs=20)
tl = r["choices"][0]["logprobs"]["top_logprobs"] if st == 200 else []
# The alternatives come back keyed by text: two ids with the same text fold.
check("completions logprobs 20: more than 8 alternatives per token",
      st == 200 and len(tl) == 3 and all(8 < len(t) <= 20 for t in tl), r)
check("chat top_logprobs 21 -> 400 naming top_logprobs",
      param_of(chat(max_tokens=1, logprobs=True, top_logprobs=21)) == "top_logprobs")
check("completions logprobs 21 -> 400 naming logprobs",
      param_of(complete(max_tokens=1, logprobs=21)) == "logprobs")

# --- logit_bias -------------------------------------------------------------
x = ids_of(" banana")[0]
forced = text_of([x] * 4)
st, r = complete(max_tokens=4, temperature=0, logit_bias={str(x): 100})
check("logit_bias +100 at temperature 0 yields that token",
      st == 200 and r["choices"][0]["text"] == forced, (forced, r))
st, r = complete(max_tokens=4, temperature=1.0, seed=5, logit_bias={str(x): 100})
check("logit_bias +100 forces a seeded draw too",
      st == 200 and r["choices"][0]["text"] == forced, (forced, r))
st, r = complete(max_tokens=4, temperature=0, logit_bias={str(x): 100},
                 repetition_penalty=1.3, frequency_penalty=1.0, presence_penalty=0.5)
check("logit_bias +100 beside the penalties", st == 200 and r["choices"][0]["text"] == forced,
      (forced, r))

st, plain = complete(max_tokens=1, temperature=0, logprobs=5)
t0 = plain["choices"][0]["logprobs"]["tokens"][0]
g = ids_of(t0)
check(f"the greedy first token {t0!r} is one id", len(g) == 1, g)
st, r = complete(max_tokens=1, temperature=0, logprobs=5, logit_bias={str(g[0]): -100})
lp = r["choices"][0]["logprobs"] if st == 200 else {}
check("logit_bias -100 on the greedy token changes the output",
      st == 200 and lp["tokens"][0] != t0, (t0, r))
check("logprobs stay raw: the banned token still heads the alternatives",
      st == 200 and lp["top_logprobs"][0] == plain["choices"][0]["logprobs"]["top_logprobs"][0],
      (plain, r))

# n > 1, streamed, on chat: every choice forced.
st, events = chat(max_tokens=3, temperature=0.8, seed=9, n=2, stream=True,
                  logit_bias={str(x): 100})
texts = {}
for ev in events if st == 200 else []:
    for c in ev.get("choices", []):
        texts[c["index"]] = texts.get(c["index"], "") + (c["delta"].get("content") or "")
check("n=2 streamed: each choice forced", texts == {0: text_of([x] * 3), 1: text_of([x] * 3)},
      (st, texts))

# A structured output's mask wins over a bias; a bias picks within it.
choices = ["yes", "no"]
st, r = chat(max_tokens=4, temperature=0, structured_outputs={"choice": choices})
if st == 200:
    base = r["choices"][0]["message"]["content"]
    other = choices[1] if base == choices[0] else choices[0]
    st, r = chat(max_tokens=4, temperature=0, structured_outputs={"choice": choices},
                 logit_bias={str(x): 100})
    check("a bias on a token the grammar refuses changes nothing",
          st == 200 and r["choices"][0]["message"]["content"] == base, (base, r))
    oid = ids_of(other)
    st, r = chat(max_tokens=4, temperature=0, structured_outputs={"choice": choices},
                 logit_bias={str(oid[0]): 100})
    check(f"a bias picks {other!r} within the grammar",
          st == 200 and r["choices"][0]["message"]["content"] == other, (other, oid, r))
else:
    print("skip grammar checks: structured outputs not served (%s)" % r)

# Malformed -> 400 naming logit_bias.
for lb in ({"abc": 1}, {"-3": 1}, {"5": 101}, {"5": -100.5}, {"5": "1"}, [1, 2], "x",
           {"99999999": 1}, {str(i): 1 for i in range(301)}):
    desc = json.dumps(lb)[:40]
    check(f"logit_bias {desc} -> 400 naming logit_bias",
          param_of(complete(max_tokens=1, logit_bias=lb)) == "logit_bias")
    check(f"chat logit_bias {desc} -> 400 naming logit_bias",
          param_of(chat(max_tokens=1, logit_bias=lb)) == "logit_bias")
check("logit_bias {} is neutral", complete(max_tokens=1, logit_bias={})[0] == 200)
check("300 entries accepted",
      complete(max_tokens=1, logit_bias={str(i): 0.5 for i in range(300)})[0] == 200)

print("all passed" if fails == 0 else f"{fails} FAILED")
sys.exit(1 if fails else 0)
