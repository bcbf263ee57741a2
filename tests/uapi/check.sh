#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The uapi header (include/uapi/linux/molly.h) compiles on its own as C and C++ with
# -Wall -Wextra -Werror (-pedantic too), and tests/uapi/layout.c (offsets, sizes, ioctl numbers)
# holds for 64-bit and, where gcc-multilib is installed, 32-bit callers.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
inc=$src/include/uapi
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
n=0
skipped=()
run() { "$@" || { echo "FAIL: $*"; exit 1; }; n=$((n + 1)); }
warn=(-Wall -Wextra -Werror -pedantic)

echo '#include <linux/molly.h>' >"$t/only.c"
run gcc -std=c99 "${warn[@]}" -I"$inc" -fsyntax-only "$t/only.c"
run gcc -std=gnu17 "${warn[@]}" -I"$inc" -fsyntax-only "$t/only.c"
run gcc -std=gnu17 "${warn[@]}" -I"$inc" -o "$t/layout64" "$src/tests/uapi/layout.c"
"$t/layout64"
if command -v g++ >/dev/null 2>&1; then
	cp "$t/only.c" "$t/only.cc"
	run g++ -std=c++11 "${warn[@]}" -I"$inc" -fsyntax-only "$t/only.cc"
	run g++ -std=c++17 "${warn[@]}" -I"$inc" -fsyntax-only -x c++ "$src/tests/uapi/layout.c"
else
	skipped+=("g++ is not installed")
fi
# -m32 needs gcc-multilib (32-bit libc headers and asm/ headers for i386)
if echo 'int main(void){return 0;}' | gcc -m32 -x c -o "$t/m32" - 2>/dev/null; then
	run gcc -m32 -std=gnu17 "${warn[@]}" -I"$inc" -o "$t/layout32" "$src/tests/uapi/layout.c"
	# compiling is the check (static asserts); this host kernel may not run 32-bit code
	if command -v g++ >/dev/null 2>&1 && echo 'int main(){}' | g++ -m32 -x c++ -o "$t/m32c" - 2>/dev/null; then
		run g++ -m32 -std=c++17 "${warn[@]}" -I"$inc" -fsyntax-only -x c++ "$src/tests/uapi/layout.c"
	fi
else
	skipped+=("no 32-bit toolchain (gcc-multilib): the -m32 layout check did not run")
fi
echo "uapi: $n compilations agree"
if ((${#skipped[@]})); then
	printf 'SKIP: %s\n' "${skipped[@]}"
	# the 64-bit checks passed; a missing 32-bit toolchain is a visible skip
	exit 77
fi
