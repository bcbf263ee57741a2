# SPDX-License-Identifier: MIT
# wait_until SECONDS COMMAND...: runs COMMAND every 50 ms until it succeeds (returns 0) or
# SECONDS of wall-clock time have passed (returns 1). Sourced by the other helpers.
#
# A wait is for an event the test has caused and that will come; its bound only turns a hang
# into a failure with a message, so it is generous (MOLLY_TEST_WAIT_S, default 120 s) and never
# stands for "long enough for the work to be done". Tests make the states they check certain
# (e.g. MOLLY_TEST_HOLD_AFTER_TOKENS holds the scheduler) instead of racing the machine.

MOLLY_TEST_WAIT_S=${MOLLY_TEST_WAIT_S:-120}

wait_until() {
	local limit=$1 deadline
	shift
	deadline=$(($(date +%s) + limit))
	while ! "$@"; do
		[ "$(date +%s)" -lt "$deadline" ] || return 1
		sleep 0.05
	done
	return 0
}

# Debian's python3 for every client the tests start: the python3 first on PATH may be a pyenv
# shim, whose start costs seconds on a busy machine (measured: 2.5 s against 0.05 s at a load of
# 10 on 2 CPUs), and Debian's is the one with python3-dbus and python3-jinja2.
if [ -x /usr/bin/python3 ] && [ "$(command -v python3)" != /usr/bin/python3 ]; then
	_molly_pydir=${TMPDIR:-/tmp}/molly-tests-python3
	mkdir -p "$_molly_pydir" && ln -sfn /usr/bin/python3 "$_molly_pydir/python3" &&
		PATH=$_molly_pydir:$PATH
	unset _molly_pydir
fi
