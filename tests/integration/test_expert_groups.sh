#!/usr/bin/env bash
# Expert groups (docs/expert-groups.md) through the real kvasird, real
# processes: tiny MoE models (tests/support/write_tiny_model) on two CPU
# positions, layer 0 a plain stage and layer 1 either a plain stage (the
# reference) or an expert group of 2 to 5 processes (1 to 4 members; Mixtral's
# 4 experts stop at 4) — and, for qwen3moe, a group of 2 at the head over
# layer 0, layer 1 plain.
#
#  1. Per family (qwen3moe: 7 experts, top 3; qwen2moe: 5 experts, top 2 and
#     a shared expert; mixtral: 4 experts, top 2; gpt-oss: 4 MXFP4 experts
#     with biases, top 2): N concurrent greedy streams, prompts longer than
#     scheduler.chunk_size (chunked prefill) and a kv.memory that holds a
#     fraction of them (preemption: checked in the stats). Each group plan's
#     texts equal the reference plan's byte for byte; its stats show every
#     member with busy/starved/blocked time and work done.
#  2. qwen3moe, a group of 4: SIGKILL a member mid-stream, then SIGSTOP
#     another (the watchdog's floor is small here): every stream completes
#     with the reference text, each member restarted once, and no new epoch
#     (a member holds no batch: the stats' `faults`, the bridge's epochs,
#     stays 0). Then SIGKILL the group's leader: a stage loss (one epoch),
#     the same text again.
#  3. qwen3moe, a group of 2 on a worker (docs/multi-host.md): layer 0 here,
#     layer 1's group on a `kvasird --worker` over loopback: the text of
#     the plain plan on one host; the worker's member SIGKILLed mid-stream:
#     the worker ends the session naming it, the leader rejoins (one
#     fault), and every stream completes with that text again.
#
# Usage: test_expert_groups.sh KVASIRD KVASIR SOURCE_DIR WRITE_TINY_MODEL
# Exit 0 = passed, anything else = failed.
set -uo pipefail
KVASIRD=${1:?kvasird path}
KVASIR=${2:?kvasir path}
SRC=${3:?source dir}
WRITER=${4:?write_tiny_model path}
. "$SRC/tests/integration/lib.sh"
WORK=$(mktemp -d /tmp/kvasir-expert-groups.XXXXXX)
SOCK="$WORK/kvasir.sock"
trap kv_cleanup EXIT
N=${KV_GROUPS_CLIENTS:-16}
TOKENS=${KV_GROUPS_TOKENS:-256}
FLOOR=1.5

# position LAYER GROUP: a [[stages]] entry of LAYER, or (GROUP the experts
# ranges, e.g. "0-3 4-6") one entry per process of a group over it.
position() {
  if [ -z "$2" ]; then
    printf '[[stages]]\nlayers = "%s"\nthreads = 1\n' "$1"
  else
    local r
    for r in $2; do printf '[[stages]]\nlayers = "%s"\nexperts = "%s"\nthreads = 1\n' "$1" "$r"; done
  fi
}
# config MODEL GROUP [HEAD_GROUP]: layer 1 a plain stage (GROUP "") or a
# group; layer 0 a plain stage, or with HEAD_GROUP a group at the head.
config() {
  cat <<CFG
[model]
path = "$1"
[plan]
max_rows = 8
max_tokens = 64
CFG
  position 0-0 "${3:-}"
  position 1-1 "$2"
  cat <<CFG
[kv]
memory = "80KiB"
[scheduler]
chunk_size = 16
[server]
socket = "$SOCK"
[recovery]
watchdog_floor_s = $FLOOR
backoff_s = 0.5
CFG
}

start_clients() {  # start_clients TAG: N streams into $WORK/TAG.i
  CLIENTS=()
  local i
  for i in $(seq 1 "$N"); do
    # printf, not a python per client: the streams start together (the
    # tiny model finishes a stream in well under a second)
    printf '{"prompt": "Story %s: once upon a time, in a land of many experts and few tokens, there lived", "max_tokens": %s, "temperature": 0, "ignore_eos": true, "stream": true}' "$i" "$TOKENS" |
      kv_curl "$SOCK" -N -H 'Content-Type: application/json' -d @- http://x/v1/completions \
        > "$WORK/$1.$i" 2>&1 &
    CLIENTS+=($!)
  done
}
compare() {  # compare TAG REFTAG: every stream of TAG equals REFTAG's
  local i same=0 got want
  for i in $(seq 1 "$N"); do
    got=$(kv_stream_text "$WORK/$1.$i")
    want=$(kv_stream_text "$WORK/$2.$i")
    case "$want" in ERROR* | "''") bad "$2: client $i: $want" ;; esac
    if [ "$got" == "$want" ]; then same=$((same + 1)); else bad "$1: client $i: got $got, want $want"; fi
  done
  expect "$1: every stream's text equals $2's byte for byte" "$same" "$N"
}
stats() { kv_curl "$SOCK" http://x/kvasir/v1/stats; }
metric() { kv_curl "$SOCK" http://x/metrics | awk -v m="$1" '$1 == m {print $2}'; }
member_pid() {  # member_pid PROCESS_INDEX: the kvasird --stage N child (members: 2..)
  local p
  for p in $(kv_stage_pids "$KV_PID"); do
    tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q -- "--stage $1 " && { echo "$p"; return; }
  done
}
wait_mid_stream() {  # a quarter of the streams have text, a quarter have not finished
  # (kv.memory admits a few streams at a time: the last ones start only as
  # the first end, so "all started, none finished" never holds here)
  # One grep per look (not one per stream): the tiny model is quick.
  local n=0 finished=0
  for _ in $(seq 1 3000); do
    n=$(grep -l '"text"' "$WORK/$1".* 2> /dev/null | wc -l)
    [ "$n" -ge $((N / 4)) ] && break
    sleep 0.01
  done
  finished=$(grep -l '\[DONE\]' "$WORK/$1".* 2> /dev/null | wc -l)
  [ "$n" -ge $((N / 4)) ] && ok "$1: $n streams producing tokens before the fault" ||
    bad "$1: only $n streams producing tokens"
  [ "$finished" -le $((N - N / 4)) ] && ok "$1: $finished of $N streams finished before the fault" ||
    bad "$1: $finished of $N streams finished before the fault (want a quarter still running)"
}
# check_group_stats TAG MEMBERS: preemptions happened; stages[] has the two
# positions and MEMBERS members of position 1, each with its time and work.
check_group_stats() {
  stats > "$WORK/$1.stats.json"
  python3 - "$WORK/$1.stats.json" "$2" "$1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); members = int(sys.argv[2]); tag = sys.argv[3]
fails = 0
def check(what, ok, detail=""):
    global fails
    print(("ok   " if ok else "FAIL ") + f"{tag}: {what}" + (f": {detail}" if detail and not ok else ""))
    fails += 0 if ok else 1
pre = s.get("engine", {}).get("preemptions", 0)
check("preemptions > 0 (kv.memory holds a fraction of the streams)", pre > 0, str(pre))
st = s["stages"]
pos = [(x.get("position"), x.get("member")) for x in st]
want = [(0, 0), (1, 0)] + [(1, k) for k in range(1, members + 1)]
check("stages[] is every process: (position, member)", pos == want, f"{pos} vs {want}")
for x in st[2:]:
    t = x["busy_s"] + x["starved_s"] + x["blocked_s"]
    check(f"member 1.{x.get('member')}: busy, starved and blocked time, requests answered",
          x["busy_s"] > 0 and x["starved_s"] > 0 and t > 0 and x["batches"] > 0 and x["tokens"] > 0,
          json.dumps(x))
    check(f"member 1.{x.get('member')}: its kernels text is the leader's choices",
          x.get("simd", "").startswith("cpu:"), x.get("simd"))
check("the leader was blocked on its members", st[1]["blocked_s"] > 0, json.dumps(st[1]))
g = st[1].get("experts", {}).get("group", {})
check("the leader's experts.group: one count per process, summing to routed_total",
      len(g.get("routed", [])) == members + 1 and
      sum(g["routed"]) == st[1]["experts"]["routed_total"] > 0, json.dumps(st[1].get("experts")))
sys.exit(1 if fails else 0)
PY
  [ $? -eq 0 ] || fails=$((fails + 1))
}

run_plan() {  # run_plan MODEL TAG GROUP [HEAD_GROUP]: start, N streams
  config "$1" "$3" "${4:-}" > "$WORK/$2.toml"
  kv_start "$KVASIRD" "$KVASIR" "$WORK/$2.toml"
  start_clients "$2"
  kv_wait_clients "$2" 180
}

# worker_round MODEL FAMILY GROUP: position 1's group on a worker (part 3).
# The worker's processes after its rejoin time their own kernels (no
# --simd-inherit across hosts, docs/multi-host.md): the round and its
# one-host reference pin the level, so that no near-tie decides the text.
worker_round() {
  local port=$((20000 + $$ % 20000)) key="$WORK/cluster.key" wpid victim tag="$2.worker"
  # Fewer tokens than the other parts: every decode step crosses the link.
  local simd=${KVASIR_SIMD-unset} TOKENS=48
  export KVASIR_SIMD=${KVASIR_SIMD:-avx2}
  run_plan "$1" "$tag.ref" ""
  kv_stop || bad "$tag.ref: kvasird stopped with an error"
  head -c 32 /dev/urandom > "$key" && chmod 600 "$key"
  { config "$1" "$3" | sed "/^layers = \"1-1\"/a host = \"127.0.0.1:$port\""
    printf '[cluster]\nkey = "%s"\nlink_timeout = 2\n' "$key"; } > "$WORK/$tag.toml"
  "$KVASIRD" --worker --listen "127.0.0.1:$port" --cluster-key "$key" --link-timeout 2 \
    > "$WORK/worker.log" 2>&1 &
  wpid=$!
  KV_SPAWNED+=("$wpid")
  kv_start "$KVASIRD" "$KVASIR" "$WORK/$tag.toml"
  start_clients "$tag"
  kv_wait_clients "$tag" 180
  compare "$tag" "$tag.ref"
  # The member is the worker's `--stage 2` (stages 0-1, then member 0).
  victim=$(for p in $(kv_stage_pids "$wpid"); do
    tr '\0' ' ' < "/proc/$p/cmdline" | grep -q -- "--stage 2 " && echo "$p"; done)
  [ -n "$victim" ] || bad "$tag: no member process under the worker ($wpid)"
  start_clients "$tag.KILL"
  wait_mid_stream "$tag.KILL"
  kill -KILL "$victim"
  kv_wait_clients "$tag.KILL" 180
  compare "$tag.KILL" "$tag.ref"
  grep -q "worker stage 1 member 1 killed by signal 9" "$WORK/worker.log" &&
    ok "$tag: the worker ended the session naming its lost member" ||
    bad "$tag: the worker's log: $(tail -3 "$WORK/worker.log")"
  expect "$tag: the leader rejoined: joins, faults" "$(stats | python3 -c '
import json, sys
e = json.load(sys.stdin)["engine"]
print(e["links"][0]["joins"], e["faults"])')" "2 1"
  kv_stop || bad "$tag: kvasird stopped with an error"
  kill -TERM "$wpid"
  wait "$wpid"
  expect "$tag: the worker: SIGTERM → exit 0" "$?" "0"
  [ "$simd" == unset ] && unset KVASIR_SIMD || export KVASIR_SIMD=$simd
}

for family in ${KV_GROUPS_FAMILIES:-qwen3moe qwen2moe mixtral gpt-oss}; do
  MODEL="$WORK/$family.gguf"
  "$WRITER" "$family" "$MODEL" || { bad "write_tiny_model $family"; continue; }
  # A group of g processes: the leader and g - 1 members (1 to 4 members).
  case $family in
    qwen3moe) G2="0-3 4-6" G3="0-2 3-4 5-6" G4="0-1 2-3 4-5 6" G5="0-1 2-3 4 5 6" ;;
    qwen2moe) G2="0-1 2-4" G3="0 1-2 3-4" G4="0 1 2 3-4" G5="0 1 2 3 4" ;;
    mixtral) G2="0-1 2-3" G3="0 1 2-3" G4="0 1 2 3" G5="" ;;
    # gpt-oss (expert biases indexed by expert id in every member): 2 and 4
    # processes only, to keep the suite's time (~15 s for the family).
    gpt-oss) G2="0-1 2-3" G3="" G4="0 1 2 3" G5="" ;;
  esac
  run_plan "$MODEL" "$family.ref" ""
  kv_stop || bad "$family.ref: kvasird stopped with an error"
  for g in 2 3 4 5; do
    ranges=G$g
    ranges=${!ranges}
    [ -n "$ranges" ] || continue
    run_plan "$MODEL" "$family.g$g" "$ranges"
    compare "$family.g$g" "$family.ref"
    check_group_stats "$family.g$g" $((g - 1))
    expect "$family.g$g: kvasir status lists each member as 'stage 1.K (group member)'" \
      "$("$KVASIR" status --socket "$SOCK" | grep -c '^  stage 1\.[1-9] (group member): layers 1-1 ')" \
      "$((g - 1))"
    grep -q "loaded: ready.*; stage 1.1 (1-1): ready, " "$WORK/kvasird.log" &&
      ok "$family.g$g: the start-up progress names member 1.1" ||
      bad "$family.g$g: no member in the start-up progress line"
    if [ "$family" == qwen3moe ] && [ $g == 4 ]; then
      # 2. Faults: the member of process index 2 (1.1) killed, then 4 (1.3) stopped.
      for fault in KILL:2:1 STOP:4:2; do
        IFS=: read -r sig idx want <<< "$fault"
        victim=$(member_pid "$idx")
        [ -n "$victim" ] || { bad "$sig: member $idx not found"; continue; }
        start_clients "$family.$sig"
        wait_mid_stream "$family.$sig"
        kill "-$sig" "$victim"
        kv_wait_clients "$family.$sig" 180
        compare "$family.$sig" "$family.ref"
        expect "$sig: kvasir_stage_restarts_total" "$(metric kvasir_stage_restarts_total)" "$want"
        now=$(member_pid "$idx")
        [ -n "$now" ] && [ "$now" != "$victim" ] && ok "$sig: member restarted ($victim → $now)" ||
          bad "$sig: member not restarted (was $victim, now '$now')"
        expect "$sig: no new epoch (a member holds no batch): faults" \
          "$(stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["engine"]["faults"])')" "0"
      done
      grep -q "held a batch for .* hung, killed" "$WORK/kvasird.log" &&
        ok "STOP: the watchdog found the stopped member" || bad "STOP: no watchdog kill in the log"
      # The leader (stage 1) killed: a stage loss as without a group (a new
      # epoch, every running sequence recomputed); its members, idle or
      # answering a request of the dead leader, serve its successor.
      victim=$(member_pid 1)
      start_clients "$family.LEADER"
      wait_mid_stream "$family.LEADER"
      kill -KILL "$victim"
      kv_wait_clients "$family.LEADER" 180
      compare "$family.LEADER" "$family.ref"
      now=$(member_pid 1)
      [ -n "$now" ] && [ "$now" != "$victim" ] && ok "LEADER: restarted ($victim → $now)" ||
        bad "LEADER: not restarted (was $victim, now '$now')"
      expect "LEADER: one new epoch: faults" \
        "$(stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["engine"]["faults"])')" "1"
    fi
    kv_stop || bad "$family.g$g: kvasird stopped with an error"
  done
  if [ "$family" == qwen3moe ]; then
    # A group at the head (it embeds the tokens too), a plain tail.
    run_plan "$MODEL" "$family.head" "" "$G2"
    compare "$family.head" "$family.ref"
    stats | python3 -c 'import json,sys; s=json.load(sys.stdin)["stages"]; print([(x["position"], x["member"]) for x in s], s[2]["batches"] > 0)' > "$WORK/head.txt"
    expect "$family.head: a member of position 0 answered" "$(cat "$WORK/head.txt")" "[(0, 0), (1, 0), (0, 1)] True"
    kv_stop || bad "$family.head: kvasird stopped with an error"
    worker_round "$MODEL" "$family" "$G2"
  fi
done
kv_finish "$WORK/kvasird.log"
