#!/usr/bin/env python3
"""The front door driven by the official `openai` package over TCP.

Usage: openai_client_test.py BASE_URL [API_KEY]   (BASE_URL like http://127.0.0.1:8000/v1)
Exits non-zero on the first failed check. Run by test_api_e2e.sh against a
real kvasird (a 2-stage plan on the default model).
"""
import sys

import openai

base_url = sys.argv[1]
client = openai.OpenAI(base_url=base_url, api_key=sys.argv[2] if len(sys.argv) > 2 else "none")
model = client.models.list().data[0].id
print(f"model: {model}")
failures = 0


def check(cond, what):
    global failures
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures += 1


PROMPT = "The capital of France is"

# Completions, whole and streamed (greedy: the same text).
r = client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0)
text = r.choices[0].text
check(len(text) > 0, f"completion text: {text!r}")
check(r.choices[0].finish_reason in ("length", "stop"), f"finish_reason {r.choices[0].finish_reason}")
check(r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0, f"usage {r.usage}")

parts, last = [], None
for chunk in client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0,
                                       stream=True, stream_options={"include_usage": True}):
    if chunk.choices:
        parts.append(chunk.choices[0].text)
    last = chunk
check("".join(parts) == text, f"streamed text equals the whole one: {''.join(parts)!r}")
check(last is not None and last.usage is not None and last.usage.completion_tokens > 0,
      "usage in the last stream chunk")

# Stop strings: cut the greedy text at a piece of its own middle.
words = text.split()
if len(words) >= 3:
    stop = " " + words[2]
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0, stop=[stop])
    check(r.choices[0].text == text[: text.index(stop)], f"stop {stop!r} → {r.choices[0].text!r}")
    check(r.choices[0].finish_reason == "stop", "finish_reason stop after a stop string")

# Seeds: same seed, same sample.
a = client.completions.create(model=model, prompt="Once upon a time", max_tokens=16, temperature=0.9, seed=1234)
b = client.completions.create(model=model, prompt="Once upon a time", max_tokens=16, temperature=0.9, seed=1234)
check(a.choices[0].text == b.choices[0].text, f"seed reproducibility: {a.choices[0].text!r}")

# Chat, whole and streamed.
msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
c = client.chat.completions.create(model=model, messages=msgs, max_tokens=16, temperature=0)
reply = c.choices[0].message.content
check(c.choices[0].message.role == "assistant" and len(reply) > 0, f"chat reply: {reply!r}")
parts = []
for chunk in client.chat.completions.create(model=model, messages=msgs, max_tokens=16, temperature=0, stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        parts.append(chunk.choices[0].delta.content)
check("".join(parts) == reply, f"streamed chat equals the whole one: {''.join(parts)!r}")

# Parallel sampling and the prefix cache.
c = client.completions.create(model=model, prompt=PROMPT, max_tokens=4, n=2, seed=3, temperature=0.9)
check(sorted(ch.index for ch in c.choices) == [0, 1] and c.usage.completion_tokens == 8,
      f"n=2: two choices, usage {c.usage}")
one = client.completions.create(model=model, prompt=PROMPT, max_tokens=4, seed=4, temperature=0.9)
check(one.choices[0].text == [ch.text for ch in c.choices if ch.index == 1][0],
      f"n=2: choice 1 is the request alone with seed + 1: {one.choices[0].text!r}")
details = one.usage.prompt_tokens_details
check(details is not None and details.cached_tokens is not None,
      f"usage.prompt_tokens_details.cached_tokens: {details}")

# Errors.
try:
    client.completions.create(model=model, prompt=PROMPT, max_tokens=4, n=17)
    check(False, "n=17 refused")
except openai.BadRequestError as e:
    check(e.status_code == 400 and "n" in str(e), f"n=17 → 400: {e}")
try:
    client.completions.create(model=model, prompt=PROMPT, max_tokens=4, best_of=2, stream=True)
    check(False, "best_of with stream refused")
except openai.BadRequestError as e:
    check(e.status_code == 400 and "best_of" in str(e), "best_of with stream → 400")
try:
    client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=4)
    check(False, "unknown model refused")
except openai.NotFoundError as e:
    check(e.status_code == 404, "unknown model → 404")
try:
    client.completions.create(model=model, prompt=PROMPT, max_tokens=-5)
    check(False, "negative max_tokens refused")
except openai.BadRequestError:
    check(True, "max_tokens=-5 → 400")

print("FAILED" if failures else "all passed")
sys.exit(1 if failures else 0)
