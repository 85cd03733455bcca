#!/usr/bin/env python3
"""bench/clients/echo_shim.py — prompt logprobs for llama-server, so that
lm-eval's log-likelihood requests can reach the llama.cpp peer at all.

llama-server refuses `echo` on /v1/completions ("Only no echo is
supported"), and lm-eval's `local-completions` scores a choice by exactly
that: `echo: true, logprobs: 1` on the token ids of context + choice, then
the logprobs of the choice's tokens read back from the echoed prompt. This
proxy answers such a request from llama-server's own numbers and forwards
every other request unchanged (method, path, body), so the generation task
reaches llama-server as lm-eval sent it.

How an echo request is answered, for prompt tokens t[0..L-1]: for each
position i in 1..L-1, one native `/completion` call on t[0..i-1] with
`n_predict: 1`, `n_probs: N` and `logit_bias` +100 on t[i] (greedy), so the
sampled token is t[i] and llama-server reports its logprob and the N most
likely tokens from the raw logits (`get_token_probabilities`, before any
sampler: the bias moves the draw, not the reported numbers). llama-server
keeps the slot's prompt cache, so each call evaluates about one new token.
Then, if `max_tokens` > 0, one call on the whole prompt generates the new
tokens with their logprobs. The answer has the OpenAI shape lm-eval parses:
`logprobs.tokens`, `token_logprobs` (null first), `top_logprobs` (text ->
logprob, null first), `text_offset`, and `text` (the echoed prompt plus the
new text). A returned token that is not the one forced (an end-of-text id
llama-server stops on) fails the request with 502 instead of reporting a
number for a different token.

Only token-id prompts are answered (lm-eval's `tokenized_requests=True`);
a text prompt with `echo` is a 400.

  echo_shim.py --port P --upstream http://127.0.0.1:U
"""
import argparse
import http.client
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

FORCE_BIAS = 100.0


class Upstream:
    def __init__(self, url):
        u = urlparse(url)
        self.host, self.port = u.hostname, u.port

    def call(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection(self.host, self.port, timeout=600)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.getheader("Content-Type", "application/json"), r.read()
        finally:
            c.close()

    def detokenize(self, ids):
        status, _, body = self.call("POST", "/detokenize", json.dumps({"tokens": ids}).encode(),
                                    {"Content-Type": "application/json"})
        if status != 200:
            raise UpstreamError(status, body)
        return json.loads(body)["content"]

    def completion(self, req):
        status, _, body = self.call("POST", "/completion", json.dumps(req).encode(),
                                    {"Content-Type": "application/json"})
        if status != 200:
            raise UpstreamError(status, body)
        return json.loads(body)


class UpstreamError(Exception):
    def __init__(self, status, body):
        super().__init__(f"llama-server answered {status}: {body[:300]!r}")
        self.status = status


def top_map(entry, n):
    """{text: logprob} of the n most likely tokens at one position."""
    out = {}
    for t in entry.get("top_logprobs", [])[:n]:
        out.setdefault(t["token"], t["logprob"])
    return out


def prompt_position(up, prefix, token, n):
    """(text, logprob, top) of `token` after `prefix`, from llama-server."""
    r = up.completion({"prompt": prefix, "n_predict": 1, "n_probs": max(n, 1),
                       "temperature": 0, "logit_bias": [[token, FORCE_BIAS]],
                       "cache_prompt": True, "post_sampling_probs": False})
    probs = r.get("completion_probabilities") or []
    if not probs or probs[0]["id"] != token:
        got = probs[0]["id"] if probs else None
        raise UpstreamError(502, f"forced token {token}, llama-server returned {got}".encode())
    return probs[0]["token"], probs[0]["logprob"], top_map(probs[0], n)


def echo_completion(up, body):
    """The OpenAI /v1/completions answer to an echo request, see the top."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
        prompt = prompt[0]
    if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
        return 400, {"error": {"message": "echo_shim: echo needs a prompt of token ids",
                               "type": "invalid_request_error", "param": "prompt"}}
    n = int(body.get("logprobs") or 0)
    tokens = [up.detokenize(prompt[:1])]
    token_lp, top = [None], [None]
    for i in range(1, len(prompt)):
        text, lp, tm = prompt_position(up, prompt[:i], prompt[i], n)
        tokens.append(text)
        token_lp.append(lp)
        top.append(tm)
    max_tokens = int(body.get("max_tokens", 16))
    finish = "length"
    if max_tokens > 0:
        r = up.completion({"prompt": prompt, "n_predict": max_tokens, "n_probs": max(n, 1),
                           "temperature": body.get("temperature", 1.0),
                           "seed": body.get("seed", -1), "cache_prompt": True,
                           "post_sampling_probs": False})
        for p in r.get("completion_probabilities") or []:
            tokens.append(p["token"])
            token_lp.append(p["logprob"])
            top.append(top_map(p, n))
        finish = "stop" if r.get("stop_type") in ("eos", "word") else "length"
    offsets, pos = [], 0
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    logprobs = {"tokens": tokens, "token_logprobs": token_lp, "top_logprobs": top,
                "text_offset": offsets} if body.get("logprobs") is not None else None
    return 200, {"id": "cmpl-echo-shim", "object": "text_completion",
                 "model": body.get("model", ""),
                 "choices": [{"index": 0, "text": "".join(tokens), "logprobs": logprobs,
                              "finish_reason": finish}],
                 "usage": {"prompt_tokens": len(prompt),
                           "completion_tokens": len(tokens) - len(prompt),
                           "total_tokens": len(tokens)}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    up = None

    def log_message(self, fmt, *args):  # quiet: lm-eval's log is the record
        pass

    def reply(self, status, ctype, data):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def forward(self, body):
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() in ("content-type", "authorization", "accept")}
        status, ctype, data = self.up.call(self.command, self.path, body, headers)
        self.reply(status, ctype, data)

    def do_GET(self):
        self.forward(None)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            req = json.loads(body)
        except ValueError:
            return self.forward(body)
        if self.path.rstrip("/") != "/v1/completions" or not req.get("echo"):
            return self.forward(body)
        try:
            status, out = echo_completion(self.up, req)
        except UpstreamError as e:
            status, out = e.status, {"error": {"message": str(e), "type": "server_error"}}
        self.reply(status, "application/json", json.dumps(out).encode())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True, help="llama-server's base URL")
    a = ap.parse_args()
    Handler.up = Upstream(a.upstream)
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    print(f"echo_shim: 127.0.0.1:{a.port} -> {a.upstream}", file=sys.stderr, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
