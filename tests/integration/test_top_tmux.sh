#!/usr/bin/env bash
# `kvasir top` as a person sees it: the real kvasird (2-stage CPU plan on the
# default model) under load, `kvasir top` running in a tmux pane, the screen
# read with capture-pane, `q` typed to quit.
#
# Usage: test_top_tmux.sh KVASIRD KVASIR [SOURCE_DIR]
# Exit 0 = passed, 77 = skipped (no model file or no tmux), else failed.
set -uo pipefail

KVASIRD=${1:?kvasird path}
KVASIR=${2:?kvasir path}
SRC=$(cd "${3:-$(dirname "$0")/../..}" && pwd)
MODEL="$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$MODEL" ] || { echo "SKIP: $MODEL is missing (scripts/fetch-model)"; exit 77; }
command -v tmux >/dev/null || { echo "SKIP: tmux is not installed (scripts/setup installs it)"; exit 77; }

WORK=$(mktemp -d /tmp/kvasir-top.XXXXXX)
SOCK="$WORK/kvasir.sock"
SESSION="kvasir-top-$$"
PID=
LOAD=()
cleanup() {
  tmux kill-session -t "$SESSION" 2>/dev/null
  for p in "${LOAD[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
fails=0
passes=0
ok() { echo "ok   $*"; passes=$((passes + 1)); }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

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
EOF
"$KVASIRD" --config "$WORK/kvasir.toml" > "$WORK/kvasird.log" 2>&1 &
PID=$!
"$KVASIR" status --wait 180 --socket "$SOCK" >/dev/null || { cat "$WORK/kvasird.log"; exit 1; }

# Load: a few long generations in the background.
for i in 1 2 3 4; do
  "$KVASIR" generate --socket "$SOCK" --max-tokens 400 --temperature 0 "Story $i: once upon a time" \
    > /dev/null 2>&1 &
  LOAD+=($!)
done

tmux new-session -d -s "$SESSION" -x 120 -y 40 "$KVASIR top --socket $SOCK; echo TOP-EXITED; sleep 30"
screen=""
for _ in $(seq 1 60); do  # up to ~30 s for a loaded frame to show
  sleep 0.5
  screen=$(tmux capture-pane -p -t "$SESSION")
  # A frame under load: a stage line (stage layers device now busy% ...)
  # with a non-zero busy share (rates need
  # two samples, so the first frame reads 0).
  awk '$2 ~ /^(0-14|15-29)$/ && $5 + 0 > 0 {found=1} END {exit !found}' <<<"$screen" && break
done
echo "---- screen ----"; echo "$screen"; echo "----------------"
grep -q "0-14" <<<"$screen" && grep -q "15-29" <<<"$screen" && ok "top shows both stages' layers" ||
  bad "top does not show the stages"
awk '$2 ~ /^(0-14|15-29)$/ && $5 + 0 > 0 {found=1} END {exit !found}' <<<"$screen" &&
  ok "top shows a busy share above 0 under load" || bad "no stage shows busy time under load"
grep -qiE "kv|block" <<<"$screen" && ok "top shows the KV cache" || bad "no KV line"
# The diagnosis line is Diagnosis::summary (cli/diagnose.cpp): each verdict
# opens with its own words, not its cause code.
grep -qE "^(KV capacity|batching|prefill interference|saturated and balanced|one long step|descheduled|idle|loading):|^no stage statistics" <<<"$screen" && ok "top names a bottleneck" ||
  bad "no diagnosis line"

tmux send-keys -t "$SESSION" q
exited=no
for _ in $(seq 1 10); do
  sleep 0.3
  tmux capture-pane -p -t "$SESSION" | grep -q TOP-EXITED && { exited=yes; break; }
done
[ "$exited" = yes ] && ok "q quits top" || bad "top did not quit on q"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
