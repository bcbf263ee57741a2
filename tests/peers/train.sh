#!/bin/bash
# SPDX-License-Identifier: MIT
# peers-train (label peers: tools/run-tests.sh --peers): molly-train's GGUF LoRA and full
# GGUF model in the pinned llama.cpp (../shared/peers/llama-cpp.sh builds it once, 5-20
# minutes) against Molly: tests/peers/train.py.
set -u
bin=${MOLLY_BIN_DIR:?}
shared=${MOLLY_SHARED_DIR:-/nonexistent}
src=${MOLLY_SOURCE_DIR:?}
base=$shared/models/tiny/tiny-llama-f32.gguf
[ -r "$base" ] && [ -x "$shared/peers/llama-cpp.sh" ] ||
	{ echo "SKIP: ../shared (tiny models, peers/llama-cpp.sh) missing"; exit 77; }
llama=$("$shared/peers/llama-cpp.sh") || { echo "FAIL: building llama.cpp"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$src/tests/peers/train.py" "$bin" "$llama" "$base" "$tmp"
