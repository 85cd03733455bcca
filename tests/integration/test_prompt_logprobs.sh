#!/usr/bin/env bash
# Prompt logprobs through the REAL kvasird (a 2-stage CPU plan on the
# default model, prefill chunks of 64 tokens): echo with logprobs lists the
# prompt's tokens (null first) with text_offset into the returned text;
# echo with max_tokens 0 scores a prompt (lm-eval's loglikelihood) with the
# logprobs a greedy generation reported for the same tokens, also across
# prefill chunks; prompt_logprobs in vLLM's shape; a cached prefix is not
# taken by such a request; the 400s.
#
# Usage: test_prompt_logprobs.sh KVASIRD [SOURCE_DIR]
# Exit 0 = passed, 77 = skipped (no model file), anything else = failed.
set -uo pipefail

KVASIRD=${1:?kvasird path}
SRC=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
MODEL="$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$MODEL" ] || { echo "SKIP: $MODEL is missing (scripts/fetch-model)"; exit 77; }

WORK=$(mktemp -d /tmp/kvasir-prompt-lp.XXXXXX)
SOCK="$WORK/kvasir.sock"
PID=
cleanup() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

cat > "$WORK/kvasir.toml" <<TOML
[model]
path = "$MODEL"
[plan]
max_rows = 8
max_tokens = 64
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
TOML

"$KVASIRD" --config "$WORK/kvasir.toml" > "$WORK/kvasird.log" 2>&1 &
PID=$!
for _ in $(seq 1 180); do
  curl -sf --unix-socket "$SOCK" http://x/health > /dev/null 2>&1 && break
  sleep 1
done
if ! curl -sf --unix-socket "$SOCK" http://x/health > /dev/null 2>&1; then
  echo "kvasird did not become ready; its log:"; cat "$WORK/kvasird.log"; exit 1
fi

python3 "$SRC/tests/integration/prompt_logprobs_client.py" "$SOCK"
rc=$?
[ $rc -ne 0 ] && tail -20 "$WORK/kvasird.log"
exit $rc
