# SPDX-License-Identifier: MIT
# Helpers for the HTTP integration tests (tests/integration/http-*.sh), sourced, not run.
#
# Each test starts a real mollyd (from $MOLLY_BIN_DIR, or $MOLLYD) with a temporary config that
# listens on a free loopback port, talks to it with real clients (curl, python3, node), and
# stops it. Everything stays on 127.0.0.1 (or a unix socket in the temporary folder).
#
# Environment (set by ctest; defaults for running a test by hand from the source tree):
#   MOLLY_BIN_DIR     build/<dir>/bin with mollyd and molly-run
#   MOLLY_SHARED_DIR  the shared models (models/stories260K.gguf)
#   MOLLYD            overrides the daemon binary
# Exit codes: 0 pass, 1 fail, 77 skip (with the reason on stderr).

set -u
set -o pipefail
. "$(dirname "${BASH_SOURCE[0]}")/wait.sh"

HT_SRC=${MOLLY_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)}
HT_BIN=${MOLLY_BIN_DIR:-$HT_SRC/build/dev/bin}
HT_SHARED=${MOLLY_SHARED_DIR:-$HT_SRC/../shared}
HT_MOLLYD=${MOLLYD:-$HT_BIN/mollyd}
HT_MODEL=${HT_MODEL:-$HT_SHARED/models/stories260K.gguf}
HT_NAME=${HT_NAME:-stories260K}
HT_PID=
HT_PORT=
HT_URL=
HT_FAILED=0

ht_skip() {
	echo "SKIP: $*" >&2
	exit 77
}

ht_log_tail() {
	if [ -n "${HT_TMP:-}" ] && [ -f "$HT_TMP/mollyd.log" ]; then
		echo "--- mollyd log (last 40 lines) ---" >&2
		tail -n 40 "$HT_TMP/mollyd.log" >&2
	fi
}

ht_fail() {
	echo "FAIL: $*" >&2
	if [ -n "${HT_TMP:-}" ] && [ -f "$HT_TMP/body" ]; then
		echo "--- last response body ---" >&2
		head -c 2000 "$HT_TMP/body" >&2
		echo >&2
	fi
	ht_log_tail
	exit 1
}

ht_ok() {
	echo "ok - $*"
}

for tool in curl python3; do
	command -v "$tool" >/dev/null || ht_skip "$tool is not installed"
done
[ -x "$HT_MOLLYD" ] || ht_skip "mollyd is not built ($HT_MOLLYD)"
[ -f "$HT_MODEL" ] || ht_skip "the test model is missing ($HT_MODEL)"

HT_TMP=$(mktemp -d "${TMPDIR:-/tmp}/molly-http.XXXXXX")

ht_cleanup() {
	if [ -n "$HT_PID" ] && kill -0 "$HT_PID" 2>/dev/null; then
		kill -KILL "$HT_PID" 2>/dev/null
		wait "$HT_PID" 2>/dev/null
	fi
	rm -rf "$HT_TMP"
}
trap ht_cleanup EXIT

# A free TCP port on 127.0.0.1 (the kernel's pick; closed again before mollyd binds it).
ht_free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ht_config [EXTRA-INI]: writes $HT_TMP/mollyd.conf for a daemon on 127.0.0.1, port 0: the
# kernel picks a free port when mollyd binds, and ht_start reads it from the log (a port picked
# beforehand can be taken by any connection on the machine before mollyd binds it). EXTRA-INI
# is appended (sections such as [Engine] or [Member NAME]); LISTEN overrides Listen=.
ht_config() {
	HT_PORT=
	HT_URL=
	mkdir -p "$HT_TMP/state/adapters" "$HT_TMP/run"
	cat >"$HT_TMP/mollyd.conf" <<EOF
[Model]
Path=$HT_MODEL
Threads=1

[HTTP]
Listen=${LISTEN:-127.0.0.1:0}
MaxBodyBytes=${MAX_BODY:-64K}

[DBus]
Bus=none

[Adapters]
Directory=$HT_TMP/state/adapters

[Paths]
StateDirectory=$HT_TMP/state
RuntimeDirectory=$HT_TMP/run

${1:-}
EOF
}

# ht_listening_address LOG: the address a mollyd logged it listens on ("127.0.0.1:PORT",
# "[::1]:PORT", "unix:PATH"), or nothing yet.
ht_listening_address() {
	sed -n 's/.*HTTP: listening on //p' "$1" 2>/dev/null | tail -n1
}

# ht_await_daemon LOG PID: waits until the mollyd (PID) that writes LOG listens and answers
# /health; prints its base URL (http://ADDR:PORT). Returns 1 when it exits first or after
# MOLLY_TEST_WAIT_S.
ht_await_daemon() {
	local log=$1 pid=$2 addr= deadline

	deadline=$(($(date +%s) + MOLLY_TEST_WAIT_S))
	while [ "$(date +%s)" -lt "$deadline" ]; do
		kill -0 "$pid" 2>/dev/null || return 1
		[ -n "$addr" ] || addr=$(ht_listening_address "$log")
		if [ -n "$addr" ] &&
			[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://$addr/health")" = 200 ]; then
			echo "http://$addr"
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# Starts mollyd on the config, learns its address from the log (HT_PORT, HT_URL for TCP) and
# waits until /health answers (or it exits).
ht_start() {
	local health_args addr= deadline

	"$HT_MOLLYD" --config "$HT_TMP/mollyd.conf" >"$HT_TMP/mollyd.log" 2>&1 &
	HT_PID=$!
	deadline=$(($(date +%s) + MOLLY_TEST_WAIT_S))
	while [ "$(date +%s)" -lt "$deadline" ]; do
		if ! kill -0 "$HT_PID" 2>/dev/null; then
			wait "$HT_PID"
			ht_fail "mollyd exited early (status $?)"
		fi
		if [ -z "$addr" ]; then
			addr=$(ht_listening_address "$HT_TMP/mollyd.log")
			[ -n "$addr" ] || { sleep 0.05; continue; }
			if [[ "$addr" == unix:* ]]; then
				health_args=(--unix-socket "${addr#unix:}" http://localhost/health)
			else
				HT_PORT=${addr##*:}
				HT_URL=http://$addr
				health_args=("$HT_URL/health")
			fi
		fi
		if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "${health_args[@]}")" = 200 ]; then
			return 0
		fi
		sleep 0.1
	done
	ht_fail "mollyd did not answer /health within $MOLLY_TEST_WAIT_S s"
}

ht_running() { kill -0 "$HT_PID" 2>/dev/null; }
ht_exited() { ! ht_running; }

# Sends SIGTERM and waits up to $1 seconds (default $MOLLY_TEST_WAIT_S); sets HT_EXIT to its
# exit status.
ht_stop() {
	[ -n "$HT_PID" ] || return 0
	kill -TERM "$HT_PID" 2>/dev/null
	if ! wait_until "${1:-$MOLLY_TEST_WAIT_S}" ht_exited; then
		ht_fail "mollyd did not exit within ${1:-$MOLLY_TEST_WAIT_S} s of SIGTERM"
	fi
	wait "$HT_PID"
	HT_EXIT=$?
	HT_PID=
}

# ht_req METHOD PATH [BODY] [curl args...]: sets HT_STATUS; the body is in $HT_TMP/body.
# BODY "@FILE" sends a file; "-" sends nothing.
ht_req() {
	local method=$1 path=$2 body=${3:--}
	shift 3 2>/dev/null || shift $#
	local args=(-s -o "$HT_TMP/body" -w '%{http_code}' --max-time 60 -X "$method")

	if [ "$body" != - ]; then
		args+=(-H 'Content-Type: application/json' --data-binary "$body")
	fi
	HT_STATUS=$(curl "${args[@]}" "$@" "$HT_URL$path") || HT_STATUS=000
}

ht_expect_status() {
	[ "$HT_STATUS" = "$1" ] || ht_fail "${2:-request}: HTTP $HT_STATUS, expected $1"
}

# ht_json EXPR: evaluates a Python expression on the last body parsed as JSON (bound to j)
# and prints the result; fails when the body is not JSON.
ht_json() {
	python3 - "$HT_TMP/body" "$1" <<'EOF' || ht_fail "not JSON or no such field: $1"
import json, sys
with open(sys.argv[1], "rb") as f:
    j = json.load(f)
v = eval(sys.argv[2], {"j": j})
print(v if isinstance(v, str) else json.dumps(v))
EOF
}

# ht_expect_json EXPR VALUE [what]
ht_expect_json() {
	local got
	got=$(ht_json "$1")
	[ "$got" = "$2" ] || ht_fail "${3:-$1}: got '$got', expected '$2'"
}

# ht_expect_error STATUS CODE-OR-EMPTY what: the OpenAI error shape with that status and code.
ht_expect_error() {
	ht_expect_status "$1" "$3"
	ht_expect_json 'sorted(j["error"].keys())' '["code", "message", "param", "type"]' "$3: error shape"
	ht_expect_json 'type(j["error"]["message"]).__name__' str "$3: message"
	if [ -n "$2" ]; then
		ht_expect_json 'j["error"]["code"]' "$2" "$3: error code"
	fi
}

# The daemon's resident set size in KiB (current, and the peak so far).
ht_rss_kib() {
	awk '/^VmRSS:/ {print $2}' "/proc/$HT_PID/status" 2>/dev/null || echo 0
}
ht_hwm_kib() {
	awk '/^VmHWM:/ {print $2}' "/proc/$HT_PID/status" 2>/dev/null || echo 0
}

# A metric's value from /metrics (first sample whose line starts with $1).
ht_metric() {
	curl -s --max-time 10 "$HT_URL/metrics" | awk -v p="$1" 'index($0, p) == 1 {print $NF; exit}'
}
