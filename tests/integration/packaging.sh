#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `cmake --install` of the daemon component into a DESTDIR puts every packaging file in place,
# and the installed unit passes `systemd-analyze verify`; sysusers.d and tmpfiles.d entries
# apply; the D-Bus policy loads; the polkit action is well-formed.
set -euo pipefail
: "${MOLLY_SOURCE_DIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${MOLLY_BUILD_DIR:=$MOLLY_SOURCE_DIR/build/dev}"
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }

command -v cmake >/dev/null || skip "cmake is not installed"
[ -x "$MOLLY_BUILD_DIR/bin/mollyd" ] || skip "mollyd is not built in $MOLLY_BUILD_DIR"
if ! command -v systemd-analyze >/dev/null; then
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null 2>&1 ||
			skip "systemd-analyze is missing and apt-get install systemd failed"
	else
		skip "systemd-analyze is missing (apt-get install systemd)"
	fi
fi

D=$(mktemp -d /tmp/molly-destdir.XXXXXX)
trap 'rm -rf "$D"' EXIT

DESTDIR=$D cmake --install "$MOLLY_BUILD_DIR" --prefix /usr --component daemon >"$D.log" 2>&1 ||
	{ cat "$D.log"; rm -f "$D.log"; fail "cmake --install failed"; }
rm -f "$D.log"
for f in usr/sbin/mollyd usr/bin/molly usr/libexec/molly/molly-egress \
	usr/lib/systemd/system/mollyd.service \
	usr/share/dbus-1/system.d/org.molly.Daemon1.conf \
	usr/share/dbus-1/system-services/org.molly.Daemon1.service \
	usr/share/polkit-1/actions/org.molly.policy usr/lib/sysusers.d/molly.conf \
	usr/lib/tmpfiles.d/molly.conf usr/share/doc/molly/mollyd.conf.example; do
	[ -e "$D/$f" ] || fail "cmake --install did not install /$f"
done
[ -d "$D/etc/molly/mollyd.conf.d" ] || fail "no /etc/molly/mollyd.conf.d"
unit=$D/usr/lib/systemd/system/mollyd.service
grep -q '^ExecStart=/usr/sbin/mollyd$' "$unit" || fail "ExecStart does not name the installed binary: $(grep ExecStart "$unit")"
grep -q '^Type=notify$' "$unit" || fail "not Type=notify"
grep -q '^WatchdogSec=' "$unit" || fail "no WatchdogSec="
pass "cmake --install puts every file in place"

# systemd-analyze verify --root needs the units the unit depends on and the commands it runs:
# borrow them from the host (copies: links would point outside the root).
units=/usr/lib/systemd/system
[ -d "$units" ] || units=/lib/systemd/system
cp -an "$units/." "$D/usr/lib/systemd/system/" 2>/dev/null || true
mkdir -p "$D/bin"
cp /bin/kill "$D/bin/kill"
# (--man=no: the unit's Documentation= names man pages, which are in $D, not where man looks;
# tests/packages/packages.sh verifies the installed unit with them)
out=$(cd / && systemd-analyze verify --man=no --root="$D" mollyd.service 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify warned: $out"
pass "systemd-analyze verify mollyd.service"

# The devices mollyd opens are in the unit's device cgroup: /dev/molly-control (kmod-shim) and
# /dev/cuse (the CUSE fallback) are misc character devices (major 10), which
# DeviceAllow=char-misc admits under DevicePolicy=closed.
grep -qx 'DevicePolicy=closed' "$unit" || fail "the unit's DevicePolicy= is not closed"
grep -qx 'DeviceAllow=char-misc rw' "$unit" || fail "the unit does not allow char-misc"
grep -qE '^ *10 misc$' /proc/devices || fail "major 10 is not 'misc' in /proc/devices"
for d in /dev/cuse /dev/molly-control; do
	[ -c "$d" ] || continue
	[ "$(stat -c %t "$d")" = a ] || fail "$d is not a misc device (major $((16#$(stat -c %t "$d"))))"
done
pass "the unit's device cgroup admits /dev/molly-control and /dev/cuse (char-misc)"

# The egress drop-in (`molly config apply`): IPAddressDeny=any plus the targets' addresses;
# the unit with it still verifies.
cat >"$D/apply.conf" <<'CONF'
[Target lan]
Tier=T1
URL=http://127.0.0.1:8080
[Target api]
Tier=T3
URL=http://[::1]:9443/v1
CONF
"$MOLLY_BUILD_DIR/bin/molly" config apply --config "$D/apply.conf" \
	--out "$D/etc/systemd/system/mollyd.service.d" >/dev/null || fail "molly config apply"
dropin=$D/etc/systemd/system/mollyd.service.d/50-egress.conf
grep -qx 'IPAddressDeny=any' "$dropin" || fail "drop-in without IPAddressDeny=any: $(cat "$dropin")"
grep -qx 'IPAddressAllow=localhost' "$dropin" || fail "drop-in without localhost"
grep -qx 'IPAddressAllow=127.0.0.1' "$dropin" || fail "drop-in without T1's address"
grep -qx 'IPAddressAllow=::1' "$dropin" || fail "drop-in without T3's address"
out=$(cd / && systemd-analyze verify --man=no --root="$D" mollyd.service 2>&1) || fail "verify with the drop-in: $out"
[ -z "$out" ] || fail "systemd-analyze verify warned with the drop-in: $out"
"$MOLLY_BUILD_DIR/bin/molly" config apply --config "$D/nonexistent.conf" --out "$D/x" 2>/dev/null &&
	fail "config apply accepted a missing file"
pass "molly config apply writes a drop-in that verifies"

if command -v systemd-sysusers >/dev/null; then
	systemd-sysusers --root="$D" >/dev/null 2>&1 || fail "systemd-sysusers"
	grep -q '^molly:' "$D/etc/passwd" || fail "sysusers.d did not create user molly"
	grep -q '^molly:' "$D/etc/group" || fail "sysusers.d did not create group molly"
	if command -v systemd-tmpfiles >/dev/null; then
		systemd-tmpfiles --root="$D" --create "$D/usr/lib/tmpfiles.d/molly.conf" >/dev/null 2>&1 ||
			fail "systemd-tmpfiles"
		uid=$(sed -n 's/^molly:x:\([0-9]*\):.*/\1/p' "$D/etc/passwd")
		for d in var/lib/molly var/lib/molly/adapters run/molly; do
			[ "$(stat -c %u "$D/$d")" = "$uid" ] || fail "/$d is not owned by molly"
		done
	fi
	pass "sysusers.d and tmpfiles.d entries apply"
fi

if command -v dbus-daemon >/dev/null; then
	mkdir -p "$D/bus"
	cat > "$D/bus/system.conf" <<CONF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$D/bus/sock</listen>
  <auth>EXTERNAL</auth>
  <policy context="default"><allow user="*"/></policy>
  <includedir>$D/usr/share/dbus-1/system.d</includedir>
</busconfig>
CONF
	out=$(dbus-daemon --config-file="$D/bus/system.conf" --fork --nopidfile --print-pid=1 \
		2>"$D/bus.err") || fail "dbus-daemon refuses the policy: $out $(cat "$D/bus.err")"
	# (stop it: a forked bus outlives the test otherwise; its config path is this test's own)
	kill "${out//[!0-9]/}" 2>/dev/null || pkill -f -- "--config-file=$D/bus/system.conf" || true
	pass "the D-Bus policy loads"
fi

if command -v xmllint >/dev/null; then
	xmllint --noout "$D/usr/share/polkit-1/actions/org.molly.policy" || fail "polkit action XML"
	pass "the polkit action is well-formed"
fi
