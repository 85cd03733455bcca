#!/usr/bin/env bash
# The front door end to end, against the REAL kvasird: a 2-stage CPU plan on
# the default model, driven with curl --unix-socket, the kvasir CLI, and the
# official `openai` Python package over TCP (installed into a venv here).
#
# Usage: test_api_e2e.sh KVASIRD KVASIR [SOURCE_DIR]
# Exit 0 = passed, 77 = skipped (no model file), anything else = failed.
set -uo pipefail

KVASIRD=${1:?kvasird path}
KVASIR=${2:?kvasir path}
SRC=${3:-$(cd "$(dirname "$0")/../.." && pwd)}
MODEL="$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$MODEL" ] || { echo "SKIP: $MODEL is missing (scripts/fetch-model)"; exit 77; }
# kv_venv only (this test keeps its own daemon set-up).
. "$SRC/tests/integration/lib.sh"

WORK=$(mktemp -d /tmp/kvasir-api-e2e.XXXXXX)
SOCK="$WORK/kvasir.sock"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
KEY="e2e-key-$$"
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
http = "127.0.0.1:$PORT"
api_key_file = "key"
max_body = "1MiB"
EOF
# The key from a file beside the config (server.api_key_file), owner-only.
(umask 077 && echo "$KEY" > "$WORK/key")

"$KVASIRD" --config "$WORK/kvasir.toml" > "$WORK/kvasird.log" 2>&1 &
PID=$!
if ! "$KVASIR" status --wait 180 --socket "$SOCK"; then
  echo "kvasird did not become ready; its log:"; cat "$WORK/kvasird.log"; exit 1
fi
ok "kvasir status --wait"
expect "socket mode 0660" "$(stat -c %a "$SOCK")" "660"

C=(curl -s --max-time 120 --unix-socket "$SOCK")
expect "GET /health" "$("${C[@]}" -o /dev/null -w '%{http_code}' http://x/health)" "200"
expect "GET /v1/models" "$("${C[@]}" http://x/v1/models | python3 -c 'import json,sys; print(json.load(sys.stdin)["object"])')" "list"

body='{"prompt":"The capital of France is","max_tokens":8,"temperature":0}'
out=$("${C[@]}" -H 'Content-Type: application/json' -d "$body" http://x/v1/completions)
text=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])' 2>/dev/null)
[ -n "$text" ] && ok "curl completion: '$text'" || bad "curl completion: $out"

# After a request each CPU stage says which SIMD levels its kernels chose
# (stages[].simd; kernels/cpu/simd.h names the levels), and `kvasir status`
# prints it per stage.
simd=$("${C[@]}" http://x/kvasir/v1/stats | python3 -c '
import json, sys
levels = {"scalar", "avx2", "avx_vnni", "avx512", "avx512_vnni"}
bad = []
for s in json.load(sys.stdin)["stages"]:
    t = s.get("simd", "")
    words = t.split()
    if s["device"] != "cpu":
        continue
    if not t or not words[0].startswith("cpu:") or words[0][4:] not in levels:
        bad.append("stage %d: %r" % (s["index"], t)); continue
    for w in words[2:]:
        if w == "...":
            continue
        lv = w.rsplit(":", 1)[-1]
        lv = lv.split("+p")[0]
        lv = lv[:-4] if lv.endswith("+amx") else lv
        if lv not in levels:
            bad.append("stage %d: %r names no level" % (s["index"], w))
    if not any(w.startswith("forced:") or w.startswith("q4_1/") for w in words):
        bad.append("stage %d: no q4_1 kernel in %r" % (s["index"], t))
print("; ".join(bad) if bad else "ok")')
expect "stats: each CPU stage names its kernels' SIMD levels" "$simd" "ok"
expect "kvasir status: a simd line per stage" \
  "$("$KVASIR" status --socket "$SOCK" | grep -c '^  stage [0-9]*: .*; simd: cpu:')" "2"

stream=$("${C[@]}" -N -H 'Content-Type: application/json' \
  -d '{"prompt":"The capital of France is","max_tokens":8,"temperature":0,"stream":true}' http://x/v1/completions)
expect "SSE ends with [DONE]" "$(echo "$stream" | grep -c '^data: \[DONE\]')" "1"
stext=$(echo "$stream" | python3 -c '
import json,sys
t=""
for l in sys.stdin:
    l=l.strip()
    if l.startswith("data: ") and l != "data: [DONE]":
        c=json.loads(l[6:])["choices"]
        if c: t+=c[0]["text"]
print(t)')
expect "streamed text equals whole text" "$stext" "$text"

code() { "${C[@]}" -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' "$@"; }
expect "malformed JSON → 400" "$(code -d '{nope' http://x/v1/completions)" "400"
expect "max_tokens -1 → 400" "$(code -d '{"prompt":"x","max_tokens":-1}' http://x/v1/completions)" "400"
expect "n huge → 400" "$(code -d '{"prompt":"x","n":100000}' http://x/v1/completions)" "400"
expect "token id out of range → 400" "$(code -d '{"prompt":[1,99999999]}' http://x/v1/completions)" "400"
head -c $((2 * 1024 * 1024)) /dev/zero | tr '\0' 'a' > "$WORK/big"
expect "2 MB body over 1 MiB max_body → 413" "$(code --data-binary @"$WORK/big" http://x/v1/completions)" "413"
expect "model file name accepted as model" "$(code -d '{"model":"SmolLM2-135M-Instruct.Q4_1","prompt":"x","max_tokens":1}' http://x/v1/completions)" "200"
expect "unknown route → 404" "$(code http://x/nope)" "404"
# The id /v1/models lists (the model's general.name holds spaces) can be
# retrieved, percent-encoded as any client sends it.
mid=$("${C[@]}" http://x/v1/models | python3 -c 'import json,sys,urllib.parse; print(urllib.parse.quote(json.load(sys.stdin)["data"][0]["id"], safe=""))')
expect "GET /v1/models/<listed id, encoded> → 200" "$(code "http://x/v1/models/$mid")" "200"
# Response ids: random, never a serial (two requests, two unrelated ids).
ids=$(for i in 1 2; do "${C[@]}" -H 'Content-Type: application/json' -d '{"prompt":"x","max_tokens":1}' http://x/v1/completions; echo; done |
  python3 -c 'import json,sys,re; i=[json.loads(l)["id"] for l in sys.stdin if l.strip()]; print("ok" if len(set(i))==2 and all(re.fullmatch("cmpl-[0-9a-f]{32}", x) for x in i) else i)')
expect "response ids: 128 random bits each" "$ids" "ok"
expect "still serving" "$(code http://x/health)" "200"

# A 1 MB request head: 431, and the daemon keeps serving.
hdr=$(python3 - "$SOCK" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
try:
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n")
except OSError:
    pass
print(s.recv(64).split(b" ")[1].decode())
PY
)
expect "1 MB header → 431" "$hdr" "431"

# Many at once: every one answered. (wait on these pids only: kvasird is a job too)
pids=()
for i in $(seq 1 12); do
  "${C[@]}" -o /dev/null -w '%{http_code}\n' -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"Request $i says\",\"max_tokens\":$((4 + i)),\"temperature\":0.7,\"seed\":$i}" \
    http://x/v1/completions > "$WORK/par.$i" &
  pids+=($!)
done
wait "${pids[@]}"
expect "12 concurrent completions → 200" "$(cat "$WORK"/par.* | sort | uniq -c | awk '{print $1" "$2}')" "12 200"

# A client that goes away mid-stream: its request is cancelled and its KV
# blocks return; a request running beside it is untouched.
"${C[@]}" -N --max-time 1 -H 'Content-Type: application/json' \
  -d '{"prompt":"Count to a thousand:","max_tokens":2000,"ignore_eos":true,"stream":true}' \
  http://x/v1/completions > /dev/null 2>&1 &
gone=$!
side=$("${C[@]}" -H 'Content-Type: application/json' -d "$body" http://x/v1/completions |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])' 2>/dev/null)
wait "$gone"
expect "request beside a cancelled one is unchanged" "$side" "$text"
freed=no
for i in $(seq 1 50); do
  st=$("${C[@]}" http://x/kvasir/v1/stats | python3 -c '
import json,sys; e=json.load(sys.stdin)["engine"]
print("yes" if e["running"]==0 and e["waiting"]==0 and e["blocks_free"]==e["blocks_total"] else "no")')
  [ "$st" == yes ] && { freed=yes; break; }
  sleep 0.2
done
expect "disconnect → cancelled, blocks freed" "$freed" "yes"

# The CLI.
gen=$("$KVASIR" generate --socket "$SOCK" --max-tokens 8 --temperature 0 "The capital of France is")
expect "kvasir generate = curl completion" "$gen" "$text"
gen2=$(echo -n "The capital of France is" | "$KVASIR" generate --socket "$SOCK" --max-tokens 8 --temperature 0 -)
expect "kvasir generate - (stdin)" "$gen2" "$text"
chat=$("$KVASIR" generate --socket "$SOCK" --chat --max-tokens 16 --temperature 0 "Say hello.")
[ -n "$chat" ] && ok "kvasir generate --chat: '$chat'" || bad "kvasir generate --chat printed nothing"
"$KVASIR" generate --socket "$SOCK" --max-tokens 0 x > /dev/null 2>&1 && bad "--max-tokens 0 accepted" || ok "--max-tokens 0 refused"
err=$("$KVASIR" generate --socket "$SOCK" --top-p 7 x 2>&1 >/dev/null); rc=$?
[ $rc -ne 0 ] && [[ "$err" == *top_p* ]] && ok "server error → exit $rc: $err" || bad "bad top_p: rc=$rc '$err'"
ids=$("$KVASIR" tokenize --socket "$SOCK" "Hello world")
expect "tokenize/detokenize round trip" "$("$KVASIR" detokenize --socket "$SOCK" $ids)" "Hello world"
KVASIR_API_KEY=$KEY "$KVASIR" status --url "http://127.0.0.1:$PORT" > /dev/null && ok "kvasir status over TCP" || bad "kvasir status over TCP"

# TCP needs the key.
expect "TCP without key → 401" "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/models")" "401"

# The openai package.
VENV=$(kv_venv) || true
[ -n "$VENV" ] || echo "SKIP openai client part: cannot install the openai package"
if [ -n "$VENV" ]; then
  if "$VENV/bin/python" "$SRC/tests/integration/openai_client_test.py" "http://127.0.0.1:$PORT/v1" "$KEY"; then
    ok "openai client tests"
  else
    bad "openai client tests"
  fi
fi

# Metrics and a clean stop.
# Read whole first: grep -q stops at its match, and under pipefail curl's
# broken pipe would fail the check whenever the match comes early.
metrics=$("${C[@]}" http://x/metrics)
grep -q '^kvasir_stage_busy_seconds_total{stage="1"' <<< "$metrics" && ok "metrics per stage" || bad "metrics per stage"
expect "metrics: nothing in the ring when idle" "$(grep '^kvasir_ring_inflight ' <<< "$metrics")" "kvasir_ring_inflight 0"
kill -TERM "$PID"; wait "$PID"; rc=$?; PID=
expect "kvasird exits 0 on SIGTERM" "$rc" "0"
[ -e "$SOCK" ] && bad "socket file left behind" || ok "socket file removed"

[ $fails -eq 0 ] && echo "all passed" || { echo "$fails FAILED"; echo "--- kvasird log"; tail -30 "$WORK/kvasird.log"; }
exit $((fails > 0))
