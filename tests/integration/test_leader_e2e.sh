#!/usr/bin/env bash
# The ring across hosts through the front door (docs/multi-host.md): a real
# kvasird as the leader (stage 0 here) joins a real `kvasird --worker`
# (stage 1) over loopback, and HTTP clients get the same greedy texts as
# the same 2-stage plan on one host.
#
#  0. One host: N greedy streaming requests at once; the reference texts.
#  1. Leader + worker: the same N requests; every text equal byte for byte;
#     /health lists the worker serving, /kvasir/v1/stats and kvasir top
#     its link.
#  2. A second leader with a stale key comes to the serving worker: the
#     worker refuses and logs it and serves on; that leader gives up at
#     start, saying why. A leader whose worker never answers gives up
#     after cluster.join_timeout, saying so.
#  3. The worker killed (SIGKILL) mid-stream under N streams: the leader
#     sees the link end, /health says degraded and names the loss, the API
#     stays up; the worker is started again (as systemd or Kubernetes
#     would), the leader rejoins it, and every stream finishes with the
#     fault-free text.
#  3c. One of the worker's stage processes killed mid-stream, the worker
#     alive: the worker ends the session naming the stage, the leader
#     rejoins, and every stream finishes with the fault-free text.
#  3d. One of the worker's stage processes stopped (SIGSTOP) mid-stream:
#     alive, answering nothing, using no CPU. The worker's watchdog, with
#     the leader's [recovery] limits from the plan (floor 2 s here), kills
#     it; the worker ends the session saying it hung, the leader rejoins,
#     and every stream finishes with the fault-free text.
#  3b. (netns only, KV_UNPLUG: the command that unplugs the worker's host)
#     The worker's host unplugged mid-stream: both sides end the silent
#     session after link_timeout; plugged back in, the leader rejoins and
#     every text equals the fault-free run.
#  4. A second leader with the key while the first serves: it waits (the
#     worker is taken); SIGTERM to the first: a Bye, the worker logs that
#     its leader left, and the second joins and serves the same text.
#  5. A ring cut twice: stage 0 here, stage 1 on worker A, stage 2 on
#     worker B, stage 3 (the tail) here again. The batches go from A to B
#     through the leader and come back from B as hidden states; the same N
#     texts. Worker B killed mid-stream: only B's link rejoins, and every
#     stream finishes with the one-host text.
#
# Usage: test_leader_e2e.sh KVASIRD KVASIR [SOURCE_DIR]
# test_leader_netns.sh runs it across two scripts/netns-hosts hosts through
# KV_LEADER_ADDR (the worker's address) and KV_LEADER_IN / KV_WORKER_IN
# (the command prefix that runs a process in the leader's / worker's host).
# Exit 0 = passed, 77 = skipped (no model file), anything else = failed.
set -uo pipefail
KVASIRD=${1:?kvasird path}
KVASIR=${2:?kvasir path}
SRC=$(cd "${3:-$(dirname "$0")/../..}" && pwd)
source "$SRC/tests/integration/lib.sh"
kv_setup leader-e2e
# Several daemons' and workers' outputs are compared bit for bit: their
# stage processes must run the same kernels. Unpinned, each process times
# its own, and a loaded machine can tip a near-tie either way
# (docs/kernels.md, "Dispatch"); a pinned level decides nothing by time.
export KVASIR_SIMD=${KVASIR_SIMD:-avx2}
N=${KV_LEADER_CLIENTS:-16}
TOKENS=${KV_LEADER_TOKENS:-16}
PORT=$((20000 + $$ % 20000))
ADDR=${KV_LEADER_ADDR:-127.0.0.1}
read -r -a LEADER_IN <<< "${KV_LEADER_IN:-}"
read -r -a WORKER_IN <<< "${KV_WORKER_IN:-}"
KEY="$WORK/cluster.key"
head -c 32 /dev/urandom > "$KEY" && chmod 600 "$KEY"
STALE="$WORK/stale.key"
head -c 32 /dev/urandom > "$STALE" && chmod 600 "$STALE"

# The model, widths and pools of every plan here.
config_head() {
  cat << CFG
[model]
path = "$MODEL"
[plan]
max_rows = 16
max_tokens = 128
max_inflight = 2
[kv]
memory = "32MiB"
CFG
}
# $1: stage 1's extra keys; $2: anything after. The same widths both ways.
config() {
  config_head
  cat << CFG
[[stages]]
layers = "0-14"
threads = 1
[[stages]]
layers = "15-29"
threads = 1
$1
[server]
socket = "$SOCK"
[recovery]
backoff_s = 0.5
watchdog_floor_s = 2
$2
CFG
}
remote_config() {  # remote_config KEYFILE
  config "host = \"$ADDR:$PORT\"" "[cluster]
key = \"$1\"
join_timeout = 60
link_timeout = 2"
}

WPID=
start_worker() {  # start_worker KEYFILE LOG [PORT]
  "${WORKER_IN[@]}" "$KVASIRD" --worker --listen "$ADDR:${3:-$PORT}" --cluster-key "$1" \
    --link-timeout 2 > "$2" 2>&1 &
  WPID=$!
  KV_SPAWNED+=("$WPID")
}
health() { kv_curl "$SOCK" --max-time 5 http://x/health; }
start_clients() {  # start_clients TAG
  CLIENTS=()
  local i
  for i in $(seq 1 "$N"); do
    kv_curl "$SOCK" -N -H 'Content-Type: application/json' \
      -d "{\"prompt\":\"Note $i: the river\",\"max_tokens\":$TOKENS,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}" \
      http://x/v1/completions > "$WORK/$1.$i" 2>&1 &
    CLIENTS+=($!)
  done
}
# kill_mid_stream TAG PID: N streams started and streaming, then PID
# SIGKILLed; $done_before: the streams done by then, $tk: when.
kill_mid_stream() {
  start_clients "$1"
  kv_wait_streaming "$WORK/$1" "$N"
  done_before=$(grep -l '\[DONE\]' "$WORK/$1".* 2> /dev/null | wc -l)
  tk=$(date +%s.%N)
  kill -KILL "$2"
  wait "$2" 2> /dev/null
}
# structured TAG: two chat requests under two JSON schemas, one after the
# other, greedy; each answer's content (JSON that parses) in $WORK/TAG.sN.
# Across hosts the tail on the worker reads the specs the relay sent it.
SCHEMA1='{"type":"object","properties":{"color":{"enum":["red","green","blue"]},"count":{"type":"integer","maximum":99}},"required":["color","count"]}'
SCHEMA2='{"type":"object","properties":{"ok":{"type":"boolean"},"city":{"enum":["Paris","Rome","Oslo"]}},"required":["ok","city"]}'
structured() {
  local i schema
  for i in 1 2; do
    [ "$i" = 1 ] && schema=$SCHEMA1 || schema=$SCHEMA2
    kv_curl "$SOCK" --max-time 60 -H 'Content-Type: application/json' -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Answer $i in JSON.\"}],\"max_tokens\":64,\"temperature\":0,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"s$i\",\"schema\":$schema}}}" \
      http://x/v1/chat/completions | python3 -c '
import json, sys
body = sys.stdin.read()
try:
    c = json.loads(body)["choices"][0]["message"]["content"]
    json.loads(c)
    print(c)
except Exception:
    print("ERROR " + body[:300])' > "$WORK/$1.s$i"
  done
}
# rejoined WHAT TEXT WANT SAYS: once /health is ok again, the link's joins,
# the faults, the rejoins and whether the link's last error holds TEXT.
rejoined() {
  for _ in $(seq 1 200); do
    case "$(health)" in *'"status":"ok"'*) break ;; esac
    sleep 0.05
  done
  expect "/health ok after $1" "$(health | grep -c '"status":"ok"')" "1"
  local got
  got=$(kv_curl "$SOCK" http://x/kvasir/v1/stats | KV_TEXT=$2 python3 -c '
import json, os, sys
e = json.load(sys.stdin)["engine"]
l = e["links"][0]
print(l["joins"], e["faults"], e["restarts"], os.environ["KV_TEXT"] in l["last_error"])')
  expect "stats: $4" "$got" "$3"
}
compare() {  # compare TAG: every client's text against REF
  kv_same_texts "$1" "$WORK/$1" "$N" REF
  expect "$1: all $N texts equal the one-host run byte for byte" "$KV_SAME" "$N"
}

# 0. One host.
config "" "" > "$WORK/one.toml"
kv_start "$KVASIRD" "$KVASIR" "$WORK/one.toml"
start_clients one
kv_wait_clients "one host"
declare -a REF
for i in $(seq 1 "$N"); do
  REF[$i]=$(kv_stream_text "$WORK/one.$i")
  case "${REF[$i]}" in ERROR* | "''") bad "one host: client $i: '${REF[$i]}'" ;; esac
done
ok "one host: $N streams of $TOKENS tokens (client 1: '${REF[1]:0:40}...')"
structured one
for i in 1 2; do
  case "$(cat "$WORK/one.s$i")" in
    ERROR*) bad "one host: schema $i: $(cat "$WORK/one.s$i")" ;;
    *) ok "one host: schema $i gives $(cat "$WORK/one.s$i")" ;;
  esac
done
kv_stop

# 1. Leader + worker. The leader starts first: it waits for the worker.
remote_config "$KEY" > "$WORK/leader.toml"
out=$("$KVASIRD" --config "$WORK/leader.toml" --check 2>&1)
case "$out" in
  *"stages 0-0 here, 1-1 on worker $ADDR:$PORT"*"usable"*) ok "--check: $(echo "$out" | grep hosts:)" ;;
  *) bad "--check does not report the hosts: $out" ;;
esac
"${LEADER_IN[@]}" "$KVASIRD" --config "$WORK/leader.toml" > "$WORK/kvasird.log" 2>&1 &
KV_PID=$!
# The worker starts once the leader's loading line says it waits for it (a
# fixed sleep let a slow leader find the worker joined before its first line).
for _ in $(seq 1 300); do
  grep -q "joining on $ADDR:$PORT" "$WORK/kvasird.log" && break
  sleep 0.1
done
start_worker "$KEY" "$WORK/worker.log"
kv_wait_ready "$SOCK" 120 || { bad "the leader did not become ready"; kv_finish "$WORK/kvasird.log"; }
case "$(health)" in
  *'"host":"'$ADDR:$PORT'"'*'"state":"serving"'*) ok "/health lists the worker serving" ;;
  *) bad "/health: $(health)" ;;
esac
# The loading line names the worker's stage by host, not by bytes it cannot see.
line=$(grep -m1 -o "stage 1 ([0-9-]*): joining on $ADDR:$PORT" "$WORK/kvasird.log")
[ -n "$line" ] && ok "the loading line says '$line'" ||
  bad "no 'joining on' loading line: $(grep -m1 'loading:' "$WORK/kvasird.log" | cut -c1-200)"
start_clients joined
kv_wait_clients "leader + worker"
compare joined
structured joined
for i in 1 2; do
  expect "joined: schema $i, the tail on the worker: the one-host answer" \
    "$(cat "$WORK/joined.s$i")" "$(cat "$WORK/one.s$i")"
done
links=$(kv_curl "$SOCK" http://x/kvasir/v1/stats | python3 -c '
import json, sys
l = json.load(sys.stdin)["engine"]["links"][0]
print(l["state"], l["joins"], l["bytes_sent"] > 0 and l["bytes_received"] > 0, l["rtt_ms"] > 0)')
expect "stats: the link serving, one join, bytes both ways, a Ping round trip" "$links" \
  "serving 1 True True"
top=$("$KVASIR" top --once --socket "$SOCK" 2>&1 | grep "link to")
case "$top" in
  "link to $ADDR:$PORT (stages 1-1): serving, "*"ping "*" ms, 1 join") ok "kvasir top: $top" ;;
  *) bad "kvasir top shows no link: '$top'" ;;
esac
# The worker's stages hold none of its sockets: a worker killed and started
# again at once finds its port free (round 5 does so).
holders=$("${WORKER_IN[@]}" ss -Hltnp "sport = :$PORT" 2> /dev/null | grep -o 'pid=[0-9]*' | sort -u | wc -l)
expect "the worker's port is held by the worker alone, not its stages" "$holders" "1"

# 2. Keys. A leader with a stale key, while the worker serves: refused.
SOCK2="$WORK/rogue.sock"
remote_config "$STALE" | sed "s|$SOCK|$SOCK2|" > "$WORK/rogue.toml"
timeout 60 "${LEADER_IN[@]}" "$KVASIRD" --config "$WORK/rogue.toml" > "$WORK/rogue.log" 2>&1
expect "a leader with a stale key gives up at start (exit 1)" "$?" "1"
grep -q "cluster key" "$WORK/rogue.log" &&
  ok "the rogue leader says why: $(grep -m1 'cluster key' "$WORK/rogue.log" | cut -c1-140)" ||
  bad "the rogue leader's log: $(tail -3 "$WORK/rogue.log")"
grep -q "refused" "$WORK/worker.log" && ok "the worker logged the refusal" ||
  bad "the worker did not log the refusal"
expect "the leader still serves" "$(health | grep -c '"status":"ok"')" "1"
# A worker that never answers: the leader gives up after join_timeout, saying so.
remote_config "$KEY" | sed "s|$SOCK|$SOCK2|; s|:$PORT|:$((PORT + 1))|; s|join_timeout = 60|join_timeout = 1|" \
  > "$WORK/lonely.toml"
timeout 60 "${LEADER_IN[@]}" "$KVASIRD" --config "$WORK/lonely.toml" > "$WORK/lonely.log" 2>&1
expect "a leader whose worker never answers gives up (exit 1)" "$?" "1"
grep -q "did not answer within 1 s" "$WORK/lonely.log" &&
  ok "it says why: $(grep -m1 'did not answer' "$WORK/lonely.log" | cut -c25-130)" ||
  bad "the lonely leader's log: $(tail -3 "$WORK/lonely.log")"

# 3. The worker killed mid-stream, then started again.
kill_mid_stream kill "$WPID"
seen=""
for _ in $(seq 1 100); do
  h=$(health)
  case "$h" in *'"degraded"'*'"state":"lost"'* | *'"degraded"'*'"state":"joining"'*) seen=$h; break ;; esac
  sleep 0.05
done
td=$(date +%s.%N)
[ -n "$seen" ] && ok "worker killed ($done_before of $N streams done), seen in $(awk "BEGIN{printf \"%.2f\", $td - $tk}") s: /health $seen" ||
  bad "/health did not report the lost worker: $(health)"
t0=$(date +%s.%N)
start_worker "$KEY" "$WORK/worker2.log"
for _ in $(seq 1 1200); do
  case "$(health)" in *'"status":"ok"'*) break ;; esac
  sleep 0.05
done
t1=$(date +%s.%N)
expect "/health ok after the rejoin" "$(health | grep -c '"status":"ok"')" "1"
ok "serving again $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s after the worker was started again (its load included)"
kv_wait_clients "after the worker's loss"
compare kill
joins=$(kv_curl "$SOCK" http://x/kvasir/v1/stats | python3 -c '
import json, sys
e = json.load(sys.stdin)["engine"]
print(e["links"][0]["joins"], e["faults"], e["restarts"])')
expect "stats: two joins, one fault, one rejoin" "$joins" "2 1 1"

# 3c. One of the worker's stage processes killed mid-stream (what an OOM
# killer picks), the worker itself alive: it ends the session with a
# Refuse naming the stage, the leader rejoins the same worker, and every
# stream finishes with the fault-free text. (A worker that kept relaying
# in front of the dead stage would hold every stream forever.)
start_clients stagekill
kv_wait_streaming "$WORK/stagekill" "$N"
SPID=$(pgrep -P "$WPID" | head -1)
[ -n "$SPID" ] && kill -KILL "$SPID" || bad "no stage process under the worker ($WPID)"
kv_wait_clients "after a worker stage's loss" 60
compare stagekill
grep -q "worker stage 1 killed by signal 9" "$WORK/worker2.log" &&
  ok "the worker ended the session naming its lost stage" ||
  bad "the worker's log: $(tail -3 "$WORK/worker2.log")"
rejoined "the stage's loss" "killed by signal 9" "3 2 2 True" \
  "three joins, two faults, two rejoins, the link's last error names the stage"

# 3d. One of the worker's stage processes stopped mid-stream (SIGSTOP: a
# hang, not a death). One more request after the stop makes sure work
# reaches the stopped stage, however far the streams got.
start_clients stagestop
kv_wait_streaming "$WORK/stagestop" "$N"
SPID=$(pgrep -P "$WPID" | head -1)
ts=$(date +%s.%N)
[ -n "$SPID" ] && kill -STOP "$SPID" || bad "no stage process under the worker ($WPID)"
kv_curl "$SOCK" -N -H 'Content-Type: application/json' \
  -d "{\"prompt\":\"Note 1: the river\",\"max_tokens\":$TOKENS,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}" \
  http://x/v1/completions > "$WORK/stagestop.late" 2>&1 &
CLIENTS+=($!)
kv_wait_clients "after a worker stage's hang" 30
te=$(date +%s.%N)
compare stagestop
expect "the request sent after the stop: the one-host text" \
  "$(kv_stream_text "$WORK/stagestop.late")" "${REF[1]}"
line=$(grep -m1 -o "worker stage 1 held a batch.*hung, killed" "$WORK/worker2.log")
[ -n "$line" ] && ok "the worker's watchdog ended the session: ${line:0:120}..." ||
  bad "the worker's log: $(tail -3 "$WORK/worker2.log")"
ok "every stream done $(awk "BEGIN{printf \"%.2f\", $te - $ts}") s after the stop (floor 2 s)"
rejoined "the stage's hang" "hung, killed" "4 3 3 True" \
  "four joins, three faults, three rejoins, the link's last error says it hung"

# 3b. (netns only) The worker's host unplugged mid-stream, nothing closed:
# both sides hear nothing for link_timeout (2 s) and end the session; the
# leader rejoins once the host is plugged back in.
if [ -n "${KV_UNPLUG:-}" ]; then
  read -r -a UNPLUG <<< "$KV_UNPLUG"
  start_clients unplug
  kv_wait_streaming "$WORK/unplug" "$N"
  tk=$(date +%s.%N)
  "${UNPLUG[@]}" down
  seen=""
  for _ in $(seq 1 200); do
    case "$(health)" in *'"degraded"'*) seen=1; break ;; esac
    sleep 0.05
  done
  td=$(date +%s.%N)
  [ -n "$seen" ] && ok "host unplugged: /health degraded after $(awk "BEGIN{printf \"%.2f\", $td - $tk}") s (link_timeout 2 s)" ||
    bad "the unplugged worker was not noticed: $(health)"
  for _ in $(seq 1 100); do grep -q "nothing from the peer" "$WORK/worker2.log" && break; sleep 0.05; done
  grep -q "nothing from the peer" "$WORK/worker2.log" && ok "the worker ended the silent session too" ||
    bad "the worker's log: $(tail -2 "$WORK/worker2.log")"
  "${UNPLUG[@]}" up
  kv_wait_clients "after the host was plugged back in"
  compare unplug
  expect "/health ok after the rejoin" "$(health | grep -c '"status":"ok"')" "1"
fi

# 4. A second leader (the right key) while the first serves: the worker is
# taken, so it waits; SIGTERM to the first: Bye, and the second joins.
SOCK3="$WORK/second.sock"
remote_config "$KEY" | sed "s|$SOCK|$SOCK3|" > "$WORK/second.toml"
"${LEADER_IN[@]}" "$KVASIRD" --config "$WORK/second.toml" > "$WORK/second.log" 2>&1 &
SECOND=$!
KV_SPAWNED+=("$SECOND")
for _ in $(seq 1 100); do grep -q "already serves a leader" "$WORK/second.log" && break; sleep 0.1; done
grep -q "already serves a leader" "$WORK/second.log" && ok "a second leader waits: the worker serves the first" ||
  bad "the second leader's log: $(tail -3 "$WORK/second.log")"
kv_stop
expect "SIGTERM → exit 0" "$?" "0"
for _ in $(seq 1 50); do grep -q "left" "$WORK/worker2.log" && break; sleep 0.1; done
grep -q "leader 'leader' left" "$WORK/worker2.log" && ok "the worker saw its leader leave (Bye)" ||
  bad "the worker's log: $(tail -3 "$WORK/worker2.log")"
if kv_wait_ready "$SOCK3" 60; then
  got=$(kv_curl "$SOCK3" -N -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"Note 1: the river\",\"max_tokens\":$TOKENS,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}" \
    http://x/v1/completions > "$WORK/second.1"; kv_stream_text "$WORK/second.1")
  expect "the second leader joined the worker and serves the same text" "$got" "${REF[1]}"
else
  bad "the second leader did not become ready: $(tail -3 "$WORK/second.log")"
fi
kill -TERM "$SECOND"
wait "$SECOND"
expect "the second leader: SIGTERM → exit 0" "$?" "0"
kill -TERM "$WPID"
wait "$WPID"
expect "the worker: SIGTERM → exit 0" "$?" "0"

# 5. A ring cut twice (worker A on PORT, worker B on PORT + 2).
PORT_B=$((PORT + 2))
config_head > "$WORK/cut.toml"
cat >> "$WORK/cut.toml" << CFG
[[stages]]
layers = "0-6"
threads = 1
[[stages]]
layers = "7-14"
threads = 1
host = "$ADDR:$PORT"
[[stages]]
layers = "15-22"
threads = 1
host = "$ADDR:$PORT_B"
[[stages]]
layers = "23-29"
threads = 1
[server]
socket = "$SOCK"
[recovery]
backoff_s = 0.5
[cluster]
key = "$KEY"
join_timeout = 60
link_timeout = 2
CFG
out=$("$KVASIRD" --config "$WORK/cut.toml" --check 2>&1)
case "$out" in
  *"stages 0-0 here, 1-1 on worker $ADDR:$PORT, 2-2 on worker $ADDR:$PORT_B, 3-3 here"*)
    ok "--check: $(echo "$out" | grep hosts:)" ;;
  *) bad "--check does not list both workers: $out" ;;
esac
start_worker "$KEY" "$WORK/worker-a.log"
WPID_A=$WPID
start_worker "$KEY" "$WORK/worker-b.log" "$PORT_B"
"${LEADER_IN[@]}" "$KVASIRD" --config "$WORK/cut.toml" > "$WORK/kvasird-cut.log" 2>&1 &
KV_PID=$!
kv_wait_ready "$SOCK" 120 || { bad "the cut leader did not become ready"; kv_finish "$WORK/kvasird-cut.log"; }
start_clients cut
kv_wait_clients "two workers"
compare cut
links=$(kv_curl "$SOCK" http://x/kvasir/v1/stats | python3 -c '
import json, sys
links = json.load(sys.stdin)["engine"]["links"]
print(" ".join(l["stages"] + ":" + l["state"] for l in links))' 2>&1)
expect "stats: one link per worker, both serving" "$links" "1-1:serving 2-2:serving"
expect "kvasir top: a line per link" \
  "$("$KVASIR" top --once --socket "$SOCK" 2>&1 | grep -c "link to $ADDR:")" "2"
kill_mid_stream cutkill "$WPID"
start_worker "$KEY" "$WORK/worker-b2.log" "$PORT_B"
kv_wait_clients "after worker B's loss" 60
te=$(date +%s.%N)
compare cutkill
ok "worker B killed ($done_before of $N streams done): every stream done $(awk "BEGIN{printf \"%.2f\", $te - $tk}") s later, its restart and load included"
got=$(kv_curl "$SOCK" http://x/kvasir/v1/stats | python3 -c '
import json, sys
e = json.load(sys.stdin)["engine"]
print(e["links"][0]["joins"], e["links"][1]["joins"], e["faults"], e["restarts"])')
expect "stats: A joined once, B twice; one fault, one rejoin" "$got" "1 2 1 1"
kv_stop
expect "the cut leader: SIGTERM → exit 0" "$?" "0"
kill -TERM "$WPID_A" "$WPID"
wait "$WPID_A" "$WPID"
kv_finish "$WORK/kvasird-cut.log"
