#!/usr/bin/env bash
# bench/gpu/make_model.py writes a model kvasird accepts: the tiny shape,
# written by the script, validated by `kvasird --check` (config.json fields,
# every tensor's name, dtype and shape, norms finite). The 1B/8B shapes differ
# only in numbers. usage: test_gpu_bench_model.sh KVASIRD SOURCE_DIR
set -euo pipefail
kvasird=$1
src=$2
dir=$(mktemp -d /tmp/kvasir-cudas-benchmodel.XXXXXX)
trap 'rm -rf "$dir"' EXIT
python3 "$src/bench/gpu/make_model.py" tiny "$dir/model" >/dev/null
cat >"$dir/kvasir.toml" <<TOML
[model]
path = "$dir/model"
[[stages]]
layers = "0-0"
[[stages]]
layers = "1-1"
[server]
socket = "$dir/kvasir.sock"
TOML
out=$("$kvasird" --check --config "$dir/kvasir.toml" 2>&1)
echo "$out"
grep -q "valid (2 stages, 2 layers" <<<"$out"
# A truncated weights file must be refused, not read past its end.
truncate -s 100000 "$dir/model/model.safetensors"
if "$kvasird" --check --config "$dir/kvasir.toml" >"$dir/bad.txt" 2>&1; then
  echo "a truncated model was accepted"; exit 1
fi
cat "$dir/bad.txt"
echo "ok"
