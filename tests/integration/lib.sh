# tests/integration/lib.sh — shared helpers of the shell integration tests:
# a real kvasird on a 2-stage CPU plan of the default model. Source it:
#   . "$SRC/tests/integration/lib.sh"
#   kv_setup NAME                     # $WORK (removed at exit), $SOCK, $MODEL
#   kv_config [EXTRA_TOML] > FILE     # the 2-stage config; EXTRA_TOML appended
#   kv_start KVASIRD KVASIR FILE      # starts it, waits until ready; $KV_PID
#   kv_stop                           # SIGTERM and wait; returns its status
# plus ok/bad/expect and $fails. Exit 77 (ctest's skip) when the model is missing.
#
# For tests that run several daemons, kill them or start them on leftovers
# (test_sigkill.sh, test_load.sh):
#   kv_spawn VAR CONFIG LOG           starts $KVASIRD without waiting; pid in $VAR;
#                                     SIGKILLed at exit if still running
#   kv_wait_ready SOCK [SECONDS]      until GET /health is 200 (curl, no CLI)
#   kv_stage_pids PID                 the stage processes (children) of a kvasird
#   kv_gone PID                       true once PID runs no more (a zombie counts
#                                     as gone: it runs no code and holds nothing)
#   kv_segment LOG                    the segment name kvasird printed at start
#   kv_curl SOCK ARGS…                curl over the Unix socket with a deadline
#   kv_finish [LOG]                   prints the tally (and LOG's tail on failure), exits
#   kv_wait_clients TAG [SECONDS]     waits for the pids in the caller's CLIENTS array; one
#                                     still running after SECONDS (120) counts as hung
#   kv_stream_text FILE               a saved completions stream's text deltas joined, as a
#                                     Python repr ('' when empty); "ERROR …" for an error
#                                     event or a stream without [DONE]
#   kv_wait_streaming PREFIX N [SEC]  until each of PREFIX.1..N holds a text delta (20 s at
#                                     most); how many do in $KV_STREAMING
#   kv_same_texts TAG PREFIX N REF    compares PREFIX.i's text with ${REF[i]} (REF: an array's
#                                     name), a FAIL line for each that differs; how many are
#                                     equal in $KV_SAME
#   kv_venv                           the venv of the openai client tests ($KVASIR_E2E_VENV,
#                                     else one in $WORK) with openai and jsonschema installed
#                                     if missing (under a lock: tests run in parallel); its
#                                     path on stdout, nothing if it cannot be made
# Names: every test passes kv_setup its own NAME; the socket lives in its
# $WORK, and the segment is named after the socket path, so concurrent tests
# never share either.

fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
expect() {  # expect WHAT ACTUAL WANTED
  if [ "$2" == "$3" ]; then ok "$1"; else bad "$1: got '$2', want '$3'"; fi
}

KV_PID=
kv_setup() {  # kv_setup NAME
  MODEL="$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  [ -f "$MODEL" ] || { echo "SKIP: $MODEL is missing (scripts/fetch-model)"; exit 77; }
  WORK=$(mktemp -d "/tmp/kvasir-$1.XXXXXX")
  SOCK="$WORK/kvasir.sock"
  trap kv_cleanup EXIT
}

KV_SPAWNED=()
kv_cleanup() {
  if [ -n "$KV_PID" ]; then kill "$KV_PID" 2>/dev/null; wait "$KV_PID" 2>/dev/null; fi
  local p
  for p in "${KV_SPAWNED[@]}"; do
    # Only a kvasird of ours still running (a reaped pid may have been reused).
    grep -q kvasird "/proc/$p/cmdline" 2>/dev/null && kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  rm -rf "$WORK"
}

kv_config() {  # kv_config [EXTRA_TOML]
  cat <<CFG
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
[server]
socket = "$SOCK"
${1:-}
CFG
}

kv_start() {  # kv_start KVASIRD KVASIR CONFIG
  "$1" --config "$3" > "$WORK/kvasird.log" 2>&1 &
  KV_PID=$!
  if ! "$2" status --wait 180 --socket "$SOCK" > /dev/null; then
    echo "kvasird did not become ready; its log:"; cat "$WORK/kvasird.log"; exit 1
  fi
}

kv_stop() {
  local rc=0
  [ -n "$KV_PID" ] || return 0
  kill -TERM "$KV_PID"; wait "$KV_PID" || rc=$?
  KV_PID=
  return $rc
}

kv_spawn() {  # kv_spawn VAR CONFIG LOG
  "$KVASIRD" --config "$2" > "$3" 2>&1 &
  local pid=$!
  KV_SPAWNED+=("$pid")
  printf -v "$1" '%s' "$pid"
}

kv_wait_ready() {  # kv_wait_ready SOCK [SECONDS]
  local until=$((SECONDS + ${2:-180}))
  while [ $SECONDS -lt $until ]; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --unix-socket "$1" http://x/health)" == 200 ] &&
      return 0
    sleep 0.2
  done
  return 1
}

kv_stage_pids() {  # kv_stage_pids PID
  ps -o pid= --ppid "$1" 2>/dev/null | tr -d ' '
}

kv_gone() {  # kv_gone PID
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
  [ -z "$st" ] || [ "$st" == Z ] || [ "$st" == X ]
}

kv_segment() {  # kv_segment LOG
  sed -n 's/.*segment \([^ ]*\)$/\1/p' "$1" | head -1
}

kv_curl() {  # kv_curl SOCK ARGS…
  local sock=$1
  shift
  curl -s --max-time "${KV_CURL_TIMEOUT:-120}" --unix-socket "$sock" "$@"
}

kv_venv() {
  local venv=${KVASIR_E2E_VENV:-$WORK/venv}
  mkdir -p "$(dirname "$venv")"
  if (
    flock 9
    "$venv/bin/python" -c 'import openai, jsonschema' 2> /dev/null && exit 0
    { [ -x "$venv/bin/python" ] || python3 -m venv "$venv"; } &&
      "$venv/bin/pip" -q --disable-pip-version-check install openai jsonschema
  ) 9> "$venv.lock" > "$WORK/pip.log" 2>&1; then
    echo "$venv"
  else
    echo "cannot install openai and jsonschema into $venv:" >&2
    cat "$WORK/pip.log" >&2
  fi
}

kv_finish() {  # kv_finish [LOG]
  if [ "$fails" -eq 0 ]; then
    echo "all passed"
    exit 0
  fi
  echo "$fails FAILED"
  if [ -n "${1:-}" ] && [ -f "$1" ]; then
    echo "--- $1 (last 40 lines)"
    tail -40 "$1"
  fi
  exit 1
}

kv_wait_clients() {  # kv_wait_clients TAG [SECONDS]
  local c hung=0
  for c in "${CLIENTS[@]}"; do
    timeout "${2:-120}" tail --pid="$c" -f /dev/null || hung=$((hung + 1))
    wait "$c" 2> /dev/null
  done
  expect "$1: every client finished" "$hung" "0"
}

kv_wait_streaming() {  # kv_wait_streaming PREFIX N [SECONDS]
  local i tries=$(((${3:-20}) * 20))
  for _ in $(seq 1 "$tries"); do
    KV_STREAMING=0
    for i in $(seq 1 "$2"); do
      grep -q '"text"' "$1.$i" 2> /dev/null && KV_STREAMING=$((KV_STREAMING + 1))
    done
    [ "$KV_STREAMING" -ge "$2" ] && return
    sleep 0.05
  done
}

kv_same_texts() {  # kv_same_texts TAG PREFIX N REF_ARRAY_NAME
  local -n want=$4
  local i got
  KV_SAME=0
  for i in $(seq 1 "$3"); do
    got=$(kv_stream_text "$2.$i")
    if [ "$got" == "${want[$i]}" ]; then
      KV_SAME=$((KV_SAME + 1))
    else
      bad "$1: client $i: got '$got', want '${want[$i]}'"
    fi
  done
}

kv_stream_text() {  # kv_stream_text FILE
  python3 - "$1" << 'PY'
import json, sys
out, done = [], False
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    line = line.strip()
    if not line.startswith("data: "):
        continue
    if line[6:] == "[DONE]":
        done = True
        continue
    ev = json.loads(line[6:])
    if "error" in ev:
        print("ERROR " + json.dumps(ev["error"]))
        sys.exit(0)
    out.append(ev["choices"][0].get("text", ""))
print(repr("".join(out)) if done else "ERROR no [DONE]", end="")
PY
}
