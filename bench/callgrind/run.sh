#!/usr/bin/env bash
# bench/callgrind: the instruction count of decode steps of the local runner,
# measured with valgrind's callgrind — repeatable whatever else the machine is
# doing, so regressions show without noisy timers. Tracked in
# docs/benchmarks.md.
#
#   bench/callgrind/run.sh [KVASIR_LOCAL]
#
# It counts two runs, a 32-token prompt + 1 token and the same + 9 tokens, and
# prints the difference divided by 8: instructions of one decode step (one
# thread, AVX2 path), free of load and prefill costs. The level is forced
# (KVASIR_SIMD=avx2, or the caller's): in auto mode matmul times the levels
# on first use, and a timed choice would make the count depend on the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build/bin/kvasir-local}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
IDS=$(seq -s, 100 131)
command -v valgrind >/dev/null || { echo "callgrind: valgrind not installed" >&2; exit 77; }
count() {
  local out
  out=$(mktemp)
  KVASIR_SIMD=${KVASIR_SIMD:-avx2} valgrind --tool=callgrind --callgrind-out-file="$out" "$BIN" -m "$MODEL" --ids "$IDS" -n "$1" \
    -t 1 --ignore-eos -q >/dev/null 2>&1
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
  rm -f "$out"
}
a=$(count 1)
b=$(count 9)
echo "instructions: prompt+1 token ${a}; prompt+9 tokens ${b}"
echo "one decode step: $(( (b - a) / 8 )) instructions"
