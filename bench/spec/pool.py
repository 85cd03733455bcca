"""bench/spec's pooled judgement of several rounds against "none".

One run at 16 concurrent on set a is ~2,520 tokens, so its ITL p99 is its
~25 longest gaps, and "none"'s own p99 moved over 143-216 ms across six
rounds: one run cannot resolve the 5% the target allows. Here every gap of
every round is pooled per configuration, set and concurrency, and the ratio
to "none" gets a bootstrap interval:

  pooled(rounds) -> {itl_p50, itl_p99, tok_s, gaps, rounds}: ITL over every
      gap of every round (ms), throughput the mean of the rounds' tok/s.
  itl_interval(base, cfg, q) -> (ratio, lo, hi): the pooled ITL quantile q's
      ratio cfg / base, and its bootstrap interval. Resampled: rounds, then
      requests within each drawn round, never single gaps (the gaps of one
      request share its prompt, its batch and its drafts, and those of one
      round the machine's load then, so they are correlated); paired (round
      i of both configurations, which ran next to each other, and one draw
      of request ids for both); a fixed seed, RESAMPLES draws, the central
      LEVEL. With over_rounds=False every round is kept once and only the
      requests are resampled: what the rounds' own spread adds shows in the
      difference.
  tok_interval(base, cfg) -> (ratio, lo, hi): the ratio of the rounds' mean
      tok/s, and a Student t interval (LEVEL) on the mean of the per-round
      log ratios (paired by round index). Throughput is one figure a round,
      so there is nothing finer to resample, and a bootstrap of 2 to 8
      rounds is far too narrow: on set b at 16 concurrent a configuration
      that drafted nothing (the same work as "none") read 0.98x-1.98x in
      its four rounds, and the bootstrap of those rounds excluded 1.0.
  verdict(lo, hi, bound, upper): "met", "not met" or "unresolved" (the
      interval straddles the bound).
  report(base_rounds, cfg_rounds) -> dict of all of it; line(name, key, r).

A round is {"tok_s": float, "gaps": {request id: [gap ms, ...]}, ...}.
"""
import math
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "peers"))
from client import pct  # noqa: E402  (the nearest-rank percentile of every bench figure)

RESAMPLES = 1000
LEVEL = 0.90
SEED = 20261207
ITL_BOUND = 1.05   # ITL p99 no worse than none's by more than 5%
TOK_BOUND = 0.95   # throughput at least 0.95x none's


def pooled(rounds):
    gaps = [g for r in rounds for gs in r["gaps"].values() for g in gs]
    return {"rounds": len(rounds), "gaps": len(gaps), "itl_p50": pct(gaps, 50),
            "itl_p99": pct(gaps, 99), "tok_s": sum(r["tok_s"] for r in rounds) / len(rounds)}


def interval(values):
    """The central LEVEL of the bootstrap values (nearest rank)."""
    tail = (1 - LEVEL) / 2 * 100
    return pct(values, tail), pct(values, 100 - tail)


def itl_interval(base, cfg, q=99, over_rounds=True, resamples=RESAMPLES):
    """The pooled ITL quantile q's ratio cfg / base and its bootstrap
    interval. A draw takes round indices (paired: round i of both, which
    ran next to each other; with over_rounds=False every round once), then
    in each drawn round as many requests as it has (paired: one draw of ids
    for both), and pools the drawn requests' gaps. resamples=0: the ratio
    alone."""
    n = min(len(base), len(cfg))
    ids = [sorted(i for i in base[r]["gaps"] if base[r]["gaps"][i] and cfg[r]["gaps"].get(i))
           for r in range(n)]
    if not any(ids):
        return float("nan"), float("nan"), float("nan")

    def ratio(units):
        c = pct([g for r, i in units for g in cfg[r]["gaps"][i]], q)
        b = pct([g for r, i in units for g in base[r]["gaps"][i]], q)
        return c / b if b else 1.0 if not c else float("inf")  # gaps of 0: held-back text
    rnd = random.Random(SEED)
    ratios = []
    for _ in range(resamples):
        rs = [rnd.randrange(n) for _ in range(n)] if over_rounds else range(n)
        ratios.append(ratio([(r, ids[r][rnd.randrange(len(ids[r]))]) for r in rs for _ in ids[r]]))
    return (ratio([(r, i) for r in range(n) for i in ids[r]]),) + interval(ratios)


# Student t's 0.95 quantile by degrees of freedom (a 90% two-sided
# interval); past 20, the value at 21 (larger than the true one: wider).
T95 = [6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
       1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.721]


def tok_interval(base, cfg):
    n = min(len(base), len(cfg))
    if any(r["tok_s"] <= 0 for r in base[:n] + cfg[:n]):  # a round that produced nothing
        return float("nan"), float("nan"), float("nan")
    whole = sum(r["tok_s"] for r in cfg[:n]) / sum(r["tok_s"] for r in base[:n])
    logs = [math.log(cfg[i]["tok_s"] / base[i]["tok_s"]) for i in range(n)]
    if n < 2:
        return whole, float("nan"), float("nan")
    mean = sum(logs) / n
    half = T95[min(n - 2, len(T95) - 1)] * math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1) / n)
    return whole, math.exp(mean - half), math.exp(mean + half)


def verdict(lo, hi, bound, upper):
    """upper: the figure must stay at or below bound (ITL), else at or above
    it (throughput)."""
    if lo != lo or hi != hi:  # NaN: nothing to judge
        return "unresolved"
    good, bad = (hi <= bound, lo > bound) if upper else (lo >= bound, hi < bound)
    return "met" if good else "not met" if bad else "unresolved"


def report(base, cfg):
    """The pooled figures of both, the ratios with intervals, the per-round
    ratios (paired by round index) and the verdicts."""
    p99 = itl_interval(base, cfg, 99)
    p99_requests = itl_interval(base, cfg, 99, over_rounds=False)
    tok = tok_interval(base, cfg)
    n = min(len(base), len(cfg))
    div = lambda x, y: x / y if y else float("nan")  # noqa: E731
    per_round = [{k: div(cfg[i][k], base[i][k]) for k in ("tok_s", "itl_p99")} for i in range(n)]
    v_itl, v_tok = verdict(p99[1], p99[2], ITL_BOUND, True), verdict(tok[1], tok[2], TOK_BOUND, False)
    both = "not met" if "not met" in (v_itl, v_tok) else "met" if v_itl == v_tok == "met" else "unresolved"
    return {"none": pooled(base), "config": pooled(cfg), "itl_p50_ratio": itl_interval(base, cfg, 50, resamples=0)[0],
            "itl_p99_ratio": list(p99), "itl_p99_ratio_requests_only": list(p99_requests),
            "tok_s_ratio": list(tok), "per_round": per_round,
            "verdict": {"itl_p99": v_itl, "tok_s": v_tok, "target": both},
            "bootstrap": {"resamples": RESAMPLES, "level": LEVEL, "seed": SEED,
                          "units": "rounds, then requests in each (paired)"}}


def line(name, key, r):
    c, b = r["config"], r["none"]
    p99, tok, req = r["itl_p99_ratio"], r["tok_s_ratio"], r["itl_p99_ratio_requests_only"]
    rounds = " ".join(f"{x['tok_s']:.2f}/{x['itl_p99']:.2f}" for x in r["per_round"])
    return (f"  {name:8s} {key:6s} {c['rounds']} rounds, {c['gaps']} gaps (none {b['gaps']}): "
            f"ITL p50 {c['itl_p50']:.1f} ms ({b['itl_p50']:.1f}), p99 {c['itl_p99']:.1f} ms "
            f"({b['itl_p99']:.1f}) ratio {p99[0]:.2f} [{p99[1]:.2f}, {p99[2]:.2f}] (requests only "
            f"[{req[1]:.2f}, {req[2]:.2f}]); tok/s "
            f"{c['tok_s']:.1f} ({b['tok_s']:.1f}) ratio {tok[0]:.2f} [{tok[1]:.2f}, {tok[2]:.2f}]\n"
            f"           per round tok/s / ITL p99 ratio: {rounds}\n"
            f"           target (ITL p99 <= {ITL_BOUND}x, tok/s >= {TOK_BOUND}x): "
            f"{r['verdict']['target'].upper()} (ITL p99 {r['verdict']['itl_p99']}, "
            f"tok/s {r['verdict']['tok_s']})")


def _rounds(values_by_round, tok):
    """Synthetic rounds: [[request gaps, ...] per round] -> round dicts."""
    return [{"tok_s": t, "itl_p99": pct([g for gs in req for g in gs], 99),
             "gaps": {f"r{j}": gs for j, gs in enumerate(req)}}
            for req, t in zip(values_by_round, tok)]


def self_test():
    """Known answers: the pooling, the paired request bootstrap, the verdicts."""
    # 1..1000 ms spread over 2 rounds x 5 requests x 100 gaps: pooled p99 is
    # the 990th value, p50 the 501st (nearest rank), tok/s the mean.
    vals = list(range(1, 1001))
    base = _rounds([[vals[r * 500 + j * 100:r * 500 + j * 100 + 100] for j in range(5)] for r in range(2)],
                   [100.0, 110.0])
    p = pooled(base)
    assert (p["itl_p99"], p["itl_p50"], p["tok_s"], p["gaps"]) == (990, 501, 105.0, 1000), p
    # Every gap 10% longer, throughput 4% lower: the paired bootstrap has no
    # spread at all, so the ratios and both ends of the intervals are exact.
    slow = _rounds([[[g * 1.1 for g in gs] for gs in r["gaps"].values()] for r in base], [96.0, 105.6])
    r = report(base, slow)
    assert all(abs(x - 1.1) < 1e-9 for x in r["itl_p99_ratio"]), r["itl_p99_ratio"]
    assert all(abs(x - 0.96) < 1e-9 for x in r["tok_s_ratio"]), r["tok_s_ratio"]
    assert r["verdict"] == {"itl_p99": "not met", "tok_s": "met", "target": "not met"}, r["verdict"]
    assert report(base, base)["verdict"]["target"] == "met"
    # A tail carried by one request of 20: 20 of its gaps at 100 ms among
    # 20 x 50 gaps of 10 ms (1.96% > 1%, so the whole p99 ratio is 10). A
    # draw leaves that request out with probability (19/20)^20 = 0.36, so
    # the interval runs from 1.0 to 10 and the verdict is unresolved.
    # Resampling gaps instead would give ~[10, 10], a false "not met".
    flat = [[10.0] * 50 for _ in range(20)]
    tail = [[10.0] * 30 + [100.0] * 20] + [[10.0] * 50 for _ in range(19)]
    ratio, lo, hi = itl_interval(_rounds([flat], [1.0]), _rounds([tail], [1.0]))
    assert (ratio, lo, hi) == (10.0, 1.0, 10.0), (ratio, lo, hi)
    assert verdict(lo, hi, ITL_BOUND, True) == "unresolved"
    assert itl_interval(_rounds([flat], [1.0]), _rounds([tail], [1.0])) == (ratio, lo, hi)  # fixed seed
    # Rounds that disagree: every gap half as long in round 1, twice as long
    # in round 2. Pooled, round 2 holds the tail (ratio 2) and resampling
    # requests alone is sure of it; resampling rounds draws round 1 twice a
    # quarter of the time (ratio 0.5): unresolved.
    two = _rounds([flat, flat], [1.0, 1.0])
    swing = _rounds([[[g * 0.5 for g in gs] for gs in flat], [[g * 2 for g in gs] for gs in flat]], [1.0, 1.0])
    assert itl_interval(two, swing, over_rounds=False) == (2.0, 2.0, 2.0)
    assert itl_interval(two, swing) == (2.0, 0.5, 2.0), itl_interval(two, swing)
    # Throughput ratios 0.90 and 1.00 in two rounds: log ratios ln 0.9 and
    # 0, their mean's standard error -ln(0.9) / 2, t(1) = 6.314; one round
    # gives no interval.
    spread = tok_interval(_rounds([flat, flat], [100.0, 100.0]), _rounds([flat, flat], [90.0, 100.0]))
    m, h = math.log(0.9) / 2, 6.314 * -math.log(0.9) / 2
    assert abs(spread[0] - 0.95) < 1e-12 and abs(spread[1] - math.exp(m - h)) < 1e-12, spread
    assert abs(spread[2] - math.exp(m + h)) < 1e-12 and verdict(*spread[1:], TOK_BOUND, False) == "unresolved"
    # The A/A rounds of set b at 16 (ngram drafted nothing): unresolved, not met.
    b16 = tok_interval(_rounds([flat] * 4, [164.4, 210.2, 229.6, 191.4]),
                       _rounds([flat] * 4, [189.0, 205.2, 364.7, 378.5]))
    assert b16[1] < 1.0 < b16[2], b16
    assert verdict(*tok_interval(_rounds([flat], [1.0]), _rounds([flat], [2.0]))[1:], TOK_BOUND, False) == "unresolved"
    assert verdict(0.9, 1.0, TOK_BOUND, False) == "unresolved"
    # Gaps of 0 (text held back and released at once) in a drawn request:
    # no division by zero.
    zero = _rounds([[[0.0] * 10, [5.0] * 10]], [1.0])
    assert itl_interval(zero, zero, 50) == (1.0, 1.0, 1.0)
    assert tok_interval(_rounds([flat], [0.0]), _rounds([flat], [1.0]))[0] != 0.0
    assert verdict(0.90, 0.94, TOK_BOUND, False) == "not met" and verdict(1.06, 1.2, ITL_BOUND, True) == "not met"
    print("bench/spec pool self-test: ok")
