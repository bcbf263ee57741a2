#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds and runs every test: the unit and tool tests under ASan+UBSan (preset dev), again
# optimised (preset release), then each libFuzzer target for $MOLLY_FUZZ_SECONDS (default 60).
# Ends with one line "N passed, N failed" (ctest's own summaries come before it).
set -uo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh || exit 1

passed=0
failed=0
fuzz_seconds=${MOLLY_FUZZ_SECONDS:-60}
jobs=$(nproc)

count_ctest() { # log file → adds its counts
	local line total nfail
	line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$1" | tail -n1)
	if [ -z "$line" ]; then
		failed=$((failed + 1))
		return
	fi
	total=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
	nfail=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$line")
	passed=$((passed + total - nfail))
	failed=$((failed + nfail))
}

for preset in dev release; do
	echo "=== $preset: configure and build"
	if ! { cmake --preset "$preset" >/dev/null && cmake --build --preset "$preset" -j "$jobs"; }; then
		echo "=== $preset: BUILD FAILED"
		failed=$((failed + 1))
		continue
	fi
	echo "=== $preset: tests"
	log=$(mktemp)
	ctest --preset "$preset" -j "$jobs" 2>&1 | tee "$log"
	count_ctest "$log"
	rm -f "$log"
done

echo "=== fuzz: configure and build (clang, libFuzzer)"
# Each fuzzer runs $fuzz_seconds on a scratch copy of its seed corpus (libFuzzer writes new
# inputs into its first corpus folder); $jobs of them at a time.
run_fuzzer() { # fuzzer binary → writes "<name> ok|FAILED" and the log into $fuzz_out
	local fuzzer=$1 name corpus work
	name=$(basename "$fuzzer")
	corpus=tests/fuzz/corpus/${name#fuzz-}
	work=$(mktemp -d)
	[ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
	if "$fuzzer" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 "$work" >"$fuzz_out/$name.log" 2>&1; then
		echo "$name: ok ($(grep -E 'stat::number_of_executed_units' "$fuzz_out/$name.log" |
			awk '{print $2}') runs in ${fuzz_seconds}s)" >"$fuzz_out/$name.result"
	else
		echo "$name: FAILED" >"$fuzz_out/$name.result"
	fi
	rm -rf "$work"
}
if cmake --preset fuzz >/dev/null && cmake --build --preset fuzz -j "$jobs"; then
	fuzz_out=$(mktemp -d)
	running=0
	for fuzzer in build/fuzz/bin/fuzz-*; do
		[ -x "$fuzzer" ] || continue
		echo "=== fuzz: $(basename "$fuzzer") for ${fuzz_seconds}s"
		run_fuzzer "$fuzzer" &
		running=$((running + 1))
		if [ "$running" -ge "$jobs" ]; then
			wait -n
			running=$((running - 1))
		fi
	done
	wait
	for result in "$fuzz_out"/*.result; do
		[ -e "$result" ] || continue
		cat "$result"
		if grep -q ': ok' "$result"; then
			passed=$((passed + 1))
		else
			failed=$((failed + 1))
			tail -n 60 "${result%.result}.log"
		fi
	done
	rm -rf "$fuzz_out"
else
	echo "=== fuzz: BUILD FAILED"
	failed=$((failed + 1))
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
