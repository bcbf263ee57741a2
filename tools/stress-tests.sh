#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# stress-tests.sh [--repeat N] [--fuzz-seconds S] [--phases "one-core stress repeat"]
#
# Checks that the test suite does not depend on the machine's speed (not part of CI):
#   one-core  the whole suite (tools/run-tests.sh) pinned to one core (taskset -c 0);
#   stress    the whole suite while stress-ng keeps 4 CPU hogs busy;
#   repeat    the release build's integration tests N times in a row (default 20).
# The suite's fuzzers search for S seconds each here (default 10): these phases test the tests,
# not the fuzzers. Installs stress-ng (Debian) when missing. Prints a summary; exits 1 when any
# phase had a failure.
set -uo pipefail
cd "$(dirname "$0")/.."

repeat=20
fuzz_seconds=10
phases="one-core stress repeat"
while [ $# -gt 0 ]; do
	case $1 in
	--repeat) repeat=$2; shift 2 ;;
	--fuzz-seconds) fuzz_seconds=$2; shift 2 ;;
	--phases) phases=$2; shift 2 ;;
	*) echo "usage: $0 [--repeat N] [--fuzz-seconds S] [--phases \"one-core stress repeat\"]" >&2
	   exit 2 ;;
	esac
done

if ! command -v stress-ng >/dev/null; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "stress-tests: stress-ng is missing; run: sudo apt-get install -y stress-ng" >&2
		exit 1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null ||
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; } ||
		{ echo "stress-tests: cannot install stress-ng" >&2; exit 1; }
fi

logdir=$(mktemp -d /tmp/molly-stress.XXXXXX)
summary=()
bad=0

# suite NAME COMMAND...: runs the suite under COMMAND's conditions; records its last line.
suite() {
	local name=$1 start last rc
	shift
	start=$(date +%s)
	echo "=== $name: $*"
	"$@" >"$logdir/$name.log" 2>&1
	rc=$?
	last=$(grep -E '^[0-9]+ passed, [0-9]+ skipped, [0-9]+ failed$' "$logdir/$name.log" | tail -n1)
	summary+=("$name: ${last:-no summary line} (exit $rc, $(($(date +%s) - start)) s)")
	if [ $rc -ne 0 ]; then
		bad=1
		sed -n '/^=== failed/,$p' "$logdir/$name.log" | sed 's/^/    /'
	fi
	echo "${summary[-1]}"
}

for phase in $phases; do
	case $phase in
	one-core)
		MOLLY_FUZZ_SECONDS=$fuzz_seconds suite one-core taskset -c 0 tools/run-tests.sh ;;
	stress)
		stress-ng --cpu 4 --timeout 0 --quiet &
		hog=$!
		MOLLY_FUZZ_SECONDS=$fuzz_seconds suite stress tools/run-tests.sh
		kill "$hog" 2>/dev/null
		wait "$hog" 2>/dev/null ;;
	repeat)
		# the release build exists after the phases above, or is built here
		cmake --preset release >/dev/null && cmake --build --preset release -j "$(nproc)" \
			>"$logdir/repeat-build.log" 2>&1 || { summary+=("repeat: BUILD FAILED"); bad=1; continue; }
		fails=0
		declare -A failed_tests=()
		for ((i = 1; i <= repeat; i++)); do
			if ! ctest --preset release -L integration -j "$(nproc)" \
				>"$logdir/repeat-$i.log" 2>&1; then
				fails=$((fails + 1))
				while read -r t; do
					failed_tests[$t]=$((${failed_tests[$t]:-0} + 1))
				done < <(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (Failed).*/\1/p' "$logdir/repeat-$i.log")
			fi
			echo "  repeat $i/$repeat: $(grep -E 'tests passed' "$logdir/repeat-$i.log" | tail -n1)"
		done
		line="repeat: release integration tests $repeat times: $((repeat - fails)) clean runs, $fails with failures"
		for t in "${!failed_tests[@]}"; do line+="; $t failed ${failed_tests[$t]}x"; done
		summary+=("$line")
		[ $fails -eq 0 ] || bad=1 ;;
	*) echo "unknown phase $phase" >&2; exit 2 ;;
	esac
done

echo "=== stress summary ($(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $(nproc) CPUs; logs in $logdir)"
printf '  %s\n' "${summary[@]}"
exit $bad
