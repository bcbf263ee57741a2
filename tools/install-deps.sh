#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian packages the build and the tests need, when missing.
# Idempotent and quiet when everything is already there.
set -euo pipefail

packages=(
	cmake ninja-build gcc pkg-config   # build
	libpcre2-dev                       # BPE pre-tokenizers (PCRE2 with Unicode properties + JIT)
	clang libclang-rt-14-dev           # libFuzzer targets and their sanitizer runtimes
	python3 python3-jinja2             # cross-check of chat templates against real Jinja
)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "install-deps: installing ${missing[*]}"
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: not root; run: sudo apt-get install -y ${missing[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
