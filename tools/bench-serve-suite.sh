#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The issue-4 serving cases, alternated so that a noisy host hits them alike:
#   tools/bench-serve-suite.sh [ROUNDS (3)] [MODEL (/tmp/perf/100m-q8_0.gguf)] [BIN_DIR (build/release/bin)]
# Each round runs molly-bench --serve --threads 2 for (adapters, concurrency) = (0, 4), (4, 4),
# (0, 8), (8, 8) and (8, 8) --sequential and prints aggregate tok/s and cpu_util per case.
# Make the model with: molly-mkmodel --preset 100m --type q8_0 --seed 1 --out MODEL
# Run as root to get chrt -f 10 (the benchmark's threads then preempt other work).
set -euo pipefail
ROUNDS=${1:-3}
MODEL=${2:-/tmp/perf/100m-q8_0.gguf}
BIN=${3:-build/release/bin}
[ -f "$MODEL" ] || { echo "no model at $MODEL (see the header of $0)" >&2; exit 1; }
RT=()
[ "$(id -u)" = 0 ] && RT=(chrt -f 10)
for ((r = 1; r <= ROUNDS; r++)); do
	for c in "0 4" "4 4" "0 8" "8 8" "8 8 --sequential"; do
		set -- $c
		out=$("${RT[@]}" "$BIN/molly-bench" --serve --model "$MODEL" --threads 2 \
			--adapters "$1" --concurrency "$2" ${3:-} --json)
		tok=$(echo "$out" | grep -o '"aggregate_tok_s":[0-9.]*' | cut -d: -f2)
		util=$(echo "$out" | grep -o '"cpu_util":[0-9.]*' | cut -d: -f2)
		printf 'round %d  adapters %s  concurrency %s %-13s  %8s tok/s  cpu_util %s\n' \
			"$r" "$1" "$2" "${3:-}" "$tok" "$util"
	done
done
