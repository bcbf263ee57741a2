#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The D-Bus part of the load test: 50 concurrent clients. With QueueLength=64 and
# MaxSequences=8 every one is answered; with a short queue every one gets an answer or
# org.molly.Error.QueueFull. None hangs (each has a deadline), the daemon stays under a memory
# ceiling and keeps serving.
source "$(dirname "$0")/lib/common.sh"
need timeout

N=50
# Sanitizer builds carry shadow memory: the ceiling is generous there, tight otherwise.
if nm -an "$MOLLYD" 2>/dev/null | grep __asan_init >/dev/null; then RSS_CEILING_KB=1572864; else RSS_CEILING_KB=262144; fi

run_clients() {
	local dir=$1 pids=()
	mkdir -p "$dir"
	for i in $(seq $N); do
		( rc=0; timeout 150 busctl --address="$BUS_ADDR" --timeout=140 -- call org.molly.Daemon1 /org/molly/Daemon1 \
			org.molly.Inference1 Generate 'a{sv}' 3 prompt s "Once upon a time" max_tokens u 16 seed t "$i" \
			> "$dir/$i.out" 2>&1 || rc=$?; echo $rc > "$dir/$i.rc" ) &
		pids+=($!)
	done
	wait "${pids[@]}" || true # (not a bare wait: mollyd is a child too)
}

check_rss() {
	local hwm
	hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$MOLLYD_PID/status")
	[ "$hwm" -lt "$RSS_CEILING_KB" ] || fail "mollyd peak RSS ${hwm} kB is over ${RSS_CEILING_KB} kB"
	echo "peak RSS ${hwm} kB (ceiling ${RSS_CEILING_KB} kB)"
}

bus_start

# --- QueueLength=64, MaxSequences=8: all 50 fit ---
QUEUE_LENGTH=64 MAX_SEQUENCES=8 write_config
mollyd_start
start=$(date +%s)
run_clients "$T/a"
ok=0 full=0
for i in $(seq $N); do
	rc=$(cat "$T/a/$i.rc")
	[ "$rc" != 124 ] || fail "client $i hung"
	if grep -q '"completion_tokens" u 16' "$T/a/$i.out"; then ok=$((ok + 1)); fi
done
[ $ok -eq $N ] || fail "only $ok of $N clients got an answer: $(cat "$T"/a/*.out | sort | uniq -c | head)"
echo "$N of $N answered in $(( $(date +%s) - start )) s"
check_rss
expect_out '"requests_total" t 5[0-9]' call Daemon1 Status
mollyd_stop
pass "50 D-Bus clients, QueueLength=64 MaxSequences=8: all answered"

# --- a short queue: answers or QueueFull, nothing else ---
: > "$T/mollyd.log"
QUEUE_LENGTH=4 MAX_SEQUENCES=2 write_config
mollyd_start
run_clients "$T/b"
ok=0 full=0
for i in $(seq $N); do
	rc=$(cat "$T/b/$i.rc")
	[ "$rc" != 124 ] || fail "client $i hung"
	if grep -q '"completion_tokens" u 16' "$T/b/$i.out"; then
		ok=$((ok + 1))
	elif grep -q 'the queue is full' "$T/b/$i.out"; then
		full=$((full + 1))
	else
		fail "client $i got neither an answer nor queue full: $(cat "$T/b/$i.out")"
	fi
done
echo "$ok answered, $full refused with queue full"
# A burst can fill the queue before the scheduler admits any of it, so QueueLength is the
# floor (QueueLength + MaxSequences when admission keeps up).
[ $ok -ge 4 ] || fail "fewer than QueueLength answers ($ok)"
[ $((ok + full)) -eq $N ] || fail "lost clients"
check_rss
expect_out '"finish_reason" s "length"' call Inference1 Generate 'a{sv}' 2 prompt s Once max_tokens u 2
mollyd_stop
pass "50 D-Bus clients on a short queue: answers or queue full, none hangs"
