#!/usr/bin/env bash
# The expert-load view through the real kvasird: a tiny Qwen3-MoE model (7
# experts, top 3, 2 layers; tests/support/write_tiny_model) on two CPU
# stages of one layer each. Checks, per stage:
#   - /kvasir/v1/stats `experts`: 7 experts, the routed counts sum to the
#     stage's tokens × top k × MoE layers held (3 × 1), and the tokens to
#     what the requests' usage says the ring ran (prompt + completion - 1
#     each, distinct prompts, so nothing comes from the prefix cache, and
#     ignore_eos: every request runs its max_tokens);
#   - /metrics: 7 kvasir_expert_routed_tokens_total series per stage, same sums;
#   - `kvasir top --once`: one experts line per stage;
# and prints the skewed-prompt figure: the imbalance (max / mean over the
# experts) over a prompt of one token repeated against varied text (the
# repeated token must be the more imbalanced; docs/model-formats.md, "Expert load").
#
# Usage: test_expert_routing.sh KVASIRD KVASIR SOURCE_DIR WRITE_TINY_MODEL
# Exit 0 = passed, anything else = failed.
set -uo pipefail

KVASIRD=${1:?kvasird path}
KVASIR=${2:?kvasir path}
SRC=${3:?source dir}
WRITER=${4:?write_tiny_model path}
. "$SRC/tests/integration/lib.sh"
WORK=$(mktemp -d /tmp/kvasir-expert-routing.XXXXXX)
SOCK="$WORK/kvasir.sock"
trap kv_cleanup EXIT

MODEL="$WORK/moe.gguf"
"$WRITER" qwen3moe "$MODEL" || { echo "write_tiny_model failed"; exit 1; }
cat > "$WORK/k.toml" <<CFG
[model]
path = "$MODEL"
[plan]
max_rows = 8
max_tokens = 256
[[stages]]
layers = "0-0"
threads = 1
[[stages]]
layers = "1-1"
threads = 1
[kv]
memory = "16MiB"
[server]
socket = "$SOCK"
CFG
kv_start "$KVASIRD" "$KVASIR" "$WORK/k.toml"

# complete PROMPT MAX_TOKENS: the response body (usage included).
complete() {
  python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": int(sys.argv[2]), "temperature": 0, "ignore_eos": True}))' \
    "$1" "$2" | kv_curl "$SOCK" -H 'Content-Type: application/json' -d @- http://x/v1/completions
}
stats() { kv_curl "$SOCK" http://x/kvasir/v1/stats; }

# 1. Varied text: the counts against the tokens the ring ran.
stats > "$WORK/s0.json"
: > "$WORK/usage.jsonl"
for p in "The quick brown fox jumps over the lazy dog." "Pack my box with five dozen liquor jugs!" \
  "How vexingly quick daft zebras jump." "Sphinx of black quartz, judge my vow." \
  "1 2 3 4 5 6 7 8 9 10, then some more numbers: 42, 17, 99." "Kvasir was the wisest of beings." \
  "Mixture-of-experts layers route each token to a few experts." "{\"json\": [1, 2, {\"k\": null}]}"; do
  complete "$p" 8 | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["usage"]))' \
    >> "$WORK/usage.jsonl" || bad "completion of '$p'"
done
stats > "$WORK/s1.json"
kv_curl "$SOCK" http://x/metrics > "$WORK/metrics.txt"
"$KVASIR" top --once --socket "$SOCK" > "$WORK/top.txt" 2>&1 || bad "kvasir top --once"
cat "$WORK/top.txt"

# 2. Skewed: one token repeated (every position's hidden state is the same,
# so every token picks the same 3 experts), then varied text again.
complete "$(printf 'a%.0s' $(seq 1 200))" 1 > /dev/null || bad "skewed completion"
stats > "$WORK/s2.json"
for p in "Varied text spreads its tokens over the experts, or so one hopes." \
  "Another sentence, with other words: copper, lantern, orbit, walnut." \
  "Zwei Sätze auf Deutsch. Und ein dritter, kürzer." "print(sum(i * i for i in range(10)))"; do
  complete "$p" 1 > /dev/null || bad "varied completion"
done
stats > "$WORK/s3.json"

python3 - "$WORK" <<'PY'
import json, re, sys
w = sys.argv[1]
load = lambda n: json.load(open(f"{w}/{n}.json"))
s0, s1, s2, s3 = (load(f"s{i}") for i in range(4))
fails = 0
def check(what, ok, detail=""):
    global fails
    print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
    fails += 0 if ok else 1

usage = [json.loads(l) for l in open(f"{w}/usage.jsonl") if l.strip()]
ran = sum(u["prompt_tokens"] + u["completion_tokens"] - 1 for u in usage)
cached = sum(u.get("prompt_tokens_details", {}).get("cached_tokens", 0) or 0 for u in usage)
metrics = open(f"{w}/metrics.txt").read()
for i, st in enumerate(s1["stages"]):
    e = st.get("experts")
    check(f"stage {i}: experts in the stats", e is not None, json.dumps(st))
    if e is None:
        continue
    check(f"stage {i}: 7 experts", e["n_experts"] == 7 and len(e["routed"]) == 7, json.dumps(e))
    d_tokens = st["tokens"] - s0["stages"][i]["tokens"]
    d_routed = sum(e["routed"]) - sum(s0["stages"][i]["experts"]["routed"])
    print(f"     stage {i}: {d_tokens} tokens ran, {d_routed} routed (token, choice) pairs; "
          f"usage says {ran} ({cached} cached)")
    check(f"stage {i}: routed = tokens x top 3 x 1 MoE layer", d_routed == d_tokens * 3,
          f"{d_routed} vs {d_tokens} * 3")
    check(f"stage {i}: routed_total = sum(routed)", e["routed_total"] == sum(e["routed"]))
    check(f"stage {i}: tokens = what the usage says the ring ran", d_tokens == ran - cached,
          f"{d_tokens} vs {ran} - {cached}")
    series = re.findall(r'^kvasir_expert_routed_tokens_total\{stage="%d",expert="(\d+)"\} (\S+)$' % i,
                        metrics, re.M)
    check(f"stage {i}: 7 series in /metrics", len(series) == 7, str(series))
    check(f"stage {i}: /metrics sums to the stats'",
          sum(float(v) for _, v in series) == sum(e["routed"]), str(series))
check("one # TYPE line", metrics.count("# TYPE kvasir_expert_routed_tokens_total counter") == 1)

def interval(a, b, i):
    ra, rb = a["stages"][i]["experts"]["routed"], b["stages"][i]["experts"]["routed"]
    d = [y - x for x, y in zip(ra, rb)]
    return d, (max(d) * len(d) / sum(d) if sum(d) else 0.0)
for i in range(len(s1["stages"])):
    dv, iv = interval(s0, s1, i)
    ds, isk = interval(s1, s2, i)
    dw, iw = interval(s2, s3, i)
    print(f"     stage {i}: imbalance (max/mean) varied text {iv:.2f} {dv}, "
          f"one token repeated {isk:.2f} {ds}, varied again {iw:.2f} {dw}")
    check(f"stage {i}: a repeated token is the more imbalanced", isk > iv and isk > iw)
    check(f"stage {i}: a repeated token takes 3 experts", sum(1 for c in ds if c) == 3, str(ds))
sys.exit(1 if fails else 0)
PY
[ $? -eq 0 ] || fails=$((fails + 1))
for i in 0 1; do
  grep -Eq "^$i +experts: imbalance [0-9.]+ \(max/mean\), hottest [0-9]+:[0-9]+%" "$WORK/top.txt" ||
    bad "kvasir top: stage $i's experts line"
done
kv_stop || bad "kvasird stopped with an error"
kv_finish "$WORK/kvasird.log"
