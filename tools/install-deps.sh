#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the Debian packages Molly needs, when missing. Idempotent and quiet when everything
# is already there.
#   tools/install-deps.sh             everything: build, run, every test, the packages (CI)
#   tools/install-deps.sh --runtime   what tools/run-main.sh needs: build and run mollyd on a
#                                     private bus, ask it over D-Bus and HTTP
#   tools/install-deps.sh --packages  the runtime set plus what tools/build-packages.sh needs
# Several options add up (--runtime --packages).
set -euo pipefail

# build mollyd and its tools, run it on a private bus, ask it (tools/run-main.sh)
runtime=(
	cmake ninja-build gcc pkg-config   # build
	libpcre2-dev                       # BPE pre-tokenizers (PCRE2 with Unicode properties + JIT)
	clang libbpf-dev bpftool           # egress filter: BPF programs, loader library, skeletons
	libjson-c-dev                      # JSON: PEFT configs, HTTP bodies
	liburing-dev                       # adapter loading (io_uring, O_DIRECT)
	libnuma-dev                        # warm adapter tier on the compute threads' NUMA node
	liblmdb-dev                        # registry, priors and audit store
	libsystemd-dev                     # sd-bus, sd_notify, journal
	libmicrohttpd-dev                  # OpenAI-compatible HTTP front end
	libcurl4-openssl-dev               # remote tiers
	libfuse3-dev                       # the CUSE fallback of /dev/molly
	dbus systemd curl python3          # a private bus (dbus-daemon), busctl, an HTTP client; the
	                                   # answers printed from JSON (python3)
)
# every test (tools/run-tests.sh)
tests=(
	libclang-rt-14-dev                 # libFuzzer targets and their sanitizer runtimes
	python3-jinja2                     # cross-check of chat templates against real Jinja
	python3-torch                      # molly-train against PyTorch (tests/train-reference.sh)
	fio                                # the adapter-load benchmark's reference (bench-adapter-load.sh)
	libglib2.0-bin util-linux          # gdbus, setpriv: real clients in tests
	python3-dbus                       # D-Bus Stream clients in the integration tests
	libxml2-utils                      # xmllint: checks the D-Bus policy and polkit files
	# /dev/molly in a qemu guest (tests/guest/run.sh): Debian's kernel and its headers for
	# kmod-shim, busybox for the initramfs, 32-bit libc for the 32-bit client; ~250 MB, about
	# 2 minutes
	qemu-system-x86 linux-image-amd64 linux-headers-amd64 busybox-static kmod cpio
	gcc-multilib
)
# tools/build-packages.sh and the package tests (tests/packages/)
packages=(
	dpkg-dev debhelper dh-dkms fakeroot # the Debian packages
	scdoc man-db                       # man pages from docs/man/*.scd; man --warnings
	bash-completion zsh                # completion directories; the completions' checks
	rpm                                # rpmbuild -bb of packaging/rpm/molly.spec
	lintian                            # the Debian packages' checks
	dkms                               # kmod-shim through DKMS
)

want=()
for arg in "$@"; do
	case $arg in
	--runtime) want+=("${runtime[@]}") ;;
	--packages) want+=("${runtime[@]}" "${packages[@]}") ;;
	--all) want+=("${runtime[@]}" "${tests[@]}" "${packages[@]}") ;;
	*) echo "install-deps: unknown option '$arg' (--runtime, --packages, --all)" >&2; exit 2 ;;
	esac
done
if ((!$#)); then
	want=("${runtime[@]}" "${tests[@]}" "${packages[@]}")
	# the official `openai` npm client in the HTTP tests: the machine image ships Node.js with
	# its own npm; Debian's npm package conflicts with that, so install it only where npm is
	# missing
	command -v npm >/dev/null 2>&1 || want+=(nodejs npm)
fi

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
[ "${MOLLY_DEPS:-}" != corpus ] || want+=("${corpus_packages[@]}")
# ---- end corpus ----

missing=()
for p in "${want[@]}"; do
	# (installed, perhaps with triggers still pending: another apt run processes them)
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -E >/dev/null "install ok (installed|triggers-)" ||
		missing+=("$p")
done
if ((${#missing[@]})); then
	# one name once
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | awk '!seen[$0]++')
	echo "install-deps: installing ${missing[*]}"
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: not root; run: sudo apt-get install -y ${missing[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	# wait for another apt/dpkg run's lock instead of failing
	apt-get -o DPkg::Lock::Timeout=600 update -qq
	apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
