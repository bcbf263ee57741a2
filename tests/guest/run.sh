#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The /dev/molly tests in a qemu guest (label "guest"): these machines' own kernel cannot load
# modules and has no CUSE, so the module and its clients run under Debian's kernel in qemu
# (TCG; KVM here is PVM, which hangs a stock guest: ../shared/PLATFORM.md §5).
#
# No arguments. It builds what it needs (mollyd, molly, libmolly in build/release; kmod-shim
# against the newest installed linux-headers; the raw client 64- and 32-bit), makes a small
# initramfs (busybox, the 9p modules) whose /init mounts the host's tree read-only over 9p and
# chroots into it with tmpfs on /tmp and /run, boots it inside `timeout`, runs
# tests/guest/guest.sh there, reads the results from the serial log and ends with
# "N passed, N skipped, N failed". Exit 0 (none failed), 1, or 77 (nothing could run: why).
#
# Environment: MOLLY_GUEST_TIMEOUT (the whole boot, default 540 s), MOLLY_GUEST_FUZZ_SECONDS
# (default 60), MOLLY_GUEST_KEEP=1 keeps build/guest/serial.log's neighbours.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${MOLLY_GUEST_BUILD:-$src/build/release}
# Under the source tree, not /tmp: the guest sees the host's tree but its own tmpfs on /tmp.
T=$src/build/guest
boot_timeout=${MOLLY_GUEST_TIMEOUT:-540}
passed=0
skipped=0
failed=0

finish() {
	echo "$passed passed, $skipped skipped, $failed failed"
	if [ "$failed" -gt 0 ]; then exit 1; fi
	if [ "$passed" -eq 0 ]; then exit 77; fi
	exit 0
}
skip_all() {
	echo "SKIP: $*"
	skipped=$((skipped + 1))
	finish
}
stage() { printf '[guest %4ds] %s\n' "$SECONDS" "$*"; }

command -v qemu-system-x86_64 >/dev/null || skip_all "qemu-system-x86 is not installed (tools/install-deps.sh)"
command -v busybox >/dev/null || [ -x /bin/busybox ] || skip_all "busybox-static is not installed"
kver=
for d in $(ls -1 /lib/modules 2>/dev/null | sort -V -r); do
	if [ -d "/lib/modules/$d/build" ] && [ -r "/boot/vmlinuz-$d" ]; then
		kver=$d
		break
	fi
done
[ -n "$kver" ] || skip_all "no kernel with headers in /lib/modules and /boot (linux-image-amd64, linux-headers-amd64)"
kernel=/boot/vmlinuz-$kver
[ -r "$kernel" ] || skip_all "$kernel is not readable"

mkdir -p "$T"
rm -rf "$T/kmod" "$T/bin" "$T/root" "$T/initramfs.cpio.gz"
mkdir -p "$T/bin"

stage "build: mollyd, molly, libmolly (build/release)"
if [ ! -f "$build/build.ninja" ]; then
	cmake --preset release >"$T/cmake.log" 2>&1 || { cat "$T/cmake.log"; failed=1; finish; }
fi
# test-tiers' NUMA cases run again in the two-node guest (numa_two_node_guest skips elsewhere)
if ! cmake --build "$build" --target mollyd molly molly-client test-tiers >"$T/build.log" 2>&1; then
	tail -n 30 "$T/build.log"
	failed=1
	finish
fi

stage "build: kmod-shim against $kver"
# A copy laid out as DKMS installs it: Kbuild finds include/uapi beside itself.
mkdir -p "$T/kmod/include/uapi/linux"
cp "$src/kmod-shim/Kbuild" "$src/kmod-shim/molly_shim.c" "$T/kmod/"
cp "$src/include/uapi/linux/molly.h" "$T/kmod/include/uapi/linux/"
if ! make -C "/lib/modules/$kver/build" M="$T/kmod" modules >"$T/kmod.log" 2>&1 ||
	grep -q 'warning:' "$T/kmod.log"; then
	cat "$T/kmod.log"
	echo "FAIL: kmod-shim does not build cleanly against $kver"
	failed=1
	finish
fi

stage "build: the raw client (64-bit, and 32-bit when gcc-multilib is there)"
cflags=(-std=gnu17 -O2 -Wall -Wextra -Werror -I"$src/include/uapi" -pthread)
gcc "${cflags[@]}" -o "$T/bin/dev-client" "$src/tests/guest/dev-client.c" || { failed=1; finish; }
if echo 'int main(void){return 0;}' | gcc -m32 -static -x c -o "$T/m32-probe" - 2>/dev/null; then
	# a 32-bit toolchain is there: the 32-bit client must build
	gcc -m32 -static "${cflags[@]}" -o "$T/bin/dev-client32" "$src/tests/guest/dev-client.c" ||
		{ echo "FAIL: the 32-bit client does not build"; failed=1; finish; }
else
	echo "note: no 32-bit toolchain (gcc-multilib): the 32-bit client tests will skip"
fi
gcc -std=gnu17 -O2 -Wall -Wextra -Werror -I"$src/include" -o "$T/bin/bench-client" \
	"$src/tests/guest/bench-client.c" -L"$build/lib" -lmolly || { failed=1; finish; }

stage "initramfs: busybox and the 9p modules"
root=$T/root
mkdir -p "$root"/{bin,dev,proc,sys,host,lib/modules}
cp "$(command -v busybox || echo /bin/busybox)" "$root/bin/busybox"
mods=$root/lib/modules/$kver
mkdir -p "$mods"
for m in fs/9p net/9p fs/netfs fs/fscache drivers/virtio; do
	if [ -d "/lib/modules/$kver/kernel/$m" ]; then
		mkdir -p "$mods/kernel/$m"
		cp -r "/lib/modules/$kver/kernel/$m/." "$mods/kernel/$m/"
	fi
done
cp "/lib/modules/$kver/modules.order" "/lib/modules/$kver/modules.builtin" \
	"/lib/modules/$kver/modules.builtin.modinfo" "$mods/" 2>/dev/null
depmod -b "$root" "$kver" || { echo "FAIL: depmod"; failed=1; finish; }
cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in virtio_pci 9pnet_virtio 9p; do modprobe \$m || echo "GUEST-INIT modprobe \$m failed"; done
if ! mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /host; then
	echo "GUEST-INIT cannot mount the host tree"
	poweroff -f
fi
mount -t proc proc /host/proc || echo "GUEST-INIT no /proc"
mount -t sysfs sys /host/sys
mount -t devtmpfs dev /host/dev
ln -s /proc/self/fd /host/dev/fd
ln -s /proc/self/fd/0 /host/dev/stdin
ln -s /proc/self/fd/1 /host/dev/stdout
ln -s /proc/self/fd/2 /host/dev/stderr
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs shm /host/dev/shm
ls /host/proc | head -3
mount -t cgroup2 cgroup2 /host/sys/fs/cgroup 2>/dev/null
mount -t tracefs tracefs /host/sys/kernel/tracing 2>/dev/null
mount -t tmpfs tmp /host/tmp
mount -t tmpfs run /host/run
mount -t tmpfs vartmp /host/var/tmp
echo "GUEST-INIT up at \$(cut -d' ' -f1 /proc/uptime) s"
chroot /host /bin/bash "$src/tests/guest/guest.sh" "$src" "$build" "$T" "${MOLLY_GUEST_FUZZ_SECONDS:-60}"
echo "GUEST-EXIT \$?"
poweroff -f
EOF
chmod +x "$root/init"
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$T/initramfs.cpio.gz"

accel=tcg
stage "boot: qemu -accel $accel, 2 CPUs on 2 NUMA nodes, timeout ${boot_timeout}s"
log=$T/serial.log
start=$SECONDS
# Two NUMA nodes of one CPU (one socket each: a node split inside a package WARNs) and 1 GiB
# each: the machines here have one, the guest shows the tiers' placement across two.
timeout "$boot_timeout" qemu-system-x86_64 -accel "$accel" -cpu max -m 2048 -smp 2,sockets=2,cores=1,threads=1 -nographic -no-reboot \
	-object memory-backend-ram,id=mem0,size=1024M -object memory-backend-ram,id=mem1,size=1024M \
	-numa node,nodeid=0,cpus=0,memdev=mem0 -numa node,nodeid=1,cpus=1,memdev=mem1 \
	-kernel "$kernel" -initrd "$T/initramfs.cpio.gz" \
	-append "console=ttyS0 panic=-1 loglevel=4 rdinit=/init" \
	-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
	</dev/null >"$log" 2>&1
qrc=$?
stage "guest ran $((SECONDS - start)) s (qemu exit $qrc)"

while read -r _ verdict name rest; do
	case $verdict in
	PASS) passed=$((passed + 1)); echo "ok - $name${rest:+ ($rest)}" ;;
	SKIP) skipped=$((skipped + 1)); echo "SKIP: $name: $rest" ;;
	FAIL) failed=$((failed + 1)); echo "FAIL: $name: $rest" ;;
	esac
done < <(grep -a '^GUEST-RESULT ' "$log" | tr -d '\r')

if ! grep -aq '^GUEST-DONE' "$log"; then
	failed=$((failed + 1))
	echo "FAIL: the guest did not finish (qemu exit $qrc; timeout $boot_timeout s); serial log tail:"
	tail -n 40 "$log"
fi
# The host's reading of the same log: no oops, BUG or WARN anywhere in the guest's kernel.
if grep -av '^GUEST-' "$log" | grep -aE '(Oops|BUG:|WARNING:|general protection fault|Call Trace)' >"$T/oops.txt"; then
	failed=$((failed + 1))
	echo "FAIL: serial-log: $(head -n 5 "$T/oops.txt")"
else
	passed=$((passed + 1))
	echo "ok - serial-log (no oops, BUG or WARN)"
fi
finish
