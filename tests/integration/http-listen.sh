#!/bin/bash
# SPDX-License-Identifier: MIT
# Where the HTTP front listens: [::1]:PORT works; a public address is refused unless
# AllowNonLoopback=yes (mollyd exits with a message saying so); a port already taken is a
# clear error; an unreachable Listen= never falls back to all interfaces.
. "$(dirname "$0")/lib/http.sh"

# ---- IPv6 loopback ----
if python3 -c 'import socket; s = socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null; then
	LISTEN="[::1]:0" ht_config
	ht_start
	[[ "$HT_URL" == "http://[::1]:"* ]] || ht_fail "listening on $HT_URL, not on [::1]"
	ht_req GET /v1/models
	ht_expect_status 200 "GET /v1/models over [::1]"
	curl -s -o /dev/null --max-time 10 "http://127.0.0.1:$HT_PORT/health" &&
		ht_fail "listening on [::1] also answers on 127.0.0.1"
	ht_stop
	[ "$HT_EXIT" = 0 ] || ht_fail "mollyd exited with $HT_EXIT"
	ht_ok "[::1]:PORT"
else
	echo "note: no IPv6 loopback here; [::1] not tested" >&2
fi

# ---- public addresses need AllowNonLoopback=yes ----
# (refused before it binds: the generous timeout only turns a daemon that wrongly started
# into a failure)
LISTEN="0.0.0.0:0" ht_config
if timeout "$MOLLY_TEST_WAIT_S" "$HT_MOLLYD" --config "$HT_TMP/mollyd.conf" >"$HT_TMP/mollyd.log" 2>&1; then
	ht_fail "mollyd started on 0.0.0.0 without AllowNonLoopback=yes"
fi
grep -q AllowNonLoopback "$HT_TMP/mollyd.log" || ht_fail "the refusal does not name AllowNonLoopback="
ht_ok "0.0.0.0 refused without AllowNonLoopback=yes"

# ---- a port already taken ----
# the holder binds a port the kernel picks and keeps it until killed
python3 -c 'import signal, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
signal.pause()' >"$HT_TMP/holder.port" &
holder=$!
holding() { [ -s "$HT_TMP/holder.port" ]; }
wait_until "$MOLLY_TEST_WAIT_S" holding || ht_fail "the port holder did not start"
LISTEN="127.0.0.1:$(cat "$HT_TMP/holder.port")" ht_config
if timeout "$MOLLY_TEST_WAIT_S" "$HT_MOLLYD" --config "$HT_TMP/mollyd.conf" >"$HT_TMP/mollyd.log" 2>&1; then
	kill "$holder"
	ht_fail "mollyd started on a port that was taken"
fi
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
grep -qi "address already in use" "$HT_TMP/mollyd.log" || ht_fail "the bind error is not explained"
ht_ok "a taken port is a clear error"
