#!/usr/bin/env bash
# The relay across two network-namespace "hosts" (docs/netns-hosts.md):
# test_relay_e2e's netns case with the leader's relay in host 1 and the
# worker's in host 2, the shaper adding DELAY ms each way between them.
#   test_relay_netns.sh TEST_BINARY SHAPER DELAY_MS
# Skips (77) where scripts/netns-hosts does (no root, no namespaces), saying why.
set -euo pipefail
BIN=$1
export KVASIR_LINKSHAPER=$2
DELAY=$3
HERE=$(cd "$(dirname "$0")" && pwd)
H=$HERE/../../scripts/netns-hosts
export KVASIR_NETNS_PREFIX=kvt-relay
trap '"$H" down >/dev/null 2>&1 || true' EXIT
rc=0
"$H" up 2 --delay "$DELAY" || rc=$?
[ "$rc" = 0 ] || exit "$rc"
# The namespaces share one kernel, so UCX takes the two hosts for one and
# would add lanes over each one's own loopback, which reaches nothing: only
# eth0 (real hosts have distinct machine ids and are not fooled).
export UCX_NET_DEVICES=eth0
# The first frames to a new neighbour wait on ARP: warm it before timing anything.
"$H" exec 1 ping -c 1 -W 2 10.77.0.2 >/dev/null
KVASIR_RELAY_NETNS=$KVASIR_NETNS_PREFIX "$BIN" --gtest_filter='RelayE2E.TwoNetnsHostsMatchOneHost'
