#!/usr/bin/env bash
# kvasird as the leader across two network-namespace "hosts"
# (docs/netns-hosts.md): test_leader_e2e.sh with the leader in host 1 and
# its worker in host 2, the shaper adding DELAY ms each way between them.
#   test_leader_netns.sh KVASIRD KVASIR SHAPER DELAY_MS [SOURCE_DIR]
# Skips (77) where scripts/netns-hosts does (no root, no namespaces), saying why.
set -euo pipefail
KVASIRD=$1
KVASIR=$2
export KVASIR_LINKSHAPER=$3
DELAY=$4
SRC=$(cd "${5:-$(dirname "$0")/../..}" && pwd)
H=$SRC/scripts/netns-hosts
export KVASIR_NETNS_PREFIX=kvt-leader
trap '"$H" down >/dev/null 2>&1 || true' EXIT
rc=0
"$H" up 2 --delay "$DELAY" || rc=$?
[ "$rc" = 0 ] || exit "$rc"
# The namespaces share one kernel: UCX would add lanes over each host's own
# loopback, which reach nothing (docs/multi-host.md); only eth0.
export UCX_NET_DEVICES=eth0
"$H" exec 1 ping -c 1 -W 2 10.77.0.2 >/dev/null  # ARP before anything is timed
export KV_LEADER_ADDR=10.77.0.2
export KV_LEADER_IN="$H exec 1" KV_WORKER_IN="$H exec 2" KV_UNPLUG="$H link 2"
"$SRC/tests/integration/test_leader_e2e.sh" "$KVASIRD" "$KVASIR" "$SRC"
