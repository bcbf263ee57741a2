#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# SIGHUP and Daemon1.Reload: adapters named in Load= come and go, a stream in flight is not
# dropped, a broken file is refused (old configuration kept, error naming file:line), keys that
# need a restart are reported.
source "$(dirname "$0")/lib/common.sh"
[ -n "$PYDBUS" ] || skip "python3-dbus is needed for the Stream client (tools/install-deps.sh)"

bus_start
write_config
mkdir -p "$T/state/adapters"
cp "$LORA" "$T/state/adapters/tale.gguf"
# The stream must still be in flight when the reload comes, on any machine: the scheduler is
# held after 8 tokens (test-only switch) until SIGUSR1 lifts the hold after the reload.
MOLLY_TEST=1 MOLLY_TEST_HOLD_AFTER_TOKENS=8 mollyd_start

loaded() { call Adapters1 List | grep >/dev/null "\"tale\" \"[0-9a-f]\{64\}\" [0-9]* \"loaded\" b true"; }
loaded && fail "tale is loaded before it is listed in Load="
expect_out '"tale" "[0-9a-f]{64}" [0-9]+ "loaded" b false' call Adapters1 List
pass "an adapter in Directory= is imported into the registry and listed, not loaded"

# A stream in flight across the reload.
"$PYDBUS" - "$BUS_ADDR" "$T/stream.submitted" > "$T/stream.out" 2>&1 <<'PY' &
import json, os, sys
import dbus
bus = dbus.bus.BusConnection(sys.argv[1])
inf = dbus.Interface(bus.get_object("org.molly.Daemon1", "/org/molly/Daemon1"),
                     "org.molly.Inference1")
fd, h = inf.Stream({"prompt": "Once upon a time", "max_tokens": dbus.UInt32(120),
                    "ignore_eos": True})
open(sys.argv[2], "w").close()  # submitted: in flight from here on
lines = [json.loads(l) for l in os.fdopen(fd.take(), "r")]
assert lines[-1]["type"] == "done", lines[-1]
assert lines[-1]["usage"]["completion_tokens"] == 120, lines[-1]
print("stream survived the reload")
PY
client=$!
submitted() { [ -e "$T/stream.submitted" ]; }
wait_until "$MOLLY_TEST_WAIT_S" submitted || { cat "$T/stream.out"; fail "the stream did not start"; }

printf '[Adapters]\nLoad=tale\n' >> "$T/mollyd.conf"
kill -HUP "$MOLLYD_PID"
wait_until "$MOLLY_TEST_WAIT_S" loaded || fail "SIGHUP did not load tale"
kill -USR1 "$MOLLYD_PID" # lift the hold: the stream finishes now
expect_out '"model" s "tale"' call Inference1 Generate 'a{sv}' 3 prompt s Once adapter s tale max_tokens u 2
wait $client || { cat "$T/stream.out"; fail "the stream did not survive the reload"; }
pass "SIGHUP loads Load= adapters without dropping a stream"

# A broken file: the old configuration stays, Reload says where the error is.
cp "$T/mollyd.conf" "$T/good.conf"
printf '[Engine]\nMaxSequencez=3\n' >> "$T/mollyd.conf"
expect_fail "ReloadFailed.*mollyd.conf:[0-9]+: unknown key 'MaxSequencez' in \\[Engine\\]" gdbus call --address "$BUS_ADDR" --dest org.molly.Daemon1 --object-path /org/molly/Daemon1 --method org.molly.Daemon1.Reload
kill -HUP "$MOLLYD_PID"
refused() { grep -q "keeping the running configuration" "$T/mollyd.log"; }
wait_until "$MOLLY_TEST_WAIT_S" refused || fail "no log of the refused reload"
kill -0 "$MOLLYD_PID" || fail "mollyd died on a bad reload"
expect_out '"model" s "tale"' call Inference1 Generate 'a{sv}' 3 prompt s Once adapter s tale max_tokens u 2
pass "a broken file is refused, the running configuration stays"

# Dropping tale from Load= unloads it; an [Engine] change is reported as needing a restart.
cp "$T/good.conf" "$T/mollyd.conf"
sed -i 's/^Load=tale$/Load=/; s/^MaxSequences=.*/MaxSequences=3/' "$T/mollyd.conf"
call Daemon1 Reload >/dev/null || fail "Reload"
loaded && fail "tale is still loaded after it left Load="
expect_fail "ModelNotFound|does not exist" call Inference1 Generate 'a{sv}' 2 prompt s Once adapter s tale
grep -q "need a restart.*\\[Engine\\]" "$T/mollyd.log" || fail "no warning about [Engine] needing a restart"
pass "Reload unloads adapters no longer listed and reports restart-only changes"

mollyd_stop
