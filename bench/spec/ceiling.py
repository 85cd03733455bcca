"""The ceiling of an ngram drafter (prompt lookup), offline.

Given a request's prompt token ids and the greedy output ids the target
model wrote without speculation, replay decoding as a verifier would see it:
at each step the drafter looks for the longest recent n-gram (n from
ngram_max down to ngram_min) that ends the context (prompt + output so far)
and occurred earlier in it, and proposes up to k tokens that followed its
latest earlier occurrence. Greedy verification accepts the proposal's
longest prefix equal to the real output; the step then emits the accepted
tokens plus the target's own next token. Under greedy decoding this is
exactly what the real drafter would get, so the figures are a ceiling only
in that they ignore the cost of verifying the rejected drafts.

  simulate(prompt, output, k, ngram_max, ngram_min) -> dict
  proposals(prompt, output, ngram_max, ngram_min, k_max) -> per-step drafts
  forced_proposals(pieces, keys, k_max) -> an estimate of grammar-forced drafts
  self_test() -> raises AssertionError on a wrong answer
"""


def proposals(prompt, output, ngram_max=4, ngram_min=2, k_max=8):
    """For each i in 0..len(output)-1, the up-to-k_max tokens the drafter
    proposes when the context is prompt + output[:i] (an empty list: no
    n-gram matched). The context only ever grows by output tokens whatever
    k is, so one pass serves every k."""
    full = list(prompt) + list(output)
    latest = [dict() for _ in range(ngram_max + 1)]  # n -> ngram -> latest start
    next_end = 0  # n-grams ending before this index are in `latest`
    out = []
    for i in range(len(output)):
        ctx_len = len(prompt) + i
        # Index every n-gram ending at next_end that has a follower in the context.
        while next_end + 1 < ctx_len:
            for n in range(ngram_min, ngram_max + 1):
                if next_end - n + 1 >= 0:
                    latest[n][tuple(full[next_end - n + 1:next_end + 1])] = next_end - n + 1
            next_end += 1
        draft = []
        for n in range(ngram_max, ngram_min - 1, -1):
            if ctx_len < n:
                continue
            s = latest[n].get(tuple(full[ctx_len - n:ctx_len]))
            if s is not None:
                draft = full[s + n:min(s + n + k_max, ctx_len)]
                break
        out.append(draft)
    return out


def forced_proposals(pieces, keys, k_max=8):
    """An estimate of grammar-forced drafts (XGrammar's jump-forward) on a
    JSON-schema output. XGrammar writes required properties in the
    schema's order, so once a key's opening quote is written, the key
    `keys` (in schema order) expects next is forced whole, with its
    closing quote; a key written out of that order (a grammar that allows
    any order) is forced only from where it matches one key not yet
    written. Whitespace is free between JSON tokens, so nothing else is.
    `pieces` are the output's token texts. At token i, if it starts inside
    a forced span, the draft is the run of tokens lying wholly inside that
    span (as the model tokenized them: optimistic where a jump-forward
    would tokenize the forced string otherwise). Drafts are indices into
    the output, so simulate() accepts them all."""
    text = "".join(pieces)
    found = sorted((text.find(f'"{k}"'), k) for k in keys if text.find(f'"{k}"') >= 0)
    spans, left = [], list(keys)
    for at, key in found:
        others = [o for o in left if o != key]
        u = 0 if left and left[0] == key else next(
            n for n in range(len(key) + 1) if not any(o.startswith(key[:n]) for o in others))
        spans.append((at + 1 + u, at + len(key) + 2))  # the rest of the key + closing quote
        left.remove(key)
    starts, pos = [], 0
    for p in pieces:
        starts.append(pos)
        pos += len(p)
    ends = starts[1:] + [pos]
    inside = [next((sp for sp in spans if sp[0] <= b and e <= sp[1] and e > b), None)
              for b, e in zip(starts, ends)]
    out = []
    for i in range(len(pieces)):
        j = i
        while j < len(pieces) and j - i < k_max and inside[j] is not None and inside[j] == inside[i]:
            j += 1
        out.append(list(range(i, j)))
    return out


def simulate(prompt, output, k, ngram_max=4, ngram_min=2, props=None):
    """Replay greedy decoding with drafts of at most k tokens. Returns
    {"steps", "tokens", "proposed", "accepted", "drafted_steps",
    "tokens_per_step", "mean_accepted_length", "accepted_fraction",
    "acceptance_rate"}: tokens_per_step counts every step,
    mean_accepted_length only the steps that carried a draft (vLLM's
    1 + accepted / num_drafts, what the daemon's counters give),
    accepted_fraction the output tokens that came from accepted drafts."""
    props = props if props is not None else proposals(prompt, output, ngram_max, ngram_min, k)
    i = steps = proposed = accepted = drafted = 0
    while i < len(output):
        draft = props[i][:k]
        drafted += 1 if draft else 0
        a = 0
        while a < len(draft) and i + a < len(output) and draft[a] == output[i + a]:
            a += 1
        # The target's own token follows the accepted drafts (bonus token),
        # unless the drafts already reached the end of the output.
        i += a + 1
        steps += 1
        proposed += len(draft)
        accepted += a
    n = len(output)
    return {"steps": steps, "tokens": n, "proposed": proposed, "accepted": accepted,
            "drafted_steps": drafted, "tokens_per_step": n / steps if steps else 0.0,
            "mean_accepted_length": 1 + accepted / drafted if drafted else 1.0,
            "accepted_fraction": accepted / n if n else 0.0,
            "acceptance_rate": accepted / proposed if proposed else 0.0}


def aggregate(pairs, ks, ngram_max=4, ngram_min=2, props=None):
    """simulate() over [(prompt, output)] for each k in ks, summed then
    divided: [{"k", "steps", "tokens", "proposed", "accepted",
    "tokens_per_step", "accepted_fraction", "acceptance_rate"}]. `props`:
    each pair's drafts (default: the ngram drafter's)."""
    if props is None:
        props = [proposals(p, o, ngram_max, ngram_min, max(ks)) for p, o in pairs]
    rows = []
    for k in ks:
        tot = {"steps": 0, "tokens": 0, "proposed": 0, "accepted": 0, "drafted_steps": 0}
        for (prompt, output), pr in zip(pairs, props):
            r = simulate(prompt, output, k, ngram_max, ngram_min, props=pr)
            for key in tot:
                tot[key] += r[key]
        s, n = tot["steps"], tot["tokens"]
        d = tot["drafted_steps"]
        rows.append(dict(tot, k=k, tokens_per_step=n / s if s else 0.0,
                         mean_accepted_length=1 + tot["accepted"] / d if d else 1.0,
                         accepted_fraction=tot["accepted"] / n if n else 0.0,
                         acceptance_rate=tot["accepted"] / tot["proposed"] if tot["proposed"] else 0.0))
    return rows


def self_test():
    # The output copies the prompt's "3 4 5 6 7" after writing "3 4".
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    output = [3, 4, 5, 6, 7, 9]
    p = proposals(prompt, output, 4, 2, 8)
    assert p[0] == [], p           # context ends "7 8": no earlier "7 8"
    assert p[1] == [], p           # "8 3": not earlier
    # "3 4" matched at 2: its followers, on into the output written so far.
    assert p[2] == [5, 6, 7, 8, 3, 4], p
    r = simulate(prompt, output, 8, 4, 2)
    # steps: 3 (plain), 4 (plain), then 5 6 7 accepted + bonus 9: 3 steps for 6 tokens.
    assert r == {"steps": 3, "tokens": 6, "proposed": 6, "accepted": 3, "drafted_steps": 1,
                 "tokens_per_step": 2.0, "mean_accepted_length": 4.0,
                 "accepted_fraction": 0.5, "acceptance_rate": 0.5}, r
    assert proposals(prompt, output, 4, 2, 2)[2] == [5, 6], "k_max bounds the draft"
    r1 = simulate(prompt, output, 1, 4, 2)
    assert r1["accepted"] == 2 and r1["steps"] == 4, r1  # 3, 4, (5)+6, (7)+9
    # The latest occurrence wins, and the output's own tokens count as context.
    p = proposals([5, 6, 1, 5, 6, 2], [5, 6, 2, 0], 2, 2, 3)
    assert p[2] == [2, 5, 6], p
    # Forced: after `{"` the only key `ab` and its quote are forced; values are not.
    pieces = ['{"', 'a', 'b', '":', ' 1', '}']
    fp = forced_proposals(pieces, ["ab"], 8)
    assert fp[1] == [1, 2] and fp[0] == [] and fp[3] == [] and fp[4] == [], fp
    r = simulate(list(range(6)), list(range(6)), 8, props=fp)
    assert r["steps"] == 4 and r["accepted"] == 2, r  # {", a b + bonus ":, 1, }
    # Two keys sharing "a", written in schema order: each is forced whole.
    pieces = ['{"', 'a', 'x', 'y', '":', '1', ',"', 'a', 'b', '":', '2', '}']
    fp = forced_proposals(pieces, ["axy", "ab"], 8)
    assert fp[1] == [1, 2, 3] and fp[7] == [7, 8], fp
    # Out of schema order: the first is forced after its "x" only; the last
    # is the only one left, so all of it is forced.
    fp = forced_proposals(pieces, ["ab", "axy"], 8)
    assert fp[1] == [] and fp[2] == [] and fp[3] == [3] and fp[7] == [7, 8], fp
    # Nothing repeats: no drafts, one token per step.
    r = simulate([1, 2, 3], [4, 5, 6, 7], 8)
    assert r["steps"] == 4 and r["proposed"] == 0 and r["tokens_per_step"] == 1.0, r
    rows = aggregate([(prompt, output), ([1, 2, 3], [4, 5, 6, 7])], [1, 8])
    assert rows[1]["steps"] == 7 and rows[1]["tokens"] == 10 and rows[1]["accepted"] == 3, rows
    return True
