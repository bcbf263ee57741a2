#!/bin/bash
# SPDX-License-Identifier: MIT
# tool-bench-egress: molly-bench-egress runs end to end (a short run: the numbers themselves are
# recorded in docs/PERFORMANCE.md, not judged here), its filtered side really went through the
# BPF program, and the BPF statistics switch is back where it was. Root only (skip otherwise).
set -u
bin=${MOLLY_BIN_DIR:?}
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "skip: molly-bench-egress needs root"; exit 77; }
before=$(cat /proc/sys/kernel/bpf_stats_enabled 2>/dev/null || echo none)
out=$("$bin/molly-bench-egress" --connects 400 --round 100 --json)
rc=$?
[ $rc -eq 77 ] && { echo "skip: egress filter unsupported here"; exit 77; }
[ $rc -eq 0 ] || fail "molly-bench-egress exited $rc: $out"
echo "$out"
for k in filtered_p50_ns filtered_p99_ns unfiltered_p50_ns unfiltered_p99_ns overhead_p50_ns overhead_p50_paired_ns; do
	grep -q "\"$k\":-\?[0-9]" <<<"$out" || fail "no $k in $out"
done
# the statistics pass connects 2000 times from the filtered cgroup: connect4 ran each time
grep -q '"prog_connect4_runs":2000,' <<<"$out" || fail "connect4 did not run for every connect: $out"
after=$(cat /proc/sys/kernel/bpf_stats_enabled 2>/dev/null || echo none)
[ "$before" = "$after" ] || fail "bpf_stats_enabled was $before, is $after"
# bad arguments are refused with a reason
"$bin/molly-bench-egress" --connects 150 --round 100 2>&1 | grep >/dev/null "multiple of" ||
	fail "--connects not a multiple of --round accepted"
echo "ok"
