#!/bin/bash
# SPDX-License-Identifier: MIT
# Cross-checks chat_render() against real Jinja: tests/chat_jinja_reference.py renders the
# shared chat templates (plus a few embedded ones) for a set of conversations with Debian's
# python3-jinja2, configured as Hugging Face transformers does, and test-chat's
# jinja_cross_check compares our C rendering with each. Documented differences are skipped or
# normalised by the script (see its EXCEPTIONS and daemon/engine/chat.c).
# Exits 77 (skip) when python3-jinja2 is missing and cannot be installed.
set -euo pipefail

src=${MOLLY_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
shared=${MOLLY_SHARED_DIR:-$src/../shared}
bin=${MOLLY_BIN_DIR:-$src/build/bin}
py=/usr/bin/python3 # Debian's, where python3-jinja2 goes (not a pyenv one)

have_jinja() { [ -x "$py" ] && "$py" -c 'import jinja2' 2>/dev/null; }

if ! have_jinja && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	echo "python3-jinja2 missing, trying apt-get install python3-jinja2"
	DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -q python3-jinja2 \
		>/dev/null 2>&1 || true
fi
if ! have_jinja; then
	echo "SKIP: $py cannot import jinja2 (apt-get install python3-jinja2)"
	exit 77
fi

templates=$shared/reference/chat-templates
if [ ! -d "$templates" ]; then
	echo "SKIP: $templates missing"
	exit 77
fi

test_chat=
for cand in "$bin/test-chat" "$bin/../tests/test-chat"; do
	if [ -x "$cand" ]; then
		test_chat=$cand
		break
	fi
done
if [ -z "$test_chat" ]; then
	echo "FAIL: test-chat not found in $bin (build the test-chat target)"
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$py" "$src/tests/chat_jinja_reference.py" "$templates" "$tmp"
MOLLY_CHAT_JINJA_DIR=$tmp "$test_chat" jinja_cross_check
