#!/usr/bin/env bash
# Stage recovery through the front door: a stage lost mid-stream, seen by
# real HTTP clients of a real kvasird (the default model, 3 CPU stages).
#
#  0. Fault-free: N greedy streaming requests at once; each client's text
#     is the reference.
#  1. The same N requests; once every stream is producing tokens (none
#     finished), SIGKILL the middle stage. Every client's text equals the
#     reference byte for byte (no gap, no duplicate, no error event),
#     /health goes ok → degraded → ok, /metrics counts the restart.
#  2. The same with SIGSTOP of the middle stage: the watchdog, whose floor
#     comes from the config ([recovery] watchdog_floor_s, small here),
#     finds it hung and kills it; then as in 1.
# [recovery] backoff_s = 1 (config) holds each restart back 1 s (2 s the
# second time), so the degraded spell is long enough to be seen.
#
# Usage: test_stage_kill.sh KVASIRD KVASIR [SOURCE_DIR]
# Exit 0 = passed, 77 = skipped (no model file), anything else = failed.
set -uo pipefail
KVASIRD=${1:?kvasird path}
KVASIR=${2:?kvasir path}
SRC=$(cd "${3:-$(dirname "$0")/../..}" && pwd)
source "$SRC/tests/integration/lib.sh"
kv_setup stage-kill
N=${KV_STAGE_KILL_CLIENTS:-4}
TOKENS=${KV_STAGE_KILL_TOKENS:-48}
FLOOR=1.5 # watchdog floor (s): a SIGSTOPped stage is killed after this

# The default model has 30 layers: three stages of 10.
CONF="$WORK/kvasir.toml"
cat > "$CONF" << CFG
[model]
path = "$MODEL"
[plan]
max_rows = 8
max_tokens = 128
[kv]
memory = "32MiB"
[[stages]]
layers = "0-9"
threads = 1
[[stages]]
layers = "10-19"
threads = 1
[[stages]]
layers = "20-29"
threads = 1
[server]
socket = "$SOCK"
[recovery]
watchdog_floor_s = $FLOOR
# A restart waits backoff_s (then 2x): the degraded spell lasts at least
# that long, so a 50 ms /health poll on a loaded machine cannot miss it
# (with the default 0.05 s a recovery can be over in 0.15 s).
backoff_s = 1
CFG
kv_start "$KVASIRD" "$KVASIR" "$CONF"
LOG="$WORK/kvasird.log"

stage_pid() {  # stage_pid N: the kvasird --stage N child of the daemon
  local p
  for p in $(kv_stage_pids "$KV_PID"); do
    tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q -- "--stage $1 " && { echo "$p"; return; }
  done
}
health() {  # the status word of GET /health (cheap: polled every 50 ms)
  case "$(kv_curl "$SOCK" --max-time 5 http://x/health)" in
    *'"degraded"'*) echo degraded ;;
    *'"ok"'*) echo ok ;;
    *'"unhealthy"'*) echo unhealthy ;;
    *) echo none ;;
  esac
}
restarts() { kv_curl "$SOCK" http://x/metrics | awk '$1 == "kvasir_stage_restarts_total" {print $2}'; }

# Starts the N clients; their raw SSE streams land in $WORK/$1.$i.
start_clients() {
  CLIENTS=()
  local i
  for i in $(seq 1 "$N"); do
    kv_curl "$SOCK" -N -H 'Content-Type: application/json' \
      -d "{\"prompt\":\"Story $i: once upon a time\",\"max_tokens\":$TOKENS,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}" \
      http://x/v1/completions > "$WORK/$1.$i" 2>&1 &
    CLIENTS+=($!)
  done
}
# Every stream has a token and none has finished yet: a fault now is mid-stream.
wait_mid_stream() {
  local i n=0 finished=0
  for _ in $(seq 1 600); do
    n=0
    finished=0
    for i in $(seq 1 "$N"); do
      grep -q '"text"' "$WORK/$1.$i" 2> /dev/null && n=$((n + 1))
      grep -q '\[DONE\]' "$WORK/$1.$i" 2> /dev/null && finished=$((finished + 1))
    done
    [ "$n" -eq "$N" ] && break
    sleep 0.05
  done
  expect "$1: all $N streams producing tokens before the fault" "$n" "$N"
  expect "$1: no stream finished before the fault" "$finished" "0"
}
# Polls /health every 50 ms until it is ok again after a degraded spell
# (or 60 s); prints the distinct states seen, in order.
watch_health() {
  local seen="" h last="" deadline=$((SECONDS + 60))
  while [ $SECONDS -lt $deadline ]; do
    h=$(health)
    [ "$h" != "$last" ] && { seen="$seen $h"; last=$h; }
    case "$seen" in *degraded*" ok") break ;; esac
    sleep 0.05
  done
  echo "${seen# }"
}

# 0. Fault-free reference.
start_clients ref
kv_wait_clients "fault-free run"
declare -a REF
for i in $(seq 1 "$N"); do
  REF[$i]=$(kv_stream_text "$WORK/ref.$i")
  case "${REF[$i]}" in
    ERROR* | "''") bad "fault-free client $i: '${REF[$i]}'" ;;
  esac
done
ok "fault-free reference: $N streams of $TOKENS tokens (client 1: '${REF[1]:0:40}...')"
expect "no restart before any fault" "$(restarts)" "0"
stage1_simd() {
  kv_curl "$SOCK" http://x/kvasir/v1/stats |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["stages"][1].get("simd", ""))'
}
SIMD1=$(stage1_simd)  # the middle stage's kernel choices, which its successors adopt

run_fault() {  # run_fault TAG SIGNAL WANT_RESTARTS
  local tag=$1 sig=$2 victim t0 t1 states
  victim=$(stage_pid 1)
  [ -n "$victim" ] || { bad "$tag: middle stage not found"; return; }
  start_clients "$tag"
  wait_mid_stream "$tag"
  t0=$(date +%s.%N)
  kill "-$sig" "$victim"
  states=$(watch_health)
  t1=$(date +%s.%N)
  case "$states" in
    *degraded*" ok") ok "$tag: /health went '$states' ($(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s after the signal)" ;;
    *) bad "$tag: /health went '$states', want degraded then ok" ;;
  esac
  kv_wait_clients "$tag"
  kv_same_texts "$tag" "$WORK/$tag" "$N" REF
  expect "$tag: every client's text equals the fault-free run byte for byte" "$KV_SAME" "$N"
  expect "$tag: kvasir_stage_restarts_total" "$(restarts)" "$3"
  local now
  now=$(stage_pid 1)
  [ -n "$now" ] && [ "$now" != "$victim" ] && ok "$tag: middle stage restarted (pid $victim → $now)" ||
    bad "$tag: middle stage not restarted (was $victim, now '$now')"
  # The new process published its own kernels text (the supervisor cleared
  # the old one): the first stage's choices, adopted (--simd-inherit), so
  # it computes the same bits.
  local simd
  simd=$(stage1_simd)
  [[ "$simd" == cpu:* ]] && ok "$tag: the restarted stage says what runs its kernels: '$simd'" ||
    bad "$tag: the restarted stage's simd is '$simd'"
  expect "$tag: the restarted stage runs the first one's kernel choices" "$simd" "$SIMD1"
  kill -CONT "$victim" 2> /dev/null  # in case SIGSTOP was never answered by a kill
  expect "$tag: /health ok afterwards" "$(health)" "ok"
}

run_fault sigkill KILL 1
run_fault sigstop STOP 2
grep -q "hung, killed" "$LOG" && ok "sigstop: the watchdog's verdict: $(grep -m1 'hung, killed' "$LOG" | cut -c1-160)" ||
  bad "sigstop: no watchdog verdict in the log"
grep -q "floor ${FLOOR} s" "$LOG" && ok "the watchdog used the config's floor (${FLOOR} s)" ||
  bad "the watchdog's limit does not show the config's floor ${FLOOR} s"

kv_stop
expect "SIGTERM → exit 0" "$?" "0"
kv_finish "$LOG"
