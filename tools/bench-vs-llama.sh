#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The benchmark every speed claim uses: Molly against llama.cpp on THIS machine, same files,
# same threads, alternated, as ratios (Molly / llama.cpp; > 1: Molly is faster).
#
#   tools/bench-vs-llama.sh [--rounds N (5)] [--json] [--no-serve] [--threads T (2)]
#                           [--engine-models 1b-q8_0,...] [--streams 4,8] [--max-tries 5]
#                           [--save FILE.json] [--hot-type stored|q8_0]
#
# 1. Builds the pinned llama.cpp with ../shared/peers/llama-cpp.sh (cached after the first
#    build, which takes 10-20 minutes on 2 cores).
# 2. Makes the models once, in $MOLLY_BENCH_DIR (/var/tmp/molly-bench-vs-llama): molly-mkmodel
#    --seed 1 1b Q8_0, 1b Q4_0, 100m F32, 100m Q8_0, 100m Q4_0, and 8 rank-16 adapters for
#    100m Q8_0 (all projections, F16, molly-mkadapter --format gguf --seed 1..8).
# 3. Engine: molly-bench and llama-bench (pp128 + tg64, 1 rep each) on each model, back to
#    back, the first of the two alternating from round to round.
# 4. Servers: mollyd, then llama-server (or the other way round), each alone, on 100m Q8_0,
#    without adapters and with the 8 loaded; 4 and 8 concurrent /v1/completions of 64 tokens
#    (ignore_eos), stream i on adapter i mod 8 (mollyd: "model": "a<i>"; llama-server: the
#    per-request "lora": [{"id": i, "scale": 1}], adapters loaded with
#    --lora-init-without-apply); aggregate generated tok/s.
# A round in which either side got less than 85% of the CPU time its threads were ready to use
# in a timed run (schedstat) is repeated (at most 5 tries, then kept and marked noisy); see
# tools/bench-vs-llama.py. As root it runs with its session's autogroup at nice -20
# (raise_priority() there; --no-priority: as it is). Progress goes to stderr, the table (or
# JSON) to stdout. Molly's binaries: $MOLLY_BIN_DIR as they are, else build/release/bin, brought
# up to date first. Not part of CI.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
shared=${MOLLY_SHARED_DIR:-$src/../shared}
bin=${MOLLY_BIN_DIR:-$src/build/release/bin}
dir=${MOLLY_BENCH_DIR:-/var/tmp/molly-bench-vs-llama}
case ${1:-} in -h | --help) sed -n '3,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

need=(mollyd molly-bench molly-mkmodel molly-mkadapter)
if [ -z "${MOLLY_BIN_DIR:-}" ]; then
	[ -f "$src/build/release/build.ninja" ] || (cd "$src" && cmake --preset release >/dev/null)
	cmake --build "$src/build/release" --target "${need[@]}" >/dev/null
fi
for t in "${need[@]}"; do
	[ -x "$bin/$t" ] || { echo "bench-vs-llama.sh: $bin/$t is missing" >&2; exit 1; }
done

llama=$("$shared/peers/llama-cpp.sh")

mkdir -p "$dir/adapters"
for m in 1b:q8_0 1b:q4_0 100m:f32 100m:q8_0 100m:q4_0; do
	f=$dir/${m%:*}-${m#*:}.gguf
	[ -f "$f" ] && continue
	echo "bench-vs-llama.sh: making $f" >&2
	"$bin/molly-mkmodel" --preset "${m%:*}" --type "${m#*:}" --seed 1 --out "$f" >&2
done
for i in 0 1 2 3 4 5 6 7; do
	f=$dir/adapters/a$i.gguf
	[ -f "$f" ] && continue
	"$bin/molly-mkadapter" --base "$dir/100m-q8_0.gguf" --rank 16 --targets all --dtype f16 \
		--seed $((i + 1)) --format gguf --out "$f" >&2
done

exec setsid -w python3 "$src/tools/bench-vs-llama.py" --molly-bin "$bin" --llama-bin "$llama" \
	--models "$dir" "$@"
