#!/usr/bin/env bash
# top_logprobs up to 20 and logit_bias through the REAL kvasird (a 2-stage
# CPU plan on the default model), over its Unix socket: 20 sorted
# alternatives, 21 refused naming the field, a +100 bias forcing its token
# (greedy, seeded, with penalties, n=2 streamed, within a grammar), -100 on
# the greedy token changing it while the logprobs stay raw, and malformed
# biases refused naming logit_bias (sampling_api_test.py does the checks).
#
# Usage: test_sampling_api.sh KVASIRD KVASIR [SOURCE_DIR]
# Exit 0 = passed, 77 = skipped (no model file), anything else = failed.
set -uo pipefail

KVASIRD=${1:?kvasird path}
KVASIR=${2:?kvasir path}
SRC=${3:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/integration/lib.sh"
kv_setup sampling-api

kv_config > "$WORK/kvasir.toml"
kv_start "$KVASIRD" "$KVASIR" "$WORK/kvasir.toml"
ok "kvasird ready"
python3 "$SRC/tests/integration/sampling_api_test.py" "$SOCK" && ok "sampling checks" ||
  bad "sampling checks"
kv_stop && ok "kvasird exits 0 on SIGTERM" || bad "kvasird exit status"
kv_finish "$WORK/kvasird.log"
