#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The shipped unit's SystemCallFilter= allows exactly the system calls the adapter tiers need
# beyond @system-service minus the denied groups: io_uring (@aio), mlock/munlock (@memlock),
# get_mempolicy (libnuma's probe) and, of @resources, mbind alone. The effective set is worked
# out the way systemd applies the lines (an allow list first, then ~ lines remove and plain
# lines add, in order), with the groups expanded by `systemd-analyze syscall-filter`.
set -uo pipefail
unit=${MOLLY_SOURCE_DIR:?}/packaging/systemd/mollyd.service.in
if ! command -v systemd-analyze >/dev/null; then
	echo "SKIP: systemd-analyze is missing (apt-get install systemd)"
	exit 77
fi
passed=0 failed=0
check() { if eval "$2"; then echo "$1 ok"; passed=$((passed + 1)); else echo "$1 FAILED"; failed=$((failed + 1)); fi; }

declare -A expanded
# names of a group (recursively) or a single call
expand() {
	local item=$1
	if [[ $item != @* ]]; then
		echo "$item"
		return
	fi
	if [ -z "${expanded[$item]:-}" ]; then
		local out
		out=$(systemd-analyze syscall-filter "$item" 2>/dev/null) || { echo "unknown group $item" >&2; return 1; }
		expanded[$item]=$(sed -n '2,$p' <<<"$out" | sed -e 's/^ *//' -e '/^#/d' -e '/^$/d')
	fi
	local x
	for x in ${expanded[$item]}; do expand "$x"; done
}

declare -A allowed
while IFS= read -r line; do
	v=${line#SystemCallFilter=}
	deny=0
	[[ $v == ~* ]] && deny=1 && v=${v#\~}
	for item in $v; do
		for sc in $(expand "$item"); do
			if ((deny)); then unset "allowed[$sc]"; else allowed[$sc]=1; fi
		done
	done
done < <(grep '^SystemCallFilter=' "$unit")

check filter_present '[ ${#allowed[@]} -gt 100 ]'
for sc in io_uring_setup io_uring_enter io_uring_register mlock munlock get_mempolicy mbind \
	pread64 openat mmap; do
	check "allowed_$sc" '[ -n "${allowed[$sc]:-}" ]'
done
# @resources stays denied but for mbind: the tiers set no task-wide policy, pin no thread
for sc in set_mempolicy set_mempolicy_home_node sched_setaffinity migrate_pages move_pages \
	setpriority sched_setscheduler ioprio_set; do
	check "denied_$sc" '[ -z "${allowed[$sc]:-}" ]'
done
n_resources=0
for sc in $(expand @resources); do [ -n "${allowed[$sc]:-}" ] && n_resources=$((n_resources + 1)); done
check only_mbind_of_resources '[ "$n_resources" -eq 1 ]'
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
