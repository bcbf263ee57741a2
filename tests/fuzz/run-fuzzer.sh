#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run-fuzzer.sh FUZZER CORPUS SECONDS: fuzzes for SECONDS on a scratch copy of the seed corpus
# (libFuzzer writes new inputs into its first corpus folder; the committed seeds stay small).
# Exit 0 when nothing was found; the finding and libFuzzer's log otherwise. The time is how
# long to search, not a bound that a slow machine can miss.
set -uo pipefail
fuzzer=$1 corpus=$2 seconds=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
[ -d "$corpus" ] && cp -r "$corpus"/. "$work/corpus"/
cd "$work" || exit 1 # crash-* artifacts land here, and are printed below
if "$fuzzer" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
	corpus >log 2>&1; then
	echo "$(basename "$fuzzer"): ok ($(awk '/stat::number_of_executed_units/ {print $2}' log) runs in ${seconds}s)"
	exit 0
fi
tail -n 60 log
for f in crash-* leak-* timeout-* oom-*; do
	[ -e "$f" ] && { echo "--- $f (base64)"; base64 "$f" | head -c 4000; echo; }
done
exit 1
