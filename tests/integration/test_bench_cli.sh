#!/usr/bin/env bash
# `kvasir bench` against the REAL kvasird (2 CPU stages, default model):
# its figures must agree with each other and with the daemon's own counters;
# a trace run; refusals of bad input; --compare-policies starting its own
# daemons, on a KV pool too small for the load (preemptions counted).
#
# Usage: test_bench_cli.sh KVASIRD KVASIR [SOURCE_DIR]
# Exit 0 = passed, 77 = skipped (no model file), anything else = failed.
set -uo pipefail

KVASIRD=${1:?kvasird path}
KVASIR=${2:?kvasir path}
SRC=${3:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/integration/lib.sh"
kv_setup bench-cli

# [log] batches: a line per micro-batch, relative to the config's folder.
kv_config '[kv]
memory = "64MiB"
[log]
batches = "batches.jsonl"' > "$WORK/kvasir.toml"
kv_start "$KVASIRD" "$KVASIR" "$WORK/kvasir.toml"
ok "kvasird ready"

engine() {  # engine FIELD: a counter of GET /kvasir/v1/stats
  curl -s --unix-socket "$SOCK" http://x/kvasir/v1/stats |
    python3 -c "import json,sys; print(json.load(sys.stdin)['engine']['$1'])"
}
gen0=$(engine tokens_generated); prompt0=$(engine tokens_prompt)

B=("$KVASIR" bench --socket "$SOCK")
"${B[@]}" --requests 8 --concurrency 4 --max-tokens 8 --prompt-len 16,40 --json \
  > "$WORK/run.json" 2> "$WORK/run.err"
expect "bench --json exits 0" "$?" "0"
check=$(python3 - "$WORK/run.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
bad = []
def want(cond, what):
    if not cond: bad.append(what)
want(s["completed"] == 8 and s["failed"] == 0, f"completed/failed {s['completed']}/{s['failed']}")
want(s["output_tokens"] == 64, f"output_tokens {s['output_tokens']} != 8x8")
want(s["prompt_tokens"] == 4 * 16 + 4 * 40, f"prompt_tokens {s['prompt_tokens']} != 224")
d = s["duration_s"]
want(d > 0, "duration")
want(abs(s["output_tok_s"] - 64 / d) < 1e-6 * s["output_tok_s"] + 1e-9, "output_tok_s != 64/duration")
want(abs(s["total_tok_s"] - 288 / d) < 1e-6 * s["total_tok_s"] + 1e-9, "total_tok_s != 288/duration")
want(abs(s["requests_per_s"] - 8 / d) < 1e-6 * s["requests_per_s"] + 1e-9, "requests_per_s")
want(s["ttft_ms"]["count"] == 8, "one TTFT per request")
want(s["itl_ms"]["count"] == 8 * 7, f"ITL samples {s['itl_ms']['count']} != 8x7")
want(s["e2e_ms"]["count"] == 8, "one E2E per request")
for k in ("ttft_ms", "itl_ms", "e2e_ms"):
    x = s[k]
    want(0 < x["p50"] <= x["p99"], f"{k}: 0 < p50 <= p99 ({x})")
    want(0 < x["mean"] <= x["p99"] * 8, f"{k}: mean {x['mean']}")
want(s["ttft_ms"]["p99"] <= s["e2e_ms"]["p99"], "TTFT p99 <= E2E p99")
want(s["e2e_ms"]["p99"] <= d * 1000 * 1.01, "E2E within the run")
want(s["preemptions"] == 0, f"preemptions {s['preemptions']} on a roomy pool")
w = s["kv_waste"]
want(s["kv_waste_samples"] == 0 or (w is not None and 0 <= w < 1), f"kv_waste {w}")
want(s["goodput"] is None, "no goodput without targets")
print("; ".join(bad) if bad else "consistent")
PY
)
expect "bench figures consistent" "$check" "consistent"
expect "daemon generated exactly 64 tokens" "$(( $(engine tokens_generated) - gen0 ))" "64"
expect "daemon prefilled exactly 224 prompt tokens" "$(( $(engine tokens_prompt) - prompt0 ))" "224"

# The batch log holds every micro-batch the scheduler saw (the warm-up's
# too) and every sampled row is a generated token; batchlog.py reads it.
curl -s --unix-socket "$SOCK" http://x/kvasir/v1/stats > "$WORK/stats.json"
check=$(python3 - "$WORK/batches.jsonl" "$WORK/stats.json" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
e = json.load(open(sys.argv[2]))["engine"]
bad = []
if len(lines) != e["timing"]["batches"]: bad.append(f"{len(lines)} lines, {e['timing']['batches']} batches")
if sum(b["sampled"] for b in lines) != e["tokens_generated"]:
    bad.append(f"sampled {sum(b['sampled'] for b in lines)} != generated {e['tokens_generated']}")
for b in lines:
    if not (b["ok"] and b["submit_s"] <= b["done_s"] and len(b["stage_busy_s"]) == 2
            and all(x > 0 for x in b["stage_busy_s"]) and b["rows"] >= b["sampled"] >= b["decode_rows"]
            and b["tokens"] >= b["prompt_tokens"] + b["decode_rows"] and b["rows"] > 0):
        bad.append(f"line {b}"); break
if sum(b["prompt_tokens"] for b in lines) < 224: bad.append("fewer prompt tokens than the bench sent")
print("; ".join(bad) if bad else "consistent")
PY
)
expect "batch log: a line per batch, its sampled rows the tokens generated" "$check" "consistent"
out=$(python3 "$SRC/bench/policies/batchlog.py" "$WORK/batches.jsonl" 2>&1)
[[ "$out" == *"bound on the ring's gain"* ]] && ok "batchlog.py reads it" || bad "batchlog.py: $out"
# The saturated replay: a hand-worked timeline, then the daemon's log. No
# micro-batch can enter before the one `depth` ahead of it has left, so the
# replay as run never ends after the log's wall, and a deeper ring never later.
check=$(python3 - "$SRC/bench/policies" "$WORK/batches.jsonl" <<'PY'
import json, subprocess, sys
sys.path.insert(0, sys.argv[1])
import batchlog
bad = []
# Stage times 1 | 2 s, two slots: the tail sets the pace, 4 x 2 + 1 = 9 s.
if abs(batchlog.saturated([[1.0, 2.0]] * 4, 2) - 9.0) > 1e-9: bad.append("hand timeline")
# 2 | 1 s each: the first stage sets the pace (8 x 2 + 1 = 17 s); a movable
# quarter of it evens them at 1.5 | 1.5 (8 x 1.5 + 1.5 = 13.5 s).
heavy = [[2.0, 1.0]] * 8
if abs(batchlog.saturated(heavy, 2) - 17.0) > 1e-9: bad.append("first stage's pace")
if abs(batchlog.saturated(heavy, 2, 1, 0.25) - 13.5) > 1e-9: bad.append("movable")
out = subprocess.run([sys.executable, sys.argv[1] + "/batchlog.py", sys.argv[2], "--what-if", "15",
                      "--json"], capture_output=True, text=True)
w = json.loads(out.stdout)["what_if"] if out.returncode == 0 else None
if w is None:
    bad.append("--what-if: " + out.stderr)
else:
    r = {x["case"]: x["replay_s"] for x in w["replays"]}
    if not 0 < r["as run"] <= w["wall_s"] + 0.01: bad.append(f"as run {r['as run']} vs wall {w['wall_s']}")
    if r["one more slot"] > r["as run"] + 1e-9: bad.append("a deeper ring replayed later")
    if len(r) != 6: bad.append(f"cases {sorted(r)}")
print("; ".join(bad) if bad else "consistent")
PY
)
expect "batchlog.py --what-if: the replay within the log's wall" "$check" "consistent"
# A log that cannot be written stops a second daemon before it starts anything.
kv_config '[log]
batches = "/nonexistent-kvasir-dir/b.jsonl"' | sed "s#$SOCK#$WORK/unused.sock#" > "$WORK/badlog.toml"
timeout 60 "$KVASIRD" --config "$WORK/badlog.toml" > "$WORK/badlog.log" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "log.batches: cannot write '/nonexistent-kvasir-dir/b.jsonl'" "$WORK/badlog.log" &&
  ok "unwritable batch log refused at start" || bad "unwritable batch log: rc=$rc $(cat "$WORK/badlog.log")"

# A trace: timed arrivals, a text prompt, per-request max_tokens; goodput.
cat > "$WORK/trace.jsonl" <<'T'
# t (s), prompt or prompt_len, max_tokens
{"t": 0, "prompt_len": 20, "max_tokens": 5}
{"t": 0.3, "prompt": "The capital of France is", "max_tokens": 6}
{"t": 0.6, "prompt_len": 33}
T
"${B[@]}" --trace "$WORK/trace.jsonl" --max-tokens 4 --ttft-target 60000 --itl-target 60000 \
  --json > "$WORK/trace.json" 2>&1
expect "bench --trace exits 0" "$?" "0"
check=$(python3 - "$WORK/trace.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
ok = (s["completed"] == 3 and s["output_tokens"] == 5 + 6 + 4 and s["duration_s"] >= 0.6
      and s["itl_ms"]["count"] == 4 + 5 + 3 and s["goodput"]["requests"] == 3)
print("consistent" if ok else json.dumps(s))
PY
)
expect "trace run: 3 requests, 15 tokens, arrivals honoured, all within generous targets" "$check" "consistent"

table=$("${B[@]}" --requests 2 --max-tokens 3 --prompt-len 8 --progress always 2> "$WORK/bar.err")
[[ "$table" == *"output tok/s"* && "$table" == *"ITL p99 ms"* ]] && ok "readable table" || bad "table: $table"
grep -q '2/2' "$WORK/bar.err" && ok "progress bar on stderr" || bad "progress bar: $(cat "$WORK/bar.err")"

# Refusals: a bad trace line, a prompt past the context, a bad option.
echo '{"t": 0, "prompt_len": -3}' > "$WORK/bad.jsonl"
err=$("${B[@]}" --trace "$WORK/bad.jsonl" 2>&1); rc=$?
[ $rc -ne 0 ] && [[ "$err" == *"line 1"* ]] && ok "bad trace refused: $err" || bad "bad trace: rc=$rc $err"
err=$("${B[@]}" --requests 1 --prompt-len 100000 --max-tokens 4 2>&1); rc=$?
[ $rc -ne 0 ] && [[ "$err" == *context* ]] && ok "prompt past the context refused: $err" || bad "long prompt: rc=$rc $err"
"${B[@]}" --concurrency 0 > /dev/null 2>&1 && bad "--concurrency 0 accepted" || ok "--concurrency 0 refused"
kv_stop
expect "kvasird exits 0" "$?" "0"

# --compare-policies starts one daemon per policy. The pool, 8 blocks of 16
# tokens (180 KiB each for 15 layers), holds one request of 40 + 56 tokens
# (6 blocks) but not the 4 at once that continuous batching admits as their
# prompts fit: their decodes run the pool dry, so it must preempt, and every
# request still completes. naive runs one at a time and never preempts.
kv_config '[kv]
memory = "1440KiB"' > "$WORK/small.toml"
TMPDIR="$WORK" "$KVASIR" bench --compare-policies --config "$WORK/small.toml" --kvasird "$KVASIRD" \
  --policies naive,continuous+chunked --requests 8 --concurrency 4 --max-tokens 56 \
  --prompt-len 40 --json > "$WORK/cmp.json" 2> "$WORK/cmp.err"
expect "compare-policies exits 0" "$?" "0"
check=$(python3 - "$WORK/cmp.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["policies"]
n, c = p["naive"], p["continuous+chunked"]
bad = []
for name, s in p.items():
    if s.get("completed") != 8 or s.get("output_tokens") != 8 * 56:
        bad.append(f"{name}: {s}")
if n.get("preemptions") != 0: bad.append(f"naive preempted {n.get('preemptions')}")
for name, s in p.items():  # the split each daemon ran, and that both stages worked
    st = s.get("stages", [])
    if [x.get("layers") for x in st] != ["0-14", "15-29"] or not all(x.get("busy_s", 0) > 0 for x in st):
        bad.append(f"{name}: stages {st}")
if not c.get("preemptions", 0) > 0: bad.append(f"continuous+chunked did not preempt: {c.get('preemptions')}")
print("; ".join(bad) if bad else "consistent")
PY
)
expect "compare-policies: both complete all 8 on a small pool, chunked preempts, stages recorded" "$check" "consistent"
TMPDIR="$WORK" "$KVASIR" bench --compare-policies --config "$WORK/small.toml" --kvasird "$KVASIRD" \
  --policies naive --requests 1 --max-tokens 2 --prompt-len 8 > "$WORK/cmp.txt" 2>&1
grep -q 'naive' "$WORK/cmp.txt" && ok "compare table" || bad "compare table: $(cat "$WORK/cmp.txt")"
pgrep -f "config $WORK/kvasir-bench\\." > /dev/null && bad "a compared daemon is still running" || ok "compared daemons stopped"

[ $fails -eq 0 ] && echo "all passed" || { echo "$fails FAILED"; cat "$WORK/cmp.err" 2>/dev/null; tail -20 "$WORK/kvasird.log"; }
exit $((fails > 0))
