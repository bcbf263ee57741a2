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
