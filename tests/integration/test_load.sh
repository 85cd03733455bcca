#!/usr/bin/env bash
# Load against the real kvasird: 2,000 requests at once on a KV
# pool sized for a tenth of them, then 10,000 random client aborts; nothing
# hangs, nothing leaks (blocks, fds, threads), memory stays bounded. The
# client is tests/integration/load_client.py (stdlib asyncio over the Unix
# socket); this script starts the daemon and checks its stages survived.
#
# Pool: each request is a short prompt (4–5 tokens) + max_tokens 4, so it
# holds one 16-token block; kv.memory = 36MiB gives 204 blocks on this
# model (15 layers × 3 KV heads × 64 × 2 (K,V) × f16 × 16 tokens = 180 KiB
# a block), a tenth of 2,000. Three ways to be "busy", all exercised:
# server.max_connections = 1024 answers the connections past it with 503;
# scheduler.max_queue = 256 answers requests past the queue with 429; the
# KV pool holds ~100 running (one spare block each), the rest wait.
#
# Usage: test_load.sh KVASIRD KVASIR [SOURCE_DIR] [REQUESTS] [ABORTS]
# Exit 0 = passed, 77 = skipped (no model file), anything else = failed.
set -uo pipefail
KVASIRD=${1:?kvasird path}
SRC=$(cd "${3:-$(dirname "$0")/../..}" && pwd)
# KV_LOAD_REQUESTS / KV_LOAD_ABORTS: scripts/test --sanitize runs fewer (ASan
# makes every request several times dearer; the paths matter there, not the count).
REQUESTS=${4:-${KV_LOAD_REQUESTS:-2000}}
ABORTS=${5:-${KV_LOAD_ABORTS:-10000}}
source "$SRC/tests/integration/lib.sh"
kv_setup load-load
CONF="$WORK/kvasir.toml"
# max_rows 32: decode rows of many sequences share one pass over the weights
# (the default 8 would make the burst CPU-bound on 2 cores for minutes).
kv_config "$(printf '[kv]\nmemory = "36MiB"\n[scheduler]\nmax_queue = 256')" |
  sed 's/^max_rows = 8/max_rows = 32/; s/^\(socket = .*\)/\1\nmax_connections = 1024/' > "$CONF"
kv_spawn PID "$CONF" "$WORK/kvasird.log"
kv_wait_ready "$SOCK" 180 || { bad "kvasird did not become ready"; kv_finish "$WORK/kvasird.log"; }
ok "kvasird up: $(grep -m1 'KV blocks' "$WORK/kvasird.log")"
STAGES=$(kv_stage_pids "$PID" | sort | tr '\n' ' ')

if python3 "$SRC/tests/integration/load_client.py" "$SOCK" "$PID" --requests "$REQUESTS" \
  --max-tokens 4 --aborts "$ABORTS" --json "${KV_LOAD_JSON:-$WORK/load.json}"; then
  ok "load client"
else
  bad "load client"
fi
kv_gone "$PID" && bad "kvasird died under load" || ok "kvasird still running"
expect "same stage processes" "$(kv_stage_pids "$PID" | sort | tr '\n' ' ')" "$STAGES"
kill -TERM "$PID"
timeout 60 tail --pid="$PID" -f /dev/null
wait "$PID"
expect "SIGTERM → exit 0" "$?" "0"
kv_finish "$WORK/kvasird.log"
