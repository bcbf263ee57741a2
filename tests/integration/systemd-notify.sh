#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# mollyd speaks systemd's notify protocol: STATUS while loading, READY=1, WATCHDOG=1 pings at
# half of WATCHDOG_USEC, RELOADING=1 then READY=1 on SIGHUP, STOPPING=1 on SIGTERM; and logs
# with levels on stderr when there is no journal.
source "$(dirname "$0")/lib/common.sh"
need python3

bus_start
write_config

python3 - "$T/notify.sock" > "$T/notify.log" 2>&1 <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(600)  # ends at STOPPING=1; the bound only turns a lost message into an end
while True:
    try:
        msg = s.recv(4096).decode()
    except socket.timeout:
        break
    for line in msg.split("\n"):
        print(f"{time.monotonic():.3f} {line}", flush=True)
    if "STOPPING=1" in msg:
        break
PY
listener=$!
sock_ready() { [ -S "$T/notify.sock" ]; }
wait_until "$MOLLY_TEST_WAIT_S" sock_ready || fail "the notify listener did not start"

NOTIFY_SOCKET=$T/notify.sock WATCHDOG_USEC=400000 mollyd_start
notified() { grep -q "$1" "$T/notify.log"; }
wait_until "$MOLLY_TEST_WAIT_S" notified "READY=1" || fail "no READY=1"
grep -q "STATUS=Loading" "$T/notify.log" || fail "no STATUS while loading: $(cat "$T/notify.log")"
grep -q "STATUS=Serving stories260K" "$T/notify.log" || fail "no serving STATUS"
# pings keep coming (how many a second depends on the machine's load: not asserted)
pings_at_least() { [ "$(grep -c "WATCHDOG=1" "$T/notify.log")" -ge "$1" ]; }
wait_until "$MOLLY_TEST_WAIT_S" pings_at_least 3 || fail "fewer than 3 watchdog pings (WATCHDOG_USEC=400000)"
pass "STATUS, READY=1 and repeated WATCHDOG=1 pings"

kill -HUP "$MOLLYD_PID"
wait_until "$MOLLY_TEST_WAIT_S" notified "RELOADING=1" || fail "no RELOADING=1 on SIGHUP"
grep -q "MONOTONIC_USEC=" "$T/notify.log" || fail "no MONOTONIC_USEC with RELOADING=1"
readies_at_least() { [ "$(grep -c "READY=1" "$T/notify.log")" -ge "$1" ]; }
wait_until "$MOLLY_TEST_WAIT_S" readies_at_least 2 || fail "no READY=1 after the reload"
pass "RELOADING=1 and READY=1 around a reload"

mollyd_stop
wait $listener || true
grep -q "STOPPING=1" "$T/notify.log" || fail "no STOPPING=1 on SIGTERM"
pass "STOPPING=1 on SIGTERM"

grep -Eq "^mollyd: info: serving stories260K" "$T/mollyd.log" || fail "no leveled log line on stderr"
grep -Eq "^mollyd: debug: configuration file:" "$T/mollyd.log" || fail "LogLevel=debug not honoured"
pass "leveled logs on stderr"
