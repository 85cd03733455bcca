#!/usr/bin/env bash
# tests/packaging/test_deb.sh BUILD_DIR SOURCE_DIR — the Debian package, for real:
# build it (cpack), lintian (no errors), dpkg -i, start the installed kvasird
# as the kvasir user the way kvasird.service would, serve `kvasir generate`
# through /run/kvasir/kvasir.sock, refuse a user outside the kvasir group,
# stop it (no processes, no shared segments left), dpkg -r keeps the data,
# dpkg --purge removes data, user, group and config. The README's
# "Install (Debian package)" section is these steps.
# Restores the machine on exit: purges the package, removes the temp users.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: test_deb installs a package and adds users: run as root"
  exit 77
fi
BUILD=$(cd "${1:?BUILD_DIR}" && pwd)
SRC=$(cd "${2:?SOURCE_DIR}" && pwd)
MODEL=SmolLM2-135M-Instruct.Q4_1.gguf
SOCK=/run/kvasir/kvasir.sock
OUTSIDER=kvasir-test-outsider
MEMBER=kvasir-test-member
WORK=$(mktemp -d /tmp/kvasir-test-deb.XXXXXX)
PID=""

step() { echo "== $(date -u +%T) $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

pkg_state() { dpkg-query -W -f='${db:Status-Status}' kvasir 2>/dev/null || true; }
purge_pkg() {
  local s; s=$(pkg_state)
  if [ -n "$s" ] && [ "$s" != not-installed ]; then dpkg --purge kvasir >/dev/null; fi
}
stop_daemon() {  # SIGTERM to the kvasird we started; wait for it and its stages
  [ -n "$PID" ] || return 0
  kill -TERM "$PID" 2>/dev/null || true
  for _ in $(seq 1 450); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$PID" 2>/dev/null; then
    echo "kvasird $PID did not stop on SIGTERM in 45 s: SIGKILL" >&2
    kill -KILL "$PID" 2>/dev/null || true
  fi
  wait "$PID" 2>/dev/null || true
  PID=""
}
cleanup() {
  local rc=$?
  set +e
  stop_daemon
  # Stage processes of our daemon, if any survived it (reported as a failure above).
  for p in $(pgrep -u kvasir 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  for u in "$OUTSIDER" "$MEMBER"; do getent passwd "$u" >/dev/null && userdel "$u"; done
  purge_pkg
  rm -rf /run/kvasir
  if [ -n "${SEGMENT:-}" ]; then rm -f "/dev/shm/${SEGMENT#/}"; fi
  [ $rc -eq 0 ] || { echo "--- kvasird log"; cat "$WORK"/kvasird*.log 2>/dev/null | tail -40; }
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT

[ -f "$SRC/models/$MODEL" ] || fail "$SRC/models/$MODEL is missing: run scripts/fetch-model"
for t in cpack dpkg-shlibdeps lintian setpriv; do
  command -v "$t" >/dev/null || fail "$t is missing: run scripts/setup"
done

if [ -n "$(pkg_state)" ] && [ "$(pkg_state)" != not-installed ]; then
  step "kvasir is installed ($(pkg_state)): purging it first"
  purge_pkg
fi
for u in "$OUTSIDER" "$MEMBER"; do getent passwd "$u" >/dev/null && userdel "$u"; done

step "build the package (cpack in $BUILD)"
(cd "$BUILD" && cpack -G DEB -B "$WORK/cpack" >"$WORK/cpack.log" 2>&1) \
  || { cat "$WORK/cpack.log"; fail "cpack"; }
DEB=$(ls "$WORK"/cpack/kvasir_*.deb)
echo "$DEB"
dpkg-deb -f "$DEB" Package Version Architecture Depends
dpkg-deb -f "$DEB" Depends | grep -q 'libc6' || fail "Depends has no shared libraries (dpkg-shlibdeps)"
dpkg-deb -f "$DEB" Depends | grep -q 'adduser' || fail "Depends lacks adduser"
dpkg-deb --ctrl-tarfile "$DEB" | tar -xO ./conffiles | grep -qx /etc/kvasir/kvasir.toml \
  || fail "/etc/kvasir/kvasir.toml is not a conffile"
dpkg-deb -c "$DEB" | awk '{print $6}' >"$WORK/contents"
for f in ./usr/bin/kvasir ./usr/bin/kvasird ./etc/kvasir/kvasir.toml \
         ./lib/systemd/system/kvasird.service ./usr/share/kvasir/fetch-model \
         ./usr/share/doc/kvasir/copyright ./usr/share/doc/kvasir/changelog.gz; do
  grep -qx "$f" "$WORK/contents" || fail "$f is not in the package"
done

step "lintian"
lintian --allow-root --tag-display-limit 0 "$DEB" >"$WORK/lintian.log" 2>&1 || true
cat "$WORK/lintian.log"
if grep -q '^E: ' "$WORK/lintian.log"; then fail "lintian reports errors"; fi

step "dpkg -i"
dpkg -i "$DEB" || fail "dpkg -i (missing dependencies? run scripts/setup)"
getent passwd kvasir >/dev/null || fail "no kvasir user"
getent group kvasir >/dev/null || fail "no kvasir group"
[ "$(stat -c '%U:%G' /var/lib/kvasir)" = kvasir:kvasir ] || fail "/var/lib/kvasir not owned by kvasir"
if command -v systemd-analyze >/dev/null; then  # the unit parses (no systemd needed)
  bad=$(systemd-analyze verify --man=no /lib/systemd/system/kvasird.service 2>&1 | grep kvasird || true)
  [ -z "$bad" ] || { echo "$bad"; fail "systemd-analyze verify kvasird.service"; }
fi
for b in kvasir kvasird; do
  /usr/bin/$b --help >/dev/null || fail "$b --help"
  ! readelf -S /usr/bin/$b | grep -q '\.symtab' || fail "/usr/bin/$b is not stripped"
done

# The way kvasird.service starts it: RuntimeDirectory=kvasir (0750 kvasir:kvasir),
# User=kvasir Group=kvasir, UMask=0007, WorkingDirectory=/var/lib/kvasir.
start_daemon() {  # $1: log name
  mkdir -p /run/kvasir
  chown kvasir:kvasir /run/kvasir
  chmod 0750 /run/kvasir
  (cd /var/lib/kvasir && umask 0007 &&
   exec setpriv --reuid=kvasir --regid=kvasir --init-groups \
     /usr/bin/kvasird --config /etc/kvasir/kvasir.toml) >"$WORK/$1.log" 2>&1 &
  PID=$!
}

step "start without a model: one clear line saying how to get it"
start_daemon kvasird-nomodel
for _ in $(seq 1 300); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$PID" 2>/dev/null; then fail "kvasird without a model is still running after 30 s"; fi
wait "$PID" && fail "kvasird without a model exited 0" || true
PID=""
cat "$WORK/kvasird-nomodel.log"
grep -q '/usr/share/kvasir/fetch-model' "$WORK/kvasird-nomodel.log" \
  || fail "kvasird without a model does not say how to get one"

step "model into /var/lib/kvasir/models"
install -o kvasir -g kvasir -m 0640 "$SRC/models/$MODEL" /var/lib/kvasir/models/
# The shipped fetch-model finds it in place (sha256 matches): no download.
/usr/share/kvasir/fetch-model || fail "/usr/share/kvasir/fetch-model"
[ "$(stat -c '%U' "/var/lib/kvasir/models/$MODEL")" = kvasir ] || fail "model not owned by kvasir"

step "start the installed kvasird as kvasir"
start_daemon kvasird
/usr/bin/kvasir status --socket "$SOCK" --wait 120 || fail "kvasird did not become ready"
SEGMENT=$(sed -n 's/.*segment \([^ ]*\).*/\1/p' "$WORK/kvasird.log" | head -1)
[ "$(stat -c '%a %U %G' "$SOCK")" = "660 kvasir kvasir" ] \
  || fail "$SOCK is $(stat -c '%a %U %G' "$SOCK"), want 660 kvasir kvasir"
[ "$(stat -c '%a %U %G' /run/kvasir)" = "750 kvasir kvasir" ] || fail "/run/kvasir mode"

step "kvasir generate (root)"
OUT=$(/usr/bin/kvasir generate --socket "$SOCK" --max-tokens 8 --temperature 0 "The capital of France is")
echo "output: $OUT"
[ -n "$(echo "$OUT" | tr -d '[:space:]')" ] || fail "empty output"

step "a member of group kvasir may use the socket; an outsider may not"
useradd -M -N -s /usr/sbin/nologin -G kvasir "$MEMBER"
useradd -M -N -s /usr/sbin/nologin "$OUTSIDER"
OUT=$(runuser -u "$MEMBER" -- /usr/bin/kvasir generate --socket "$SOCK" --max-tokens 4 \
      --temperature 0 "Hello") || fail "$MEMBER (in group kvasir) was refused"
[ -n "$(echo "$OUT" | tr -d '[:space:]')" ] || fail "empty output for $MEMBER"
if runuser -u "$OUTSIDER" -- /usr/bin/kvasir status --socket "$SOCK" >"$WORK/outsider.log" 2>&1; then
  cat "$WORK/outsider.log"; fail "$OUTSIDER (not in group kvasir) was served"
fi
echo "outsider refused: $(head -1 "$WORK/outsider.log")"

step "SIGTERM: no stage processes, no shared segments left"
stop_daemon
sleep 0.5
if pgrep -u kvasir >/dev/null; then pgrep -a -u kvasir; fail "kvasir processes left"; fi
left=$(find /dev/shm -maxdepth 1 -name 'kvasir*' -user kvasir)
[ -z "$left" ] || fail "shared segments left: $left"
[ -z "$SEGMENT" ] || [ ! -e "/dev/shm/${SEGMENT#/}" ] || fail "segment $SEGMENT left"

step "kvasird-worker, as its unit starts it: listens with the key, stops on SIGTERM"
grep -q '^KVASIR_WORKER_LISTEN=' /etc/default/kvasird-worker || fail "no /etc/default/kvasird-worker"
if command -v systemd-analyze >/dev/null; then
  bad=$(systemd-analyze verify --man=no /lib/systemd/system/kvasird-worker.service 2>&1 \
        | grep kvasird || true)
  [ -z "$bad" ] || { echo "$bad"; fail "systemd-analyze verify kvasird-worker.service"; }
fi
KEY=/etc/kvasir/cluster.key
head -c 32 /dev/urandom >"$KEY"
chown kvasir:kvasir "$KEY"
chmod 0600 "$KEY"
(cd /var/lib/kvasir && umask 0007 &&
 exec setpriv --reuid=kvasir --regid=kvasir --init-groups \
   /usr/bin/kvasird --worker --listen 127.0.0.1:17710 --cluster-key "$KEY") >"$WORK/worker.log" 2>&1 &
WPID=$!
for _ in $(seq 1 100); do grep -q 'listening on' "$WORK/worker.log" && break; sleep 0.1; done
grep -q 'listening on 127.0.0.1:17710' "$WORK/worker.log" || { cat "$WORK/worker.log"; fail "the worker does not listen"; }
kill -TERM "$WPID"
wait "$WPID" || { cat "$WORK/worker.log"; fail "the worker did not exit 0 on SIGTERM"; }
rm -f "$KEY"

step "dpkg -r keeps /var/lib/kvasir"
dpkg -r kvasir
[ -f "/var/lib/kvasir/models/$MODEL" ] || fail "dpkg -r removed the model"
[ ! -e /usr/bin/kvasird ] || fail "dpkg -r left /usr/bin/kvasird"

step "dpkg --purge removes data, user, group, config"
dpkg --purge kvasir
for p in /var/lib/kvasir /etc/kvasir /run/kvasir /usr/share/kvasir /usr/share/doc/kvasir \
         /lib/systemd/system/kvasird.service /lib/systemd/system/kvasird-worker.service \
         /etc/default/kvasird-worker /usr/bin/kvasir; do
  [ ! -e "$p" ] || fail "$p left after purge"
done
! getent passwd kvasir >/dev/null || fail "user kvasir left after purge"
! getent group kvasir >/dev/null || fail "group kvasir left after purge"
echo "PASS"
