#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian packages the build and the tests need, when missing.
# Idempotent and quiet when everything is already there.
set -euo pipefail

packages=(
	cmake ninja-build gcc pkg-config   # build
	libpcre2-dev                       # BPE pre-tokenizers (PCRE2 with Unicode properties + JIT)
	clang libclang-rt-14-dev           # libFuzzer targets and their sanitizer runtimes; BPF programs
	libbpf-dev bpftool                 # egress filter: BPF loader library, skeleton generator
	python3 python3-jinja2             # cross-check of chat templates against real Jinja
	libjson-c-dev                      # JSON: PEFT configs, HTTP bodies
	liburing-dev                       # adapter loading (io_uring, O_DIRECT)
	libnuma-dev                        # warm adapter tier on the compute threads' NUMA node
	fio                                # the adapter-load benchmark's reference (bench-adapter-load.sh)
	liblmdb-dev                        # registry, priors and audit store
	libsystemd-dev                     # sd-bus, sd_notify, journal
	libmicrohttpd-dev                  # OpenAI-compatible HTTP front end
	libcurl4-openssl-dev               # remote tiers
	dbus libglib2.0-bin util-linux curl # private bus and real clients in tests
	python3-dbus                       # D-Bus Stream clients in the integration tests
	libxml2-utils                      # xmllint: checks the D-Bus policy and polkit files
	systemd                            # systemd-analyze verify of the unit (not run as init)
	# /dev/molly in a qemu guest (tests/guest/run.sh): Debian's kernel and its headers for
	# kmod-shim, busybox for the initramfs, 32-bit libc for the 32-bit client, libfuse3 for
	# the CUSE server; ~250 MB, about 2 minutes
	qemu-system-x86 linux-image-amd64 linux-headers-amd64 busybox-static kmod cpio
	gcc-multilib libfuse3-dev
)
# ---- corpus of Molly's own model (tools/build-corpus.sh, docs/model.md) ----
# Text sources, not build or test dependencies: installed only with MOLLY_DEPS=corpus (the
# tokenizer's peers test skips without them). MOLLY_DEPS_LIST=corpus prints them and exits.
corpus_packages=(
	groff-base man-db                                   # man page rendering (groff, preconv, tbl)
	manpages manpages-dev python3.11-doc debian-reference-en maint-guide
	dict-gcide dict-foldoc fortunes-min fortunes         # English
	manpages-it debian-reference-it maint-guide-it fortunes-it
	dict-freedict-eng-ita dict-freedict-ita-eng          # Italian
	manpages-es debian-reference-es maint-guide-es fortunes-es
	dict-freedict-eng-spa dict-freedict-spa-eng          # Spanish
	dict-jargon dict-elements                           # reserved for the specialists
)
if [ "${MOLLY_DEPS_LIST:-}" = corpus ]; then
	printf '%s\n' "${corpus_packages[@]}"
	exit 0
fi
[ "${MOLLY_DEPS:-}" != corpus ] || packages+=("${corpus_packages[@]}")
# ---- end corpus ----

# the official `openai` npm client in the HTTP tests: the machine image ships Node.js with its
# own npm; Debian's npm package conflicts with that, so install it only where npm is missing
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep >/dev/null "install ok installed" || missing+=("$p")
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
