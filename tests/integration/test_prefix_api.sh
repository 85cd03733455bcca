#!/usr/bin/env bash
# Prefix caching and parallel sampling through the REAL kvasird (a 2-stage
# CPU plan on the default model), over its Unix socket with curl and the
# kvasir CLI: n with a seed (choice i is the request alone with seed + i),
# streamed choices with their index, best_of and its 400 with stream,
# cached_tokens, cache_salt separation, the stats and metrics, and the
# bench's shared-prefix, chat and n workloads.
#
# Usage: test_prefix_api.sh KVASIRD KVASIR [SOURCE_DIR]
# Exit 0 = passed, 77 = skipped (no model file), anything else = failed.
set -uo pipefail

KVASIRD=${1:?kvasird path}
KVASIR=${2:?kvasir path}
SRC=${3:-$(cd "$(dirname "$0")/../.." && pwd)}
MODEL="$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$MODEL" ] || { echo "SKIP: $MODEL is missing (scripts/fetch-model)"; exit 77; }

WORK=$(mktemp -d /tmp/kvasir-prefix-api.XXXXXX)
SOCK="$WORK/kvasir.sock"
PID=
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
expect() {  # expect WHAT ACTUAL WANTED
  if [ "$2" == "$3" ]; then ok "$1"; else bad "$1: got '$2', want '$3'"; fi
}

cat > "$WORK/kvasir.toml" <<EOF
[model]
path = "$MODEL"
[plan]
max_rows = 8
max_tokens = 256
[[stages]]
layers = "0-14"
device = "cpu"
threads = 1
[[stages]]
layers = "15-29"
device = "cpu"
threads = 1
[kv]
memory = "64MiB"
[server]
socket = "$SOCK"
EOF

"$KVASIRD" --config "$WORK/kvasir.toml" > "$WORK/kvasird.log" 2>&1 &
PID=$!
if ! "$KVASIR" status --wait 180 --socket "$SOCK" > /dev/null; then
  echo "kvasird did not become ready; its log:"; cat "$WORK/kvasird.log"; exit 1
fi
grep -q "prefix caching on" "$WORK/kvasird.log" && ok "log: prefix caching on" || bad "log: no 'prefix caching on'"

C=(curl -s --max-time 300 --unix-socket "$SOCK" -H 'Content-Type: application/json')
post() { "${C[@]}" -d "$1" http://x/v1/completions; }
jq_py() { python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"; }
PROMPT="Once upon a time there was a little fox who lived in the forest near a wide river, and every morning"

# n = 4 with a seed: choice i is the request sent alone with seed + i.
many=$(post "{\"prompt\":\"$PROMPT\",\"max_tokens\":8,\"n\":4,\"seed\":7,\"temperature\":0.8}")
expect "n=4: four choices" "$(echo "$many" | jq_py 'len(j["choices"])')" "4"
expect "n=4: indices 0..3" "$(echo "$many" | jq_py '[c["index"] for c in j["choices"]]')" "[0, 1, 2, 3]"
ptok=$(echo "$many" | jq_py 'j["usage"]["prompt_tokens"]')
expect "n=4: completion tokens of all choices" "$(echo "$many" | jq_py 'j["usage"]["completion_tokens"]')" "32"
for i in 0 1 2 3; do
  one=$(post "{\"prompt\":\"$PROMPT\",\"max_tokens\":8,\"seed\":$((7 + i)),\"temperature\":0.8}")
  expect "n=4: choice $i equals the request alone with seed $((7 + i))" \
    "$(echo "$one" | jq_py 'j["choices"][0]["text"]')" \
    "$(echo "$many" | jq_py "j[\"choices\"][$i][\"text\"]")"
  expect "usage counts the prompt once ($i)" "$(echo "$one" | jq_py 'j["usage"]["prompt_tokens"]')" "$ptok"
done
# The same prompt again: its whole blocks are cached (all but the last token's).
cached=$(echo "$one" | jq_py 'j["usage"]["prompt_tokens_details"]["cached_tokens"]')
expect "cached_tokens of a repeated prompt" "$cached" "$(( (ptok - 1) / 16 * 16 ))"

# Streamed choices carry their index, each ends with its own finish_reason.
stream=$("${C[@]}" -N -d "{\"prompt\":\"$PROMPT\",\"max_tokens\":6,\"n\":2,\"seed\":3,\"temperature\":0.8,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" http://x/v1/completions)
summary=$(echo "$stream" | python3 -c '
import json,sys
text, fin, usage = {}, {}, None
for l in sys.stdin:
    l = l.strip()
    if not l.startswith("data: ") or l == "data: [DONE]": continue
    j = json.loads(l[6:])
    if j.get("usage"): usage = j["usage"]["completion_tokens"]
    for c in j["choices"]:
        text[c["index"]] = text.get(c["index"], "") + c["text"]
        if c["finish_reason"]: fin[c["index"]] = c["finish_reason"]
print(sorted(text), fin, usage)')
expect "stream n=2: both indices, each finished, usage once" "$summary" "[0, 1] {0: 'length', 1: 'length'} 12"

# best_of: one answer of three; with stream, a 400 naming it.
best=$(post "{\"prompt\":\"$PROMPT\",\"max_tokens\":4,\"best_of\":3,\"seed\":1,\"temperature\":1}")
expect "best_of=3: one choice" "$(echo "$best" | jq_py 'len(j["choices"])')" "1"
expect "best_of=3: every candidate's tokens counted" "$(echo "$best" | jq_py 'j["usage"]["completion_tokens"]')" "12"
bo=$(post '{"prompt":"x","best_of":2,"stream":true}')
expect "best_of with stream → 400 naming best_of" "$(echo "$bo" | jq_py 'j["error"]["param"]')" "best_of"
expect "n=17 → 400 naming n" "$(post '{"prompt":"x","n":17}' | jq_py 'j["error"]["param"]')" "n"

# cache_salt: tenants never share; the same tenant does.
SALTED="The ledger with the green cover holds one line for every boat that passed the mill in spring"
c1=$(post "{\"prompt\":\"$SALTED\",\"max_tokens\":1,\"cache_salt\":\"tenant-a\"}" | jq_py 'j["usage"]["prompt_tokens_details"]["cached_tokens"]')
c2=$(post "{\"prompt\":\"$SALTED\",\"max_tokens\":1,\"cache_salt\":\"tenant-b\"}" | jq_py 'j["usage"]["prompt_tokens_details"]["cached_tokens"]')
c3=$(post "{\"prompt\":\"$SALTED\",\"max_tokens\":1}" | jq_py 'j["usage"]["prompt_tokens_details"]["cached_tokens"]')
c4=$(post "{\"prompt\":\"$SALTED\",\"max_tokens\":1,\"cache_salt\":\"tenant-a\"}" | jq_py 'j["usage"]["prompt_tokens_details"]["cached_tokens"]')
expect "salt a, first time: nothing cached" "$c1" "0"
expect "salt b: nothing of a's" "$c2" "0"
expect "no salt: nothing of a's" "$c3" "0"
[ "$c4" -gt 0 ] && ok "salt a again: $c4 cached" || bad "salt a again: $c4 cached"

# The stats and metrics.
st=$("${C[@]}" http://x/kvasir/v1/stats)
expect "stats: prefix cache enabled" "$(echo "$st" | jq_py 'j["engine"]["prefix_cache"]["enabled"]')" "True"
metrics=$("${C[@]}" http://x/metrics)
hits=$(echo "$metrics" | awk '/^kvasir_prefix_cache_hits_total /{print $2}')
[ "${hits%.*}" -gt 0 ] 2>/dev/null && ok "metrics: $hits prefix cache hits" || bad "metrics: hits '$hits'"
echo "$metrics" | grep -q '^kvasir_kv_blocks_evictable ' && ok "metrics: evictable blocks" || bad "metrics: no evictable blocks"
top=$("$KVASIR" top --once --socket "$SOCK")
echo "$top" | grep -q "prefix cache: hit rate" && ok "kvasir top: hit rate" || bad "kvasir top: no hit rate"

# The bench's workloads.
b=$("$KVASIR" bench --socket "$SOCK" --shared-prefix-len 64 --prefix-groups 2 --prompt-len 8 \
  --requests 6 --concurrency 2 --max-tokens 2 --json --progress never)
expect "bench shared prefix: all completed" "$(echo "$b" | jq_py 'j["completed"]')" "6"
expect "bench shared prefix: 384 shared tokens" "$(echo "$b" | jq_py 'j["shared_prefix_tokens"]')" "384"
rate=$(echo "$b" | jq_py 'round(j["shared_hit_rate"], 3)')
python3 -c "import sys; sys.exit(0 if $rate >= 0.6 else 1)" && ok "bench shared prefix: hit rate $rate" || bad "bench shared prefix: hit rate $rate"
b=$("$KVASIR" bench --socket "$SOCK" --conversations 2 --turns 3 --prompt-len 12 --max-tokens 6 \
  --concurrency 2 --json --progress never)
expect "bench chat: all turns completed" "$(echo "$b" | jq_py 'j["completed"]')" "6"
python3 -c "import sys; sys.exit(0 if $(echo "$b" | jq_py 'j["cached_tokens"]') > 0 else 1)" \
  && ok "bench chat: later turns reuse earlier ones" || bad "bench chat: nothing cached"
b=$("$KVASIR" bench --socket "$SOCK" --n 3 --prompt-len 40 --requests 2 --max-tokens 3 --json --progress never)
expect "bench n=3: every choice's tokens" "$(echo "$b" | jq_py 'j["output_tokens"]')" "18"

kill "$PID"; wait "$PID"; rc=$?; PID=
expect "clean stop" "$rc" "0"
[ "$fails" -eq 0 ] || { echo "$fails failure(s); kvasird log:"; tail -30 "$WORK/kvasird.log"; exit 1; }
echo "all passed"
