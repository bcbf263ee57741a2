#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What routing through mollyd adds to a T1 server: starts a T1 mollyd on 127.0.0.2 and a
# routing mollyd on 127.0.0.1 whose [Target lan] (Tier=T1) is that T1, then runs
# molly-bench-gateway --url T1 --via ROUTER (1-token completions, alternating). The T1 serves
# stories260K under that name (Model=): with another name it refuses the request and every
# answer would come from the router's fallback to its own engine, which the benchmark now
# refuses to measure.
#   tools/bench-route-t1.sh [BIN_DIR (default build/release/bin)] [N (default 2000)]
set -euo pipefail
BIN=${1:-build/release/bin}
N=${2:-2000}
MODEL=$(realpath "${MOLLY_SHARED_DIR:-$(dirname "$0")/../../shared}")/models/stories260K.gguf
T=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
port() { python3 -c 'import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$1"; }
conf() { # NAME LISTEN EXTRA
	mkdir -p "$T/$1/state" "$T/$1/run"
	printf '[Model]\nPath=%s\nThreads=1\n[HTTP]\nListen=%s\n[DBus]\nBus=none\n[Paths]\nStateDirectory=%s\nRuntimeDirectory=%s\n%b\n' \
		"$MODEL" "$2" "$T/$1/state" "$T/$1/run" "${3:-}" >"$T/$1.conf"
}
wait_up() { for _ in $(seq 300); do curl -sf -o /dev/null "$1/health" && return 0; sleep 0.1; done; echo "$1 did not start" >&2; cat "$T"/*.log >&2; exit 1; }
P1=$(port 127.0.0.2)
P0=$(port 127.0.0.1)
conf t1 "127.0.0.2:$P1"
conf router "127.0.0.1:$P0" "[Target lan]\nTier=T1\nURL=http://127.0.0.2:$P1\nModel=stories260K\nQuality.general=0.9\n[Router]\nHealthCheckSec=0"
"$BIN/mollyd" --config "$T/t1.conf" >"$T/t1.log" 2>&1 & PIDS+=($!)
"$BIN/mollyd" --config "$T/router.conf" >"$T/router.log" 2>&1 & PIDS+=($!)
wait_up "http://127.0.0.2:$P1"
wait_up "http://127.0.0.1:$P0"
"$BIN/molly-bench-gateway" --url "http://127.0.0.2:$P1" --via "http://127.0.0.1:$P0" -n "$N" --warmup 100
