# SPDX-License-Identifier: MIT
# Shared by tests/integration/*.sh: a private system-style bus with the project's D-Bus policy,
# a mollyd on it, and small assertion helpers. Source it; then call bus_start, mollyd_start.
#
# Environment (set by ctest): MOLLY_BIN_DIR, MOLLY_SOURCE_DIR, MOLLY_SHARED_DIR.
# Exits 77 (skip) with the reason when something needed is missing.

set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/wait.sh"

: "${MOLLY_SOURCE_DIR:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)}"
: "${MOLLY_BIN_DIR:=$MOLLY_SOURCE_DIR/build/dev/bin}"
: "${MOLLY_SHARED_DIR:=$MOLLY_SOURCE_DIR/../shared}"
MOLLYD=$MOLLY_BIN_DIR/mollyd
MOLLY=$MOLLY_BIN_DIR/molly
MODEL=${MOLLY_TEST_MODEL:-$MOLLY_SHARED_DIR/models/stories260K.gguf}
LORA=$MOLLY_SHARED_DIR/models/stories260K-lora-all-r8.gguf
# Sanitizer builds: leaks at exit are checked by the unit tests; here a report must not turn an
# exit 0 into a failure of the shutdown test.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
# A test's mollyd runs as root: on a machine with /dev/cuse it would serve /dev/molly through
# CUSE (daemon/front/dev-cuse.c). Tests must not make system devices; the guest stage
# (tests/guest/run.sh) tests that path.
export MOLLY_DEV_CUSE=0

# The names the packaged policy uses, mapped to accounts every Debian system has: the daemon's
# user "molly" -> "daemon" (uid 1); the group "molly" of those who may ask -> "nogroup".
TEST_DAEMON_USER=daemon
TEST_ASK_GROUP=nogroup
ASK_UID=65534     # nobody, primary group nogroup: may ask, may not administer
STRANGER_UID=2      # "bin": not in the asking group, so the bus policy refuses it everything

# A Python that has dbus-python (python3-dbus), for clients that need file descriptors.
PYDBUS=
for py in /usr/bin/python3 python3; do
	if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import dbus' 2>/dev/null; then
		PYDBUS=$py
		break
	fi
done

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; [ -n "${T:-}" ] && [ -f "$T/mollyd.log" ] && tail -30 "$T/mollyd.log" >&2; exit 1; }
pass() { echo "ok - $*"; }

need() {
	for c in "$@"; do command -v "$c" >/dev/null 2>&1 || skip "$c is not installed (tools/install-deps.sh)"; done
}

need dbus-daemon busctl
[ -x "$MOLLYD" ] || skip "$MOLLYD is not built"
[ -x "$MOLLY" ] || skip "$MOLLY is not built"
[ -r "$MODEL" ] || skip "the model $MODEL is missing"

T=$(mktemp -d /tmp/molly-it.XXXXXX)
# Other users (setpriv clients, the daemon after it drops to its user) must reach the sockets.
chmod 755 "$T"
BUS_PID=
MOLLYD_PID=

cleanup() {
	local rc=$?
	[ -n "$MOLLYD_PID" ] && kill -KILL "$MOLLYD_PID" 2>/dev/null || true
	[ -n "$BUS_PID" ] && kill "$BUS_PID" 2>/dev/null || true
	if [ $rc -ne 0 ] && [ $rc -ne 77 ] && [ -f "$T/mollyd.log" ]; then
		echo "--- mollyd.log (last 40 lines) ---" >&2
		tail -40 "$T/mollyd.log" >&2
	fi
	rm -rf "$T"
	exit $rc
}
trap cleanup EXIT

# bus_start: a private system-style bus whose policy includes packaging/dbus/*.conf.
bus_start() {
	mkdir -p "$T/system.d"
	sed -e "s/user=\"molly\"/user=\"$TEST_DAEMON_USER\"/g" \
	    -e "s/group=\"molly\"/group=\"$TEST_ASK_GROUP\"/g" \
	    "$MOLLY_SOURCE_DIR/packaging/dbus/org.molly.Daemon1.conf" > "$T/system.d/org.molly.Daemon1.conf"
	sed -e "s|@SOCKET@|$T/system.sock|" -e "s|@POLICYDIR@|$T/system.d|" \
	    "$MOLLY_SOURCE_DIR/tests/integration/lib/private-system.conf.in" > "$T/system.conf"
	local out
	out=$(dbus-daemon --config-file="$T/system.conf" --fork --nopidfile --print-address=1 --print-pid=1) ||
		fail "dbus-daemon did not start"
	BUS_ADDR=$(echo "$out" | sed -n 1p)
	BUS_PID=$(echo "$out" | sed -n 2p)
	chmod 666 "$T/system.sock"
	export DBUS_SYSTEM_BUS_ADDRESS=$BUS_ADDR
}

# write_config [extra lines...]: $T/mollyd.conf with the test model and directories.
write_config() {
	mkdir -p "$T/state" "$T/run"
	cat > "$T/mollyd.conf" <<CONF
[Model]
Path=$MODEL
Threads=2
[Engine]
MaxSequences=${MAX_SEQUENCES:-8}
QueueLength=${QUEUE_LENGTH:-64}
[HTTP]
Listen=${HTTP_LISTEN:-}
[DBus]
Bus=system
[Paths]
StateDirectory=$T/state
RuntimeDirectory=$T/run
[Daemon]
StopTimeoutSec=${STOP_TIMEOUT:-5}
LogLevel=debug
CONF
	for line in "$@"; do echo "$line" >> "$T/mollyd.conf"; done
}

# mollyd_start: starts mollyd on the private bus and waits for its name.
mollyd_start() {
	local deadline
	"$MOLLYD" --config "$T/mollyd.conf" --log-target=stderr >>"$T/mollyd.log" 2>&1 &
	MOLLYD_PID=$!
	deadline=$(($(date +%s) + MOLLY_TEST_WAIT_S))
	while [ "$(date +%s)" -lt "$deadline" ]; do
		if busctl --address="$BUS_ADDR" status org.molly.Daemon1 >/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$MOLLYD_PID" 2>/dev/null || fail "mollyd exited during start-up"
		sleep 0.1
	done
	fail "mollyd did not take its bus name in $MOLLY_TEST_WAIT_S s"
}

# mollyd_stop: SIGTERM and wait; the exit status must be 0.
mollyd_stop() {
	kill -TERM "$MOLLYD_PID"
	local rc=0
	wait "$MOLLYD_PID" || rc=$?
	MOLLYD_PID=
	[ $rc -eq 0 ] || fail "mollyd exited with $rc after SIGTERM"
}

# call IFACE METHOD SIGNATURE ARGS...: busctl call on the daemon.
call() {
	local iface=$1 method=$2
	shift 2
	busctl --address="$BUS_ADDR" -- call org.molly.Daemon1 /org/molly/Daemon1 "org.molly.$iface" "$method" "$@"
}

# as_uid UID [GID [GROUPS]] COMMAND...: runs a command as another user.
as_uid() {
	local uid=$1 gid=$2 groups=$3
	shift 3
	if [ -n "$groups" ]; then
		setpriv --reuid="$uid" --regid="$gid" --groups="$groups" -- "$@"
	else
		setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"
	fi
}

# expect_fail PATTERN COMMAND...: the command must fail and print PATTERN (grep -E).
expect_fail() {
	local pattern=$1 out rc=0
	shift
	out=$("$@" 2>&1) || rc=$?
	[ $rc -ne 0 ] || fail "expected failure matching '$pattern' from: $* (got success: $out)"
	grep -Eq -- "$pattern" <<<"$out" || fail "expected '$pattern' from: $*; got: $out"
}

# expect_out PATTERN COMMAND...: the command must succeed and print PATTERN.
expect_out() {
	local pattern=$1 out rc=0
	shift
	out=$("$@" 2>&1) || rc=$?
	[ $rc -eq 0 ] || fail "command failed ($rc): $*: $out"
	grep -Eq -- "$pattern" <<<"$out" || fail "expected '$pattern' from: $*; got: $out"
}
