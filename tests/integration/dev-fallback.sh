#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# /dev/molly on a machine without kmod-shim and without CUSE (these hosts: the guest stage,
# tests/guest/run.sh, tests the device itself): the daemon runs with the device off and says
# why in Status; libmolly falls back to D-Bus (molly ask --transport auto) and gives the same
# greedy tokens as D-Bus and HTTP on a unix socket; --transport dev fails with a clear error;
# the control node's path appearing later is noticed (inotify), a bogus one is refused.
source "$(dirname "$0")/lib/common.sh"

bus_start
HTTP_LISTEN="unix:$T/http.sock" write_config
# A control node of our own choosing: absent at start
export MOLLY_DEV_CONTROL=$T/dev/molly-control
mkdir -p "$T/dev"
mollyd_start

st=$(call Daemon1 Status)
echo "$st" | grep >/dev/null '"device" s "off: .*molly-control is absent' || fail "Status device: $st"
pass "the device is off and Status says why"

q=(--bus-address="$BUS_ADDR" ask "Once upon a time" --max-tokens 12 --temperature 0)
bus_out=$("$MOLLY" "${q[@]}") || fail "ask over D-Bus"
auto_out=$(MOLLY_DEVICE=$T/dev/molly "$MOLLY" "${q[@]}" --transport auto) || fail "ask --transport auto"
json=$(MOLLY_DEVICE=$T/dev/molly "$MOLLY" --json "${q[@]}" --transport auto)
echo "$json" | grep >/dev/null '"transport":"dbus"' || fail "libmolly did not fall back to D-Bus: $json"
http_out=$("$MOLLY" ask --transport http --unix-socket "$T/http.sock" "Once upon a time" \
	--max-tokens 12 --temperature 0) || fail "ask --transport http"
[ -n "$bus_out" ] && [ "$auto_out" = "$bus_out" ] && [ "$http_out" = "$bus_out" ] ||
	fail "different tokens: dbus '$bus_out' auto '$auto_out' http '$http_out'"
pass "libmolly falls back to D-Bus; dbus, auto and http give the same tokens"

expect_fail "cannot open the /dev/molly transport" env MOLLY_DEVICE="$T/dev/molly" \
	"$MOLLY" "${q[@]}" --transport dev
expect_fail "--transport is dev, dbus, http or auto" "$MOLLY" "${q[@]}" --transport carrier-pigeon
pass "--transport dev without a device, and a bad transport, fail clearly"

# The node appears later (a regular file here: not a molly device): the daemon notices it
# through inotify, tries it, and keeps the device off.
touch "$T/dev/molly-control"
wait_until "$MOLLY_TEST_WAIT_S" grep -q "dev: .*molly-control appeared but does not open" "$T/mollyd.log" ||
	fail "the daemon did not notice the control node"
st=$(call Daemon1 Status)
echo "$st" | grep >/dev/null '"device" s "off: .*is not a molly control node' ||
	fail "Status device after the bogus node: $st"
"$MOLLY" "${q[@]}" >/dev/null || fail "D-Bus stopped working"
pass "a control node appearing later is noticed; a bogus one is refused"

mollyd_stop
pass "clean shutdown"
