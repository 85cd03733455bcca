#!/usr/bin/env bash
# tests/packaging/test_k8s_lws_run.sh BUILD_DIR SOURCE_DIR KVASIRD — the
# multi-host manifests' own commands, run: the worker container's args and
# the leader's config as its render-config init container writes it, in a
# network namespace whose /etc/hosts (ip netns exec bind-mounts
# /etc/netns/NAME/hosts) gives worker 1's pod name as LWS would resolve it.
# The leader joins the worker by that name, /health turns 200 and a
# completion is served through the leader's HTTP port. No cluster is
# reachable here: this is the part of a LeaderWorkerSet that runs without
# one. Needs root and iproute2 (exit 77 otherwise) and the k8s venv of
# test_k8s.sh (exit 77 where PyPI cannot be reached to make it).
set -euo pipefail

BUILD=$(cd "${1:?BUILD_DIR}" && pwd)
SRC=$(cd "${2:?SOURCE_DIR}" && pwd)
KVASIRD=$(realpath "${3:?KVASIRD}")
DIR=$SRC/packaging/kubernetes/multi-host
MODEL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
VENV=$BUILD/k8s-venv
NS=kvlws$$
WORK=$(mktemp -d /tmp/kvasir-test-k8s-lws-run.XXXXXX)
PIDS=()

step() { echo "== $(date -u +%T) $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  ip netns del "$NS" 2>/dev/null || true
  rm -rf "/etc/netns/$NS" "$WORK"
}
trap cleanup EXIT

if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "SKIP: needs root and iproute2 (a network namespace with its own /etc/hosts)"
  exit 77
fi
[ -f "$MODEL" ] || fail "$MODEL is missing: run scripts/fetch-model"
. "$SRC/tests/packaging/k8s_venv.sh"
make_k8s_venv "$VENV" "$WORK"

step "the leader's config, as render-config writes it"
mkdir -p "$WORK/pods"
head -c 32 /dev/urandom > "$WORK/cluster.key"
chmod 600 "$WORK/cluster.key"
"$VENV/bin/python" "$SRC/tests/packaging/k8s_lws_check.py" "$DIR" \
  "$SRC/tests/data/k8s/lws-v0.9.0.schema.json" "$WORK/pods" "$WORK/kvasir.toml" "$MODEL" \
  "$WORK/cluster.key" >"$WORK/check.log" || { cat "$WORK/check.log"; fail "k8s_lws_check.py"; }
# Only what a pod has and a test host lacks: the socket's folder.
sed -i "s|^socket = .*|socket = \"$WORK/kvasir.sock\"|" "$WORK/kvasir.toml"
WORKER_HOST=$(sed -n 's/^host = "\(.*\):\([0-9]*\)"$/\1/p' "$WORK/kvasir.toml")
WORKER_PORT=$(sed -n 's/^host = "\(.*\):\([0-9]*\)"$/\2/p' "$WORK/kvasir.toml")
HTTP_PORT=$(sed -n 's/^http = "0.0.0.0:\([0-9]*\)"$/\1/p' "$WORK/kvasir.toml")
[ -n "$WORKER_HOST" ] && [ -n "$HTTP_PORT" ] || fail "no worker host or http port in the config"
WARGS=$("$VENV/bin/python" -c '
import sys, yaml
lws = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d["kind"] == "LeaderWorkerSet")
c = next(c for c in lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
         if c["name"] == "kvasird")
print(" ".join(c["args"]))' "$DIR/leaderworkerset.yaml")
WARGS=${WARGS//\/run\/kvasir-cluster\/cluster.key/$WORK/cluster.key}
echo "worker: kvasird $WARGS; leader joins $WORKER_HOST:$WORKER_PORT, serves :$HTTP_PORT"

step "namespace $NS: loopback, and $WORKER_HOST in its /etc/hosts"
ip netns add "$NS"
ip netns exec "$NS" ip link set lo up
mkdir -p "/etc/netns/$NS"
printf '127.0.0.1 localhost\n127.0.0.1 %s\n' "$WORKER_HOST" > "/etc/netns/$NS/hosts"

step "the worker container's command"
# shellcheck disable=SC2086  # the manifest's args, word for word
ip netns exec "$NS" "$KVASIRD" $WARGS >"$WORK/worker.log" 2>&1 &
PIDS+=($!)
step "the leader container's command"
ip netns exec "$NS" "$KVASIRD" --config "$WORK/kvasir.toml" >"$WORK/leader.log" 2>&1 &
PIDS+=($!)

get() {  # PATH → "STATUS BODY" from inside the namespace
  ip netns exec "$NS" python3 -c '
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen("http://127.0.0.1:" + sys.argv[1] + sys.argv[2], timeout=5)
    print(r.status, r.read().decode()[:200])
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode()[:200])
except Exception as e:
    print(0, e)' "$HTTP_PORT" "$1"
}
step "/health until 200 (the join, the load, the warm-up)"
ok=""
for _ in $(seq 1 120); do
  h=$(get /health)
  case "$h" in 200*) ok=1; break ;; esac
  kill -0 "${PIDS[1]}" 2>/dev/null || break
  sleep 0.5
done
[ -n "$ok" ] || { echo "last /health: $h"; tail -20 "$WORK/leader.log"; tail -20 "$WORK/worker.log"; fail "the leader never became healthy"; }
echo "/health: $h"

step "a completion through the leader's HTTP port"
out=$(ip netns exec "$NS" python3 -c '
import json, sys, urllib.request
body = json.dumps({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}).encode()
r = urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:" + sys.argv[1] + "/v1/completions",
                           body, {"Content-Type": "application/json"}), timeout=60)
print(json.loads(r.read())["choices"][0]["text"])' "$HTTP_PORT") || { tail -20 "$WORK/leader.log"; fail "no completion"; }
echo "completion: $out"
[ -n "$out" ] || fail "an empty completion"
grep -q "$WORKER_HOST" "$WORK/leader.log" || { tail -20 "$WORK/leader.log"; fail "the leader's log does not name the worker it joined"; }
echo "PASS"
