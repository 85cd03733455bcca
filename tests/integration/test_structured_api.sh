#!/usr/bin/env bash
# Structured outputs and tool calling through the REAL kvasird (a 2-stage
# CPU plan on the default model), driven over TCP by the official `openai`
# package, outputs validated with `jsonschema` (both in the venv kv_venv
# makes): response_format json_schema on every schema of
# structured_schemas.json, json_object, two tools with tool_choice
# required / named / auto / none whole and streamed, a tool result sent back,
# turn injection in user and tool content, refusals
# (structured_client_test.py); then the daemon still serves and stops cleanly.
#
# Usage: test_structured_api.sh KVASIRD KVASIR [SOURCE_DIR]
# Exit 0 = passed, 77 = skipped (no model file, or no venv), else failed.
set -uo pipefail

KVASIRD=${1:?kvasird path}
KVASIR=${2:?kvasir path}
SRC=${3:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/integration/lib.sh"
kv_setup structured-api

VENV=$(kv_venv)
[ -n "$VENV" ] || { echo "SKIP: no venv with openai and jsonschema"; exit 77; }

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
kv_config "http = \"127.0.0.1:$PORT\"" > "$WORK/kvasir.toml"
kv_start "$KVASIRD" "$KVASIR" "$WORK/kvasir.toml"

t0=$SECONDS
if "$VENV/bin/python" "$SRC/tests/integration/structured_client_test.py" \
  "http://127.0.0.1:$PORT/v1" "$SRC/tests/integration/structured_schemas.json"; then
  ok "structured outputs and tool calls through the openai client ($((SECONDS - t0)) s)"
else
  bad "structured outputs and tool calls through the openai client"
fi
expect "still serving" "$(kv_curl "$SOCK" -o /dev/null -w '%{http_code}' http://x/health)" "200"
kv_stop
expect "kvasird exits 0 on SIGTERM" "$?" "0"
kv_finish "$WORK/kvasird.log"
