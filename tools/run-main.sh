#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job on a default setup: build, then generate text with the engine from the
# default model ($MOLLY_MODEL, else ../shared/models/stories260K.gguf). Extra arguments go
# to molly-run (e.g. --prompt "..." -n 200 --temp 0).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" >/dev/null

model=${MOLLY_MODEL:-../shared/models/stories260K.gguf}
if [ ! -r "$model" ]; then
	echo "run-main: no model at '$model'; making a random one (its output is noise)" >&2
	model=build/release/random-100m-q8_0.gguf
	[ -r "$model" ] || build/release/bin/molly-mkmodel --preset 100m --type q8_0 --seed 1 --out "$model"
fi
prompt="Once upon a time"
exec build/release/bin/molly-run --model "$model" --prompt "$prompt" -n 128 --seed 42 "$@"
