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
s.settimeout(60)
end = time.time() + 60
while time.time() < end:
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
for _ in $(seq 50); do [ -S "$T/notify.sock" ] && break; sleep 0.1; done

NOTIFY_SOCKET=$T/notify.sock WATCHDOG_USEC=400000 mollyd_start
for _ in $(seq 100); do grep -q "READY=1" "$T/notify.log" && break; sleep 0.1; done
grep -q "STATUS=Loading" "$T/notify.log" || fail "no STATUS while loading: $(cat "$T/notify.log")"
grep -q "READY=1" "$T/notify.log" || fail "no READY=1"
grep -q "STATUS=Serving stories260K" "$T/notify.log" || fail "no serving STATUS"
sleep 1.2
pings=$(grep -c "WATCHDOG=1" "$T/notify.log" || true)
[ "$pings" -ge 3 ] || fail "only $pings watchdog pings in about 1.2 s (WATCHDOG_USEC=400000)"
pass "STATUS, READY=1 and $pings WATCHDOG=1 pings"

kill -HUP "$MOLLYD_PID"
for _ in $(seq 50); do grep -q "RELOADING=1" "$T/notify.log" && break; sleep 0.1; done
grep -q "RELOADING=1" "$T/notify.log" || fail "no RELOADING=1 on SIGHUP"
grep -q "MONOTONIC_USEC=" "$T/notify.log" || fail "no MONOTONIC_USEC with RELOADING=1"
[ "$(grep -c "READY=1" "$T/notify.log")" -ge 2 ] || fail "no READY=1 after the reload"
pass "RELOADING=1 and READY=1 around a reload"

mollyd_stop
wait $listener || true
grep -q "STOPPING=1" "$T/notify.log" || fail "no STOPPING=1 on SIGTERM"
pass "STOPPING=1 on SIGTERM"

grep -Eq "^mollyd: info: serving stories260K" "$T/mollyd.log" || fail "no leveled log line on stderr"
grep -Eq "^mollyd: debug: configuration file:" "$T/mollyd.log" || fail "LogLevel=debug not honoured"
pass "leveled logs on stderr"
