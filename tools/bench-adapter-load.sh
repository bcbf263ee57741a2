#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Cold adapter loads against fio on the same files, each run paired with a fio run just
# before it (ratios within the pair):
#   fio --ioengine=io_uring --direct=1 --bs=1M --iodepth=8 --rw=read   (the reference)
#   molly-bench --adapter-load --path uring            (read alone; target >= 0.90x fio)
#   molly-bench --adapter-load --path uring --verify   (read + SHA-256; target >= 0.80x with SHA-NI)
#   molly-bench --adapter-load --path uring [--verify] --jobs 2 --queue-depth 4
#                                                       (two loaders, 8 reads in flight in all)
#   molly-bench --adapter-load --path pread [--verify], --path mmap
# over N distinct files of random bytes (default 16 x 64 MiB = 1 GiB), the page cache dropped
# before every run (root: /proc/sys/vm/drop_caches; else POSIX_FADV_DONTNEED per file). Prints
# one line per run and round, then the median ratio per mode, the CPU model and the load.
#   tools/bench-adapter-load.sh [ROUNDS] [N_FILES] [MIB_EACH] [DIR]
#   (MOLLY_BIN_DIR: default build/release/bin; DIR default /var/tmp, a disk-backed file system)
set -euo pipefail
ROUNDS=${1:-3}
N=${2:-16}
MIB=${3:-64}
BASE=${4:-/var/tmp}
BIN=${MOLLY_BIN_DIR:-$(cd "$(dirname "$0")/.." && pwd)/build/release/bin}
command -v fio >/dev/null || { echo "bench-adapter-load: fio is missing (apt-get install fio)" >&2; exit 77; }
D=$(mktemp -d "$BASE/molly-bench-load.XXXXXX")
trap 'rm -rf "$D"' EXIT
files=()
for ((i = 0; i < N; i++)); do
	head -c $((MIB << 20)) /dev/urandom >"$D/blob$i"
	files+=("$D/blob$i")
done
sync
drop() {
	if [ -w /proc/sys/vm/drop_caches ]; then
		sync && echo 3 >/proc/sys/vm/drop_caches
	else
		/usr/bin/python3 -c 'import os, sys
for f in sys.argv[1:]:
    fd = os.open(f, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "${files[@]}"
	fi
}
fio_gbs() {
	local json
	json=$(fio --name=ref --ioengine=io_uring --direct=1 --bs=1M --iodepth=8 --rw=read \
		--filename="$(IFS=:; echo "${files[*]}")" --output-format=json 2>/dev/null)
	/usr/bin/python3 -c 'import json, sys
j = json.load(sys.stdin)["jobs"][0]["read"]
print("%.4f" % (j["io_bytes"] / (j["runtime"] / 1000.0) / 1e9))' <<<"$json"
}
molly_gbs() {
	"$BIN/molly-bench" --adapter-load "${files[@]}" --json "$@" | tail -1 |
		/usr/bin/python3 -c 'import json, sys; j = json.load(sys.stdin); print("%.4f %s" % (j["gb_s"], j["path"]))'
}
# "--jobs 2 --queue-depth 4": two loaders at once, as the warm tier's two loader threads,
# with fio's 8 reads in flight in all (a SHA-256 is one core's work: two blobs hash on two)
modes=("uring" "uring --verify" "uring --verify --jobs 2 --queue-depth 4"
	"uring --jobs 2 --queue-depth 4" "pread" "pread --verify" "mmap")
declare -A ratios
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs; sha_ni: $(grep -qw sha_ni /proc/cpuinfo && echo yes || echo no)"
echo "# $N files x $MIB MiB on $(df --output=source,fstype "$D" | tail -1), $ROUNDS rounds"
for ((r = 1; r <= ROUNDS; r++)); do
	for m in "${modes[@]}"; do
		# each run right after its own fio run: the pair sees the same host load
		drop
		ref=$(fio_gbs)
		drop
		read -r g path < <(molly_gbs --path $m)
		ratio=$(/usr/bin/python3 -c "print('%.3f' % ($g / $ref))")
		ratios[$m]+="$ratio "
		printf 'round %d  molly %-20s %s GB/s  fio %s GB/s  %sx fio  (ran: %s, load %s)\n' "$r" "$m" "$g" "$ref" "$ratio" "$path" "$(cut -d' ' -f1 /proc/loadavg)"
	done
done
echo "# median ratio to the fio run just before"
for m in "${modes[@]}"; do
	printf '%-20s %s\n' "$m" "$(/usr/bin/python3 -c 'import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))' ${ratios[$m]})"
done
