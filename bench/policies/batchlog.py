#!/usr/bin/env python3
"""Where a ring's time went, from kvasird's batch log (`[log] batches`).

  python3 bench/policies/batchlog.py FILE [--skip N] [--json]

Reads the JSON lines (one per micro-batch result, docs/config.md) and prints:
- how long the ring held 0, 1, 2, ... micro-batches (an empty slot is a
  stage left without work by the scheduler, not by the split);
- the bridge's turnaround: from a result to the next submission in the
  same slot (its own time, between two trips through the ring);
- each stage's busy seconds, in all and by phase: micro-batches with
  prompt tokens and decode-only ones. The head's share of the step differs
  between the two, so a split balanced over the run can be unbalanced in
  each phase in turn (docs/scheduler.md, "Layer split by measured time");
- each stage's idle seconds, inferred by replaying the micro-batches
  through the stages in submission order with their busy times;
- the bound that the phases set on the gain of keeping every stage busy:
  total work / the sum over phases of the slowest stage's work.

--skip drops the first N lines (kvasird's warm-up requests, say).

--what-if FIRST_LAYERS adds estimates, from the same busy times, of what
the ring could gain with every slot always refilled at once (a saturated
replay: micro-batch i enters when micro-batch i - depth has left the
tail), as run and with one change each:
- one more slot in the ring (depth + 1);
- a boundary of up to k layers that each micro-batch may move from one
  stage to the next (k = 1, 2), chosen per micro-batch to leave the tail
  soonest, then to free the first stage soonest (greedy, not optimal);
  a layer is taken to cost the first stage's busy time / FIRST_LAYERS (the
  layers the first stage holds). Two stages only;
- every micro-batch's busy times replaced by the mean of its group of 2
  or 8 consecutive ones (micro-batches of equal cost).
Each is total work / replayed time, the work not changed by the move. They
are models, not measurements: the replay as run is checked against the
log's own wall time, which it should match within the bridge's turnaround.
"""
import argparse
import json
import sys


def load(path, skip):
    out = []
    with open(path) as f:
        for i, line in enumerate(f):
            if i < skip or not line.strip():
                continue
            b = json.loads(line)
            if b["done_s"] < b["submit_s"]:
                sys.exit(f"{path}:{i + 1}: done_s before submit_s")
            out.append(b)
    if not out:
        sys.exit(f"{path}: no micro-batches")
    return sorted(out, key=lambda b: b["submit_s"])


def occupancy(batches):
    events = sorted([(b["submit_s"], 1) for b in batches] + [(b["done_s"], -1) for b in batches])
    held, last, time = 0, events[0][0], {}
    for t, d in events:
        time[held] = time.get(held, 0.0) + t - last
        last, held = t, held + d
    return time


def turnaround(batches):
    by_slot, gaps = {}, []
    for b in batches:
        by_slot.setdefault(b["slot"], []).append(b)
    for seq in by_slot.values():
        gaps += [n["submit_s"] - p["done_s"] for p, n in zip(seq, seq[1:]) if n["submit_s"] >= p["done_s"]]
    return sorted(gaps)


def replay(batches, n_stages):
    """Each stage's idle time before each micro-batch, stages taking them in submission order."""
    end = [batches[0]["submit_s"]] * n_stages
    idle = [0.0] * n_stages
    for b in batches:
        t = b["submit_s"]
        for i in range(n_stages):
            start = max(t, end[i])
            idle[i] += start - end[i]
            end[i] = start + max(b["stage_busy_s"][i], 0.0)
            t = end[i]
    return idle


def saturated(costs, depth, movable=0, layer_share=0.0):
    """Replayed seconds with micro-batch i entering when i - depth leaves the tail.

    costs: per micro-batch, each stage's busy seconds. movable > 0 (two
    stages): each micro-batch moves k in [-movable, movable] layers of
    layer_share x its first-stage time from the first stage to the second
    (k > 0) or back, k chosen to finish it soonest, then to free the
    stages before the tail soonest, then to move least.
    """
    n = len(costs[0])
    end, done = [0.0] * n, []
    for i, c in enumerate(costs):
        enter = done[i - depth] if i >= depth else 0.0
        best = None
        for k in range(-movable, movable + 1):
            shift = k * layer_share * c[0]
            if c[0] - shift < 0 or c[1] + shift < 0:
                continue
            cc = [c[0] - shift, c[1] + shift] + list(c[2:]) if movable else c
            t, ends = enter, []
            for s in range(n):
                t = max(t, end[s]) + cc[s]
                ends.append(t)
            key = (ends[-1], sum(ends), abs(k))
            if best is None or key < best[0]:
                best = (key, ends)
        end = best[1]
        done.append(end[-1])
    return max(done)


def what_if(batches, first_layers):
    costs = [[max(x, 0.0) for x in b["stage_busy_s"]] for b in batches]
    work = sum(sum(c) for c in costs)
    depth = max(occupancy(batches))
    out = {"depth": depth, "wall_s": max(b["done_s"] for b in batches) - batches[0]["submit_s"]}
    rows = [("as run", saturated(costs, depth)), ("one more slot", saturated(costs, depth + 1))]
    if len(costs[0]) == 2 and first_layers > 0:
        for k in (1, 2):
            rows.append((f"{k} movable layer(s)", saturated(costs, depth, k, 1.0 / first_layers)))
    for g in (2, 8):
        eq = []
        for i in range(0, len(costs), g):
            grp = costs[i:i + g]
            mean = [sum(c[s] for c in grp) / len(grp) for s in range(len(costs[0]))]
            eq += [mean] * len(grp)
        rows.append((f"equal cost in groups of {g}", saturated(eq, depth)))
    out["replays"] = [{"case": name, "replay_s": t, "gain": work / t} for name, t in rows]
    return out


def summarize(batches):
    n_stages = len(batches[0]["stage_busy_s"])
    wall = max(b["done_s"] for b in batches) - batches[0]["submit_s"]
    phases = {"prompt": [0.0] * n_stages, "decode": [0.0] * n_stages}
    counts = {"prompt": 0, "decode": 0}
    for b in batches:
        if len(b["stage_busy_s"]) != n_stages:
            sys.exit("lines with different stage counts")
        k = "prompt" if b["prompt_tokens"] > 0 else "decode"
        counts[k] += 1
        for i, s in enumerate(b["stage_busy_s"]):
            phases[k][i] += max(s, 0.0)
    total = [sum(p[i] for p in phases.values()) for i in range(n_stages)]
    work = sum(total)
    gaps = turnaround(batches)
    phase_max = sum(max(p) for p in phases.values() if any(p))
    return {
        "batches": len(batches),
        "failed": sum(not b["ok"] for b in batches),
        "wall_s": wall,
        "ring_held_s": {str(k): v for k, v in sorted(occupancy(batches).items())},
        "turnaround_ms": {
            "n": len(gaps),
            "p50": 1e3 * gaps[len(gaps) // 2] if gaps else 0.0,
            "p99": 1e3 * gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))] if gaps else 0.0,
            "sum_s": sum(gaps),
        },
        "stage_busy_s": total,
        "phase_batches": counts,
        "phase_busy_s": phases,
        "stage_idle_s": replay(batches, n_stages),
        "decode_rows": sum(b["decode_rows"] for b in batches),
        "prompt_tokens": sum(b["prompt_tokens"] for b in batches),
        "sampled": sum(b["sampled"] for b in batches),
        # With every stage busy all the time, the ring's speed-up over one
        # micro-batch at a time is work / slowest stage; within phases that
        # take turns it is work / (sum of each phase's slowest stage).
        "bound_split": work / max(max(total), 1e-12),
        "bound_phases": work / max(phase_max, 1e-12),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file")
    p.add_argument("--skip", type=int, default=0, help="drop the first N lines")
    p.add_argument("--json", action="store_true")
    p.add_argument("--what-if", type=int, default=0, metavar="FIRST_LAYERS",
                   help="add the saturated replays; FIRST_LAYERS = layers on the first stage")
    a = p.parse_args()
    batches = load(a.file, a.skip)
    s = summarize(batches)
    if a.what_if:
        s["what_if"] = what_if(batches, a.what_if)
    if a.json:
        print(json.dumps(s, indent=2))
        return
    f = lambda xs: " | ".join(f"{x:.2f}" for x in xs)
    print(f"{s['batches']} micro-batches ({s['failed']} failed) over {s['wall_s']:.2f} s")
    print("ring held " + ", ".join(f"{k}: {v:.2f} s" for k, v in s["ring_held_s"].items()))
    t = s["turnaround_ms"]
    print(f"bridge turnaround: p50 {t['p50']:.2f} ms, p99 {t['p99']:.2f} ms, {t['sum_s']:.2f} s in all")
    print(f"stage busy s: {f(s['stage_busy_s'])}; idle s (replayed): {f(s['stage_idle_s'])}")
    for k in ("prompt", "decode"):
        print(f"  {k} phase ({s['phase_batches'][k]} micro-batches): busy s {f(s['phase_busy_s'][k])}")
    print(f"tokens: {s['prompt_tokens']} prompt, {s['decode_rows']} decode rows, {s['sampled']} sampled")
    print(f"bound on the ring's gain: {s['bound_split']:.2f}x from the split, "
          f"{s['bound_phases']:.2f}x with the phases")
    if a.what_if:
        w = s["what_if"]
        print(f"saturated replay, depth {w['depth']} (the log's wall: {w['wall_s']:.2f} s; estimates):")
        for r in w["replays"]:
            print(f"  {r['case']}: {r['replay_s']:.2f} s, gain {r['gain']:.2f}x")


if __name__ == "__main__":
    main()
