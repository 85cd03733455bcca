#!/usr/bin/env bash
# tests/packaging/test_k8s_lws.sh BUILD_DIR SOURCE_DIR KVASIRD — the
# multi-host manifests in packaging/kubernetes/multi-host/ (a LeaderWorkerSet
# of a leader and one worker, docs/kubernetes.md "Multi-host"), without a
# cluster (none is reachable here):
#  - the LeaderWorkerSet strictly against LWS's CRD schema, release v0.9.0
#    (tests/data/k8s/, written by lws_schema.py from the pinned CRD);
#  - its two pod templates, as Pods, and the ConfigMap and Service strictly
#    against the Kubernetes 1.31 schemas (kubernetes-validate, the venv
#    test_k8s.sh uses);
#  - what no schema sees (k8s_lws_check.py), including the leader's
#    render-config script run as the pod runs it;
#  - `kvasird --check` on the config that script wrote.
# Exit 77 (skip) only when PyPI cannot be reached for the venv.
set -euo pipefail

BUILD=$(cd "${1:?BUILD_DIR}" && pwd)
SRC=$(cd "${2:?SOURCE_DIR}" && pwd)
KVASIRD=${3:?KVASIRD}
DIR=$SRC/packaging/kubernetes/multi-host
SCHEMA=$SRC/tests/data/k8s/lws-v0.9.0.schema.json
MODEL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
VENV=$BUILD/k8s-venv
WORK=$(mktemp -d /tmp/kvasir-test-k8s-lws.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

step() { echo "== $(date -u +%T) $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[ -f "$MODEL" ] || fail "$MODEL is missing: run scripts/fetch-model"

step "venv $VENV"
. "$SRC/tests/packaging/k8s_venv.sh"
make_k8s_venv "$VENV" "$WORK"

step "LWS v0.9.0 schema, the pod templates as Pods, consistency"
mkdir -p "$WORK/pods"
head -c 32 /dev/urandom > "$WORK/cluster.key"
chmod 600 "$WORK/cluster.key"
"$VENV/bin/python" "$SRC/tests/packaging/k8s_lws_check.py" "$DIR" "$SCHEMA" "$WORK/pods" \
  "$WORK/kvasir.toml" "$MODEL" "$WORK/cluster.key" || fail "the multi-host manifests disagree"

step "kubernetes-validate --strict, Kubernetes 1.31"
cp "$DIR/configmap.yaml" "$DIR/service.yaml" "$WORK/pods/"
(cd "$WORK/pods" && "$VENV/bin/kubernetes-validate" -k 1.31.0 --strict *.yaml) \
  | tee "$WORK/validate.log" || fail "a pod template or manifest does not validate"
passed=$(grep -c ' passed for resource ' "$WORK/validate.log" || true)
[ "$passed" -eq 4 ] || fail "$passed of 4 (2 pods, ConfigMap, Service) passed"

step "kvasird --check --config (the rendered leader config)"
"$KVASIRD" --check --config "$WORK/kvasir.toml" 2>&1 | tee "$WORK/check.log" \
  || fail "kvasird --check refuses the leader's rendered kvasir.toml"
echo "PASS"
