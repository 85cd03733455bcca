# tests/packaging/k8s_venv.sh — sourced by test_k8s.sh and test_k8s_lws.sh:
# make_k8s_venv VENV WORK makes (once; reused while its version is the pin)
# a venv with kubernetes-validate, pinned, which also brings PyYAML and
# jsonschema. Exits 77 (skip) only when PyPI cannot be reached; fails on
# anything else. Both tests hold the ctest resource lock kvasir-k8s-venv.
K8S_VALIDATE_PIN=kubernetes-validate==1.31.0
# What pip logs when it cannot reach the index (its retries), as opposed to
# an index that answers without the pin.
K8S_OFFLINE='NewConnectionError|Max retries exceeded|Temporary failure in name resolution'
K8S_OFFLINE+='|ConnectTimeout|Network is unreachable|ProxyError|SSLError'

make_k8s_venv() {
  local venv=$1 work=$2 have
  have=$("$venv/bin/kubernetes-validate" --version 2>/dev/null || true)
  [ "$have" = "${K8S_VALIDATE_PIN#*==}" ] && return 0
  python3 -m venv --clear "$venv" || fail "python3 -m venv (python3-venv missing? run scripts/setup)"
  if ! "$venv/bin/pip" install --disable-pip-version-check "$K8S_VALIDATE_PIN" >"$work/pip.log" 2>&1; then
    cat "$work/pip.log"
    rm -rf "$venv"
    if grep -qiE "$K8S_OFFLINE" "$work/pip.log"; then
      echo "SKIP: PyPI is unreachable: cannot install $K8S_VALIDATE_PIN"
      exit 77
    fi
    fail "pip install $K8S_VALIDATE_PIN"
  fi
}
