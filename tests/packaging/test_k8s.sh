#!/usr/bin/env bash
# tests/packaging/test_k8s.sh BUILD_DIR SOURCE_DIR KVASIRD — the Kubernetes
# manifests in packaging/kubernetes/, without a cluster (none is reachable
# here): every manifest validated strictly against the Kubernetes 1.31
# schemas (PyPI kubernetes-validate 1.31.0, in a venv in the build folder,
# made once and reused), then what a schema cannot see (k8s_check.py): the
# probes', Service's and Prometheus annotations' port is server.http's, the
# volumes hold what the config names, the Containerfile installs the .deb
# CPack names and runs as the pod's user; last, `kvasird --check` accepts
# the ConfigMap's kvasir.toml (model.path pointed at the source tree's model).
# Exit 77 (skip) only when kubernetes-validate cannot be installed because
# PyPI cannot be reached.
set -euo pipefail

BUILD=$(cd "${1:?BUILD_DIR}" && pwd)
SRC=$(cd "${2:?SOURCE_DIR}" && pwd)
KVASIRD=${3:?KVASIRD}
DIR=$SRC/packaging/kubernetes
MODEL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
VENV=$BUILD/k8s-venv
WORK=$(mktemp -d /tmp/kvasir-test-k8s.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

step() { echo "== $(date -u +%T) $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[ -f "$MODEL" ] || fail "$MODEL is missing: run scripts/fetch-model"
[ -f "$BUILD/CPackConfig.cmake" ] || fail "$BUILD/CPackConfig.cmake is missing (configure first)"

step "venv $VENV"
. "$SRC/tests/packaging/k8s_venv.sh"
make_k8s_venv "$VENV" "$WORK"

step "kubernetes-validate --strict, Kubernetes 1.31"
mapfile -t MANIFESTS < <(ls "$DIR"/*.yaml)
[ "${#MANIFESTS[@]}" -ge 4 ] || fail "want at least 4 manifests in $DIR, found ${#MANIFESTS[@]}"
(cd "$DIR" && "$VENV/bin/kubernetes-validate" -k 1.31.0 --strict "${MANIFESTS[@]##*/}") \
  | tee "$WORK/validate.log" || fail "a manifest does not validate against Kubernetes 1.31"
passed=$(grep -c ' passed for resource ' "$WORK/validate.log" || true)
[ "$passed" -eq "${#MANIFESTS[@]}" ] || fail "$passed of ${#MANIFESTS[@]} manifests passed"

step "consistency: manifests, kvasir.toml, Containerfile, package"
"$VENV/bin/python" "$SRC/tests/packaging/k8s_check.py" "$DIR" "$BUILD/CPackConfig.cmake" \
  "$(dpkg --print-architecture)" "$MODEL" "$WORK/kvasir.toml" || fail "the manifests disagree"
grep -qF "path = \"$MODEL\"" "$WORK/kvasir.toml" || fail "model.path was not substituted"

step "kvasird --check --config (the ConfigMap's kvasir.toml)"
"$KVASIRD" --check --config "$WORK/kvasir.toml" 2>&1 | tee "$WORK/check.log" \
  || fail "kvasird --check refuses the ConfigMap's kvasir.toml"
echo "PASS"
