#!/usr/bin/env bash
# The figures of docs/netns-hosts.md ("Accuracy"): what the test bed adds
# on this machine. Run on a quiet machine (root; build kvasir-linkshaper):
#   [SPIN=US] tests/tools/measure_netns.sh [SHAPER]     (SPIN: the shaper's --spin-us)
# Prints, per setting: ping RTT (100 pings 1 -> 2, 10 ms apart: min, median,
# p90), the shaper's own lateness (mean, max: its timer and wake-up error),
# and TCP payload throughput (24 MB, or 6 MB under a cap) against the cap;
# then a bare veth pair, no shaper, offloads off the same way, to show what
# forwarding through AF_PACKET costs.
set -euo pipefail
export KVASIR_LINKSHAPER=${1:-$(cd "$(dirname "$0")/../.." && pwd)/build/bin/kvasir-linkshaper}
HERE=$(cd "$(dirname "$0")" && pwd)
H=$HERE/../../scripts/netns-hosts
TCP=$HERE/netns_tcp.py
export KVASIR_NETNS_PREFIX=kvm
tmp=$(mktemp -d)
trap '"$H" down >/dev/null 2>&1; ip netns del kvm-a 2>/dev/null; ip netns del kvm-b 2>/dev/null; rm -rf "$tmp"' EXIT

rtt() {  # rtt RUN...: ping statistics of 100 pings to 10.77.0.2 through RUN
  "$@" ping -c 1 -W 2 10.77.0.2 >/dev/null
  "$@" ping -c 100 -i 0.01 10.77.0.2 | python3 -c '
import re, statistics as s, sys
t = sorted(float(x) for x in re.findall(r"time=([0-9.]+) ms", sys.stdin.read()))
print(f"rtt ms min {t[0]:.3f} median {s.median(t):.3f} p90 {t[int(len(t) * .9)]:.3f}", end="")'
}
tput() {  # tput BYTES RUN_SERVER RUN_CLIENT: payload Mbit/s
  $2 python3 "$TCP" serve 5900 >"$tmp/srv.json" 2>/dev/null &
  $3 python3 "$TCP" send 10.77.0.2 5900 "$1" 1 >/dev/null
  wait
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" tcp %.1f Mbit/s" % (d["bytes"]*8/d["seconds"]/1e6), end="")' "$tmp/srv.json"
}
late() {
  "$H" stats | python3 -c '
import json, sys
e = [p["egress"] for p in json.load(sys.stdin)["ports"]]
n = sum(x["frames_out"] for x in e)
mean = sum(x["late_us_mean"] * x["frames_out"] for x in e) / n
print(" late us mean %.1f max %.0f" % (mean, max(x["late_us_max"] for x in e)), end="")'
}

lscpu | grep "Model name" | sed 's/  */ /g'
uptime
for d in 0 0.2 2; do
  "$H" up 2 --delay "$d" ${SPIN:+--spin-us "$SPIN"} >/dev/null
  echo "delay $d ms: $(rtt "$H" exec 1)$(late)$(tput 24000000 "$H exec 2" "$H exec 1")"
done
for r in 10 100 1000; do
  "$H" up 2 --rate "$r" >/dev/null
  bytes=$((r >= 100 ? 24000000 : 6000000))
  echo "rate $r Mbit/s: $(tput "$bytes" "$H exec 2" "$H exec 1")"
done
"$H" up 2 --delay 2 --jitter 0.5 ${SPIN:+--spin-us "$SPIN"} >/dev/null
echo "delay 2 ms jitter 0.5 ms: $(rtt "$H" exec 1)$(late)"
"$H" down

# The same pair of hosts on one bare veth pair: the floor the shaper adds to.
ip netns add kvm-a && ip netns add kvm-b
ip -n kvm-a link add eth0 type veth peer name eth0 netns kvm-b
for n in a b; do
  i=$([ $n = a ] && echo 1 || echo 2)
  ip -n kvm-$n link set lo up
  ip -n kvm-$n addr add 10.77.0.$i/24 dev eth0
  ip netns exec kvm-$n ethtool -K eth0 tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
  ip -n kvm-$n link set eth0 up
done
echo "bare veth: $(rtt ip netns exec kvm-a)$(tput 24000000 "ip netns exec kvm-b" "ip netns exec kvm-a")"
