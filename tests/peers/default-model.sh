#!/bin/bash
# SPDX-License-Identifier: MIT
# peers-default-model (label peers: tools/run-tests.sh --peers): Molly's own model,
# models/molly-mini.gguf, loads and generates in the pinned llama.cpp as in Molly
# (tests/peers/default_model.py). Needs ../shared/peers/llama-cpp.sh only.
set -u
bin=${MOLLY_BIN_DIR:?}
shared=${MOLLY_SHARED_DIR:-/nonexistent}
src=${MOLLY_SOURCE_DIR:?}
model=$src/models/molly-mini.gguf
[ -r "$model" ] || { echo "FAIL: $model is missing"; exit 1; }
[ -x "$shared/peers/llama-cpp.sh" ] || { echo "SKIP: no $shared/peers/llama-cpp.sh"; exit 77; }
llama=$("$shared/peers/llama-cpp.sh") || { echo "FAIL: building llama.cpp"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$src/tests/peers/default_model.py" "$bin" "$llama" "$model" "$tmp"
