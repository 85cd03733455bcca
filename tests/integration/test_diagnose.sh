#!/usr/bin/env bash
# `kvasir diagnose` on real daemons (2 CPU stages, default model) each
# misconfigured one way, under a load that shows it: the diagnosis must
# name the right cause and the one setting to turn (cli/diagnose.h):
#   too little KV                   -> kv_capacity, kv.memory
#   max_inflight = 1 on 2 stages with a core each
#                                   -> batching, plan.max_inflight
#   huge chunks on long prompts     -> prefill_interference, scheduler.itl_target_ms
#   a lopsided layer split          -> batching, stages.layers
# Each daemon runs only as long as its load takes to show (a few seconds).
#
# Usage: test_diagnose.sh KVASIRD KVASIR [SOURCE_DIR]
# Exit 0 = passed, 77 = skipped (no model file), anything else = failed.
set -uo pipefail

KVASIRD=${1:?kvasird path}
KVASIR=${2:?kvasir path}
SRC=${3:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/integration/lib.sh"
kv_setup diagnose

LOAD_PID=
stop_load() {
  [ -n "$LOAD_PID" ] && kill "$LOAD_PID" 2>/dev/null && wait "$LOAD_PID" 2>/dev/null
  LOAD_PID=
}

# plan SPLIT0 SPLIT1 EXTRA [STAGE]: the two-stage config with these layers,
# extra TOML, and STAGE's lines in each stage.
plan() {
  cat <<CFG
[model]
path = "$MODEL"
[[stages]]
layers = "$1"
${4:-}
[[stages]]
layers = "$2"
${4:-}
[server]
socket = "$SOCK"
$3
CFG
}

# case NAME CAUSE KNOB WARMUP_S INTERVAL_S CONFIG BENCH_ARGS...: start the
# daemon, put the load on, diagnose over the interval once it has shown,
# check, stop.
case_() {
  local name=$1 cause=$2 knob=$3 warm=$4 interval=$5 cfg=$6
  shift 6
  echo "$cfg" > "$WORK/$name.toml"
  kv_start "$KVASIRD" "$KVASIR" "$WORK/$name.toml"
  "$KVASIR" bench --socket "$SOCK" --progress never "$@" > "$WORK/$name.bench" 2>&1 &
  LOAD_PID=$!
  sleep "$warm"
  "$KVASIR" diagnose --socket "$SOCK" --interval "$interval" --json > "$WORK/$name.json"
  local got
  got=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['cause'], d['knob'])" \
    "$WORK/$name.json")
  expect "$name: diagnosis" "$got" "$cause $knob"
  cat "$WORK/$name.json"
  stop_load
  kv_stop
}

# 16 blocks; 8 requests of 8 blocks each: preemptions.
# 6 s: on a loaded machine (ctest -j2) a 3 s interval once saw no
# preemption and 4 of 17 blocks free (the rule wants < 10%), so 'none'.
case_ kv kv_capacity kv.memory 4 6 "$(plan 0-14 15-29 '[kv]
memory = "3MiB"')" --requests 64 --concurrency 8 --prompt-len 64 --max-tokens 64

# One micro-batch for two stages: each waits for the other half the time.
case_ inflight batching plan.max_inflight 4 3 "$(plan 0-14 15-29 '[plan]
max_inflight = 1' 'threads = 1')" --requests 64 --concurrency 8 --prompt-len 32 --max-tokens 200

# Whole 400-token prompts in one step beside decodes, no ITL target (a
# step of a few seconds: the interval is long enough to see some). The
# load outlasts the interval (warm-up 2 s + 8 s) on a fast host too: the
# decodes ask for 1,200 tokens and a long prompt comes every 0.5 s until
# t = 12, so that > 5% of the decode rows ride with one (the rule's floor).
# With 400-token decodes and a prompt a second until t = 8, a quiet host
# had finished it all before the diagnosis looked ("idle").
{
  for _ in 1 2 3 4; do echo '{"t": 0, "prompt_len": 16, "max_tokens": 1200}'; done
  for i in $(seq 2 24); do echo "{\"t\": $((i / 2)).$((i % 2 * 5)), \"prompt_len\": 400, \"max_tokens\": 2}"; done
} > "$WORK/longs.jsonl"
case_ chunks prefill_interference scheduler.itl_target_ms 2 8 "$(plan 0-14 15-29 '[plan]
max_tokens = 2048
[scheduler]
chunk_size = 2048
itl_target_ms = 0')" --trace "$WORK/longs.jsonl"

# Four layers on the head, twenty-six (and the output head) on the tail.
case_ split batching stages.layers 4 3 "$(plan 0-3 4-29 '')" \
  --requests 64 --concurrency 8 --prompt-len 32 --max-tokens 200

kv_finish
