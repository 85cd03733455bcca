#!/usr/bin/env bash
# With real processes: kvasird killed with SIGKILL under load.
#
#  1. A second kvasird on the same instance (same config, so the same socket
#     and segment) refuses with "already running" and leaves the first alone:
#     same stages, same segment, still serving the same greedy text.
#  2. Under load (streaming requests in flight), SIGKILL the daemon: every
#     stage process dies with it (PR_SET_PDEATHSIG), every client sees its
#     connection end (none hangs), and the segment and socket are left
#     behind, stale.
#  3. The next start of the same config reclaims both without manual
#     cleanup, serves the same text, and a clean SIGTERM then removes both.
#  4. The same when the killed daemon is a zombie (not reaped yet).
# Steps 2–3 run ROUNDS times (default 3) to catch what only shows on a
# reuse of leftovers from a leftover.
#
# Usage: test_sigkill.sh KVASIRD KVASIR [SOURCE_DIR] [ROUNDS]
# Exit 0 = passed, 77 = skipped (no model file), anything else = failed.
set -uo pipefail
KVASIRD=${1:?kvasird path}
SRC=$(cd "${3:-$(dirname "$0")/../..}" && pwd)
ROUNDS=${4:-3}
source "$SRC/tests/integration/lib.sh"
kv_setup load-sigkill
CONF="$WORK/kvasir.toml"
kv_config $'[kv]\nmemory = "32MiB"' > "$CONF"
BODY='{"prompt":"The capital of France is","max_tokens":8,"temperature":0}'
complete() {  # prints the greedy text, or nothing
  kv_curl "$SOCK" -H 'Content-Type: application/json' -d "$BODY" http://x/v1/completions |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])' 2>/dev/null
}

kv_spawn A "$CONF" "$WORK/a.log"
kv_wait_ready "$SOCK" 180 || { bad "first kvasird did not become ready"; kv_finish "$WORK/a.log"; }
SEG=$(kv_segment "$WORK/a.log")
[ -n "$SEG" ] && [ -e "/dev/shm/$SEG" ] && ok "first kvasird up, segment /dev/shm/$SEG" ||
  bad "segment not found (log says '$SEG')"
STAGES=$(kv_stage_pids "$A" | sort | tr '\n' ' ')
expect "two stage processes" "$(echo $STAGES | wc -w)" "2"
TEXT=$(complete)
[ -n "$TEXT" ] && ok "first kvasird serves: '$TEXT'" || bad "first kvasird does not serve"

# 1. A second daemon on the same instance.
kv_spawn B "$CONF" "$WORK/b.log"
timeout 120 tail --pid="$B" -f /dev/null
wait "$B"
rc=$?
[ "$rc" -ne 0 ] && ok "second kvasird exits non-zero ($rc)" || bad "second kvasird exited 0"
grep -q "already running" "$WORK/b.log" && ok "second kvasird says: $(grep -m1 'already running' "$WORK/b.log")" ||
  { bad "second kvasird did not say 'already running'"; cat "$WORK/b.log"; }
kv_gone "$A" && bad "first kvasird died" || ok "first kvasird still running"
expect "same stage processes" "$(kv_stage_pids "$A" | sort | tr '\n' ' ')" "$STAGES"
[ -e "/dev/shm/$SEG" ] && ok "segment still there" || bad "segment removed by the second daemon"
[ -S "$SOCK" ] && ok "socket still there" || bad "socket removed by the second daemon"
expect "first kvasird still serves the same text" "$(complete)" "$TEXT"

# 2–3. SIGKILL under load, then restart; ROUNDS times.
PID=$A
for round in $(seq 1 "$ROUNDS"); do
  stages=$(kv_stage_pids "$PID")
  clients=()
  for i in 1 2 3 4 5 6; do
    kv_curl "$SOCK" -N -H 'Content-Type: application/json' \
      -d "{\"prompt\":\"Story $i:\",\"max_tokens\":2000,\"ignore_eos\":true,\"stream\":true}" \
      http://x/v1/completions > "$WORK/client.$round.$i" 2>&1 &
    clients+=($!)
  done
  # Kill once every client has its stream going (tokens arriving).
  for _ in $(seq 1 300); do
    n=0
    for i in 1 2 3 4 5 6; do grep -q '"text"' "$WORK/client.$round.$i" 2>/dev/null && n=$((n + 1)); done
    [ "$n" -eq 6 ] && break
    sleep 0.1
  done
  expect "round $round: 6 streams running before the kill" "$n" "6"
  t0=$(date +%s.%N)
  kill -KILL "$PID"
  wait "$PID" 2>/dev/null
  dead=no
  for _ in $(seq 1 100); do
    alive=0
    for s in $stages; do kv_gone "$s" || alive=$((alive + 1)); done
    [ "$alive" -eq 0 ] && { dead=yes; break; }
    sleep 0.02
  done
  t1=$(date +%s.%N)
  expect "round $round: every stage died with the daemon (within 2 s; took $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s)" "$dead" "yes"
  hung=0
  for c in "${clients[@]}"; do
    timeout 10 tail --pid="$c" -f /dev/null || hung=$((hung + 1))
    wait "$c" 2>/dev/null
  done
  expect "round $round: every client's connection ended" "$hung" "0"
  [ -e "/dev/shm/$SEG" ] && [ -S "$SOCK" ] && ok "round $round: segment and socket left behind (stale)" ||
    bad "round $round: nothing stale left behind: this round tests no reclaim"

  kv_spawn PID "$CONF" "$WORK/r$round.log"
  t0=$(date +%s.%N)
  if kv_wait_ready "$SOCK" 180; then
    t1=$(date +%s.%N)
    ok "round $round: restarted on the leftovers, ready in $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s"
  else
    bad "round $round: restart did not become ready"
    cat "$WORK/r$round.log"
    kv_finish
  fi
  expect "round $round: same segment name" "$(kv_segment "$WORK/r$round.log")" "$SEG"
  expect "round $round: restarted kvasird serves the same text" "$(complete)" "$TEXT"
done

# 4. A zombie owner: a daemon SIGKILLed but not yet reaped by its parent
#    still passes kill(pid, 0), yet it runs no code and holds nothing: the
#    next start must reclaim its leftovers (the owner check compares the
#    start time in /proc/PID/stat; ipc/segment.cpp). The daemon's parent is a
#    python process that never reaps it (bash would, at once).
kill -TERM "$PID"
timeout 60 tail --pid="$PID" -f /dev/null
wait "$PID"
expect "SIGTERM → exit 0" "$?" "0"
KEEPER='
import os, subprocess, sys, time
parent = os.getppid()
p = subprocess.Popen([sys.argv[1], "--config", sys.argv[2]], stdout=open(sys.argv[3], "w"),
                     stderr=subprocess.STDOUT)
open(sys.argv[4], "w").write(str(p.pid))
while os.getppid() == parent:  # never p.wait(): p stays a zombie once killed
    time.sleep(0.2)
'
python3 -c "$KEEPER" "$KVASIRD" "$CONF" "$WORK/z.log" "$WORK/z.pid" &
KEEPER_PID=$!
for _ in $(seq 1 100); do [ -s "$WORK/z.pid" ] && break; sleep 0.05; done
Z=$(cat "$WORK/z.pid" 2>/dev/null)
if [ -n "$Z" ] && kv_wait_ready "$SOCK" 180; then
  kill -KILL "$Z"
  for _ in $(seq 1 100); do [ "$(awk '{print $3}' "/proc/$Z/stat" 2>/dev/null)" == Z ] && break; sleep 0.05; done
  expect "zombie: the killed daemon is a zombie, unreaped" "$(awk '{print $3}' "/proc/$Z/stat" 2>/dev/null)" "Z"
  kill -0 "$Z" 2>/dev/null && ok "zombie: its pid still passes kill(pid, 0)" || bad "zombie: kill(pid, 0) fails"
  kv_spawn PID "$CONF" "$WORK/z2.log"
  if kv_wait_ready "$SOCK" 180; then
    ok "zombie: the next start reclaimed its segment and socket"
  else
    bad "zombie: the next start did not become ready"
    cat "$WORK/z2.log"
  fi
  expect "zombie: still a zombie while the new daemon started" "$(awk '{print $3}' "/proc/$Z/stat" 2>/dev/null)" "Z"
  expect "zombie: restarted kvasird serves the same text" "$(complete)" "$TEXT"
else
  bad "zombie: the daemon under the python parent did not become ready"
  cat "$WORK/z.log"
fi
[ -n "$Z" ] && kill -KILL "$Z" 2>/dev/null  # (a zombie already, unless something failed)
kill "$KEEPER_PID" 2>/dev/null
wait "$KEEPER_PID" 2>/dev/null

# A clean stop of the last one removes both.
kill -TERM "$PID"
timeout 60 tail --pid="$PID" -f /dev/null
wait "$PID"
expect "SIGTERM → exit 0" "$?" "0"
[ -e "/dev/shm/$SEG" ] && bad "segment left after a clean stop" || ok "segment removed at a clean stop"
[ -e "$SOCK" ] && bad "socket left after a clean stop" || ok "socket removed at a clean stop"
kv_finish "$WORK/r$ROUNDS.log"
