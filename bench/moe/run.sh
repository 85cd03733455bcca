#!/usr/bin/env bash
# Expert group vs layer split on the same cores (docs/expert-groups.md,
# "Benchmark"): a random Qwen3-MoE (bench/moe/make_moe_model: 8 layers, 64
# experts, top 8, expert FFN dominating, Q8_0), each plan started in turn
# under `taskset -c CORES`, then `kvasir bench`:
#   single: one request at a time, decode ITL (ms per token);
#   c16:    16 concurrent requests, output tokens per second.
# Plans (a ring needs two positions, so the group plan's tail holds layer 7):
#   split: layers 0-3 | 4-7, one thread each (2 processes);
#   group: a group of 2 over layers 0-6 (experts 0-31 | 32-63) | layer 7,
#          one thread each (3 processes, at most 2 computing at once for
#          one request: the group's two, or the tail);
#   groups2: two groups of 2, layers 0-3 and 4-7 (experts halved in each),
#          one thread each (4 processes, 2 computing at once).
# Usage: [PLANS="split group groups2"] bench/moe/run.sh BUILD_DIR [CORES] [ROUNDS]
#        [LAYERS EXPERTS TOP_K HIDDEN EXPERT_FFN]
# (the model's shape: make_moe_model's defaults 8 64 8 512 384 when absent;
# the group plan's ranges split the experts in halves, its group holds
# layers 0..LAYERS-2)
set -euo pipefail
BUILD=$(cd "${1:?build dir}" && pwd)
CORES=${2:-0,1}
ROUNDS=${3:-3}
WORK=$(mktemp -d /tmp/kvasir-bench-moe.XXXXXX)
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$WORK"' EXIT
PID=
"$BUILD/bin/make_moe_model" "$WORK/moe.gguf" "${@:4}"
LAYERS=${4:-8}
EXPERTS=${5:-64}

config() {  # config PLAN
  printf '[model]\npath = "%s"\n[plan]\nmax_rows = 16\nmax_tokens = 256\n' "$WORK/moe.gguf"
  if [ "$1" == split ]; then
    printf '[[stages]]\nlayers = "0-%d"\nthreads = 1\n' $((LAYERS / 2 - 1))
    printf '[[stages]]\nlayers = "%d-%d"\nthreads = 1\n' $((LAYERS / 2)) $((LAYERS - 1))
  elif [ "$1" == groups2 ]; then
    local half=$((EXPERTS / 2)) mid=$((LAYERS / 2))
    for range in "0-$((mid - 1))" "$mid-$((LAYERS - 1))"; do
      printf '[[stages]]\nlayers = "%s"\nexperts = "0-%d"\nthreads = 1\n' "$range" $((half - 1))
      printf '[[stages]]\nlayers = "%s"\nexperts = "%d-%d"\nthreads = 1\n' "$range" $half \
        $((EXPERTS - 1))
    done
  else
    local half=$((EXPERTS / 2))
    printf '[[stages]]\nlayers = "0-%d"\nexperts = "0-%d"\nthreads = 1\n' $((LAYERS - 2)) $((half - 1))
    printf '[[stages]]\nlayers = "0-%d"\nexperts = "%d-%d"\nthreads = 1\n' $((LAYERS - 2)) $half \
      $((EXPERTS - 1))
    printf '[[stages]]\nlayers = "%d"\nthreads = 1\n' $((LAYERS - 1))
  fi
  printf '[kv]\nmemory = "256MiB"\n[server]\nsocket = "%s/k.sock"\n' "$WORK"
}

run() {  # run PLAN ROUND: prints "PLAN ROUND single_itl_ms c16_tok_s"
  config "$1" > "$WORK/$1.toml"
  taskset -c "$CORES" "$BUILD/bin/kvasird" --config "$WORK/$1.toml" > "$WORK/$1.log" 2>&1 &
  PID=$!
  "$BUILD/bin/kvasir" status --wait 300 --socket "$WORK/k.sock" > /dev/null 2>&1
  local single c16
  single=$("$BUILD/bin/kvasir" bench --socket "$WORK/k.sock" --requests 4 --concurrency 1 \
    --max-tokens 64 --prompt-len 16 --seed "$2" --json --progress never)
  c16=$("$BUILD/bin/kvasir" bench --socket "$WORK/k.sock" --requests 32 --concurrency 16 \
    --max-tokens 64 --prompt-len 16 --seed "$2" --json --progress never)
  kill "$PID"; wait "$PID" || true
  PID=
  python3 - "$1" "$2" "$single" "$c16" <<'PY'
import json, sys
s, c = json.loads(sys.argv[3]), json.loads(sys.argv[4])
print(f"{sys.argv[1]:<6} round {sys.argv[2]}: single-request ITL p50 {s['itl_ms']['p50']:.2f} ms "
      f"(mean {s['itl_ms']['mean']:.2f}); 16 concurrent: {c['output_tok_s']:.1f} output tok/s "
      f"(ITL p50 {c['itl_ms']['p50']:.2f} ms)")
PY
}

grep -m1 "model name" /proc/cpuinfo
for r in $(seq 1 "$ROUNDS"); do
  for plan in ${PLANS:-split group groups2}; do run "$plan" "$r"; done
done
