# SPDX-License-Identifier: MIT
# Helpers for tests/integration/egress-*.sh (sourced after lib/http.sh and lib/route.sh): the
# daemon with kernel egress enforcement (eBPF cgroup filters, one molly-egress worker per
# remote tier). These tests need root and a kernel that loads the programs; without them they
# exit 77 and say why.

eg_require_root() {
	[ "$(id -u)" = 0 ] || ht_skip "egress enforcement needs root (BPF and cgroups); run as root"
	grep -q ' - cgroup2 ' /proc/self/mountinfo || ht_skip "no cgroup2 mount in /proc/self/mountinfo"
	[ -x "$HT_BIN/molly-egress" ] || ht_skip "molly-egress is not built ($HT_BIN/molly-egress)"
}

# After ht_start: skip (77) when enforcement could not start on this machine (no BPF...),
# fail when the daemon says nothing about it.
eg_require_enforced() {
	if grep -q 'egress enforcement could not start' "$HT_TMP/mollyd.log"; then
		ht_skip "egress enforcement could not start here: $(grep -m1 'egress enforcement could not start' "$HT_TMP/mollyd.log")"
	fi
	grep -q 'egress enforcement: core cgroup' "$HT_TMP/mollyd.log" ||
		ht_fail "the daemon did not report egress enforcement at start"
}

# The daemon's egress subtree (absolute), from its own cgroup ("…/molly-mollyd-PID/core").
eg_subtree() {
	local pid=${1:-$HT_PID} rel mnt
	rel=$(sed -n 's/^0:://p' "/proc/$pid/cgroup")
	mnt=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
	[ -n "$rel" ] && [ -n "$mnt" ] || return 1
	case "$rel" in
	*/core) echo "$mnt${rel%/core}" ;;
	*) return 1 ;;
	esac
}

# eg_worker_pid TIER [DAEMON_PID]: the pid of the tier's worker (empty when none).
eg_worker_pid() {
	local sub
	sub=$(eg_subtree "${2:-$HT_PID}") || return 0
	head -n1 "$sub/t$1/cgroup.procs" 2>/dev/null
}

# eg_wait_worker TIER [NOT_PID]: waits for a worker in the tier's cgroup other than NOT_PID;
# prints its pid.
eg_wait_worker() {
	local p deadline=$(($(date +%s) + MOLLY_TEST_WAIT_S))
	while [ "$(date +%s)" -lt "$deadline" ]; do
		p=$(eg_worker_pid "$1")
		if [ -n "$p" ] && [ "$p" != "${2:-}" ]; then
			echo "$p"
			return 0
		fi
		sleep 0.1
	done
	return 1
}
