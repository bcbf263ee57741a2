#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Streams that misbehave and a daemon that stops: a client that never reads does not stall
# anyone and is cut off at [DBus] StreamBufferBytes=; closing the fd cancels; SIGTERM during
# streaming gives every client a final error event and mollyd exits 0.
source "$(dirname "$0")/lib/common.sh"
[ -n "$PYDBUS" ] || skip "python3-dbus is needed for Stream clients (tools/install-deps.sh)"

bus_start
# StopTimeoutSec=0: SIGTERM cancels what runs at once, so the SIGTERM check below does not
# depend on how fast this build generates (a release build finishes 6 × 480 tokens in the
# drain time a sanitizer build needs for a fraction of them).
write_config "StopTimeoutSec=0" "[DBus]" "StreamBufferBytes=4K"
# test mode: SIGUSR2 holds the scheduler after one more token and SIGUSR1 lifts the hold, so a
# stream is certainly still running when it is cancelled or when SIGTERM comes
MOLLY_TEST=1 mollyd_start

# hold.py: hold(pid, log) and lift(pid, log) send the signal and wait until mollyd logs that it
# acted on it
cat >"$T/hold.py" <<'PY'
import os, signal, time

def _signal(pid, log, sig, line):
    before = open(log).read().count(line)
    os.kill(pid, sig)
    deadline = time.time() + float(os.environ.get("MOLLY_TEST_WAIT_S", "120"))
    while open(log).read().count(line) <= before:
        if time.time() > deadline:
            raise SystemExit("mollyd did not act on " + line)
        time.sleep(0.02)

def hold(pid, log):
    _signal(pid, log, signal.SIGUSR2, "SIGUSR2: the scheduler holds")

def lift(pid, log):
    _signal(pid, log, signal.SIGUSR1, "SIGUSR1: the scheduler's hold is lifted")
PY

PYTHONPATH=$T "$PYDBUS" - "$BUS_ADDR" "$MOLLYD_PID" "$T/mollyd.log" <<'PY' || fail "stream checks"
import json, os, sys, time
import dbus
from hold import hold, lift

bus = dbus.bus.BusConnection(sys.argv[1])
obj = bus.get_object("org.molly.Daemon1", "/org/molly/Daemon1")
inf = dbus.Interface(obj, "org.molly.Inference1")
props = dbus.Interface(obj, "org.freedesktop.DBus.Properties")

def running():
    return int(props.Get("org.molly.Daemon1", "RunningSequences"))

# a generous bound (MOLLY_TEST_WAIT_S): it turns a hang into a message, never a speed limit
def wait_idle(what, timeout=float(os.environ.get("MOLLY_TEST_WAIT_S", "120"))):
    t = time.time()
    while running() > 0:
        if time.time() - t > timeout:
            raise SystemExit(f"{what}: still running after {timeout} s")
        time.sleep(0.05)

# 1. A client that never reads: the others are served meanwhile, and the lazy one is cut off
#    once 4 KiB wait beyond its pipe.
lazy_fd, lazy = inf.Stream({"prompt": "Once upon a time", "max_tokens": dbus.UInt32(480),
                            "ignore_eos": True, "logprobs": True})
t = time.time()
text, info = inf.Generate({"prompt": "Once upon a time", "max_tokens": dbus.UInt32(8),
                           "temperature": 0.0}, timeout=600)
assert info["completion_tokens"] == 8, info
print(f"a Generate beside a non-reading stream took {time.time() - t:.2f} s")
wait_idle("the non-reading stream")
f = os.fdopen(lazy_fd.take(), "r")
lines = [json.loads(l) for l in f]
assert lines[-1]["type"] == "error", lines[-1]
assert lines[-1]["code"] == "client_too_slow", lines[-1]
n_tokens = sum(1 for l in lines if l["type"] == "token")
assert 0 < n_tokens < 480, n_tokens
print(f"non-reading stream cut off after {n_tokens} token lines")

# 2. Closing the fd cancels the request.
fd, h = inf.Stream({"prompt": "Once upon a time", "max_tokens": dbus.UInt32(480),
                    "ignore_eos": True})
f = os.fdopen(fd.take(), "r")
f.readline()
t = time.time()
f.close()
wait_idle("the closed stream")
print(f"closing the fd cancelled within {time.time() - t:.2f} s")

# 3. Cancel from another connection is refused unless root (we are root here: allowed). The
#    stream is held after its first token, so it is certainly running when the Cancel comes.
hold(int(sys.argv[2]), sys.argv[3])
fd, h = inf.Stream({"prompt": "Once upon a time", "max_tokens": dbus.UInt32(480),
                    "ignore_eos": True})
bus2 = dbus.bus.BusConnection(sys.argv[1])
inf2 = dbus.Interface(bus2.get_object("org.molly.Daemon1", "/org/molly/Daemon1"),
                      "org.molly.Inference1")
inf2.Cancel(h)
f = os.fdopen(fd.take(), "r")
last = json.loads(f.readlines()[-1])
assert last["type"] == "done" and last["finish_reason"] == "cancelled", last
lift(int(sys.argv[2]), sys.argv[3])
print("ok")
PY
pass "a non-reading client is cut off without stalling others; closing the fd cancels"

# --- SIGTERM while streaming: every client gets a final event, errors for the cut ones ---
PYTHONPATH=$T "$PYDBUS" - "$BUS_ADDR" "$MOLLYD_PID" "$T/mollyd.log" > "$T/sigterm.out" 2>&1 <<'PY' &
import json, os, signal, sys, time
import dbus
from hold import hold

bus = dbus.bus.BusConnection(sys.argv[1])
inf = dbus.Interface(bus.get_object("org.molly.Daemon1", "/org/molly/Daemon1"),
                     "org.molly.Inference1")
hold(int(sys.argv[2]), sys.argv[3])  # nothing can finish before the SIGTERM
files = []
for i in range(6):
    fd, h = inf.Stream({"prompt": "Once upon a time", "max_tokens": dbus.UInt32(480),
                        "ignore_eos": True})
    files.append(os.fdopen(fd.take(), "r"))
files[0].readline()  # generation is under way
os.kill(int(sys.argv[2]), signal.SIGTERM)
errors = 0
for f in files:
    lines = [json.loads(l) for l in f]
    assert lines, "a stream ended without any line"
    assert lines[-1]["type"] in ("done", "error"), lines[-1]
    if lines[-1]["type"] == "error":
        # StreamBufferBytes=4K: a stream this client has not read yet may have been cut for
        # not reading (client_too_slow) before the SIGTERM; that is a final event too.
        assert "stopping" in lines[-1]["message"] or lines[-1].get("code") == "client_too_slow", lines[-1]
        errors += "stopping" in lines[-1]["message"]
assert errors > 0, "no stream was cut short by SIGTERM"
print(f"sigterm ok: {errors} of {len(files)} streams got a final error event")
PY
client=$!
rc=0
wait "$MOLLYD_PID" || rc=$?
MOLLYD_PID=
[ $rc -eq 0 ] || fail "mollyd exited with $rc after SIGTERM"
wait $client || { cat "$T/sigterm.out"; fail "SIGTERM stream client"; }
cat "$T/sigterm.out"
grep -q "stopped" "$T/mollyd.log" || fail "no 'stopped' in the log"
pass "SIGTERM during streaming: final error events, exit 0"
